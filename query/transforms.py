"""Query transforms: an LLM rewrites the question before retrieval, one leg at a time.

- **keywords** → the lexical leg only. BM25 matches words, and a question rarely uses the
  words of the passage that answers it; the LLM's keywords (distinctive terms, synonyms,
  technical names) are *added* to the question for BM25, so a poor extraction can only add
  terms, never lose the question's own.
- **hyde** → the dense leg only. A hypothetical answer passage (HyDE, Gao et al. 2022) lies
  closer in embedding space to real answer passages than a short question does; the dense leg
  embeds question + passage (the question keeps a wrong guess from drifting off-topic).
- **decompose** → a compound question becomes sub-questions, each retrieved on its own (with
  the other transforms applied to it) and fused by RRF (`query.retrieve.fuse_results`), so one
  part of the question cannot crowd the other out of the candidates.

Each is off by default and needs an OpenAI-compatible endpoint (`generator.base_url`): no
offline model here can write them. Prompt building and reply parsing are pure functions; the
call goes through the same `OpenAIGenerator` client the answer uses. A failed call falls back
to the untransformed text (a transform is an optimization, never a reason to fail a query) and
is marked on its span, `ragstream.query.transform.<name>`, which also carries its latency.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ragstream.connectors.protocols import SearchFilter
from ragstream.core.answers import DEFAULT_RRF_K, SourceChunk
from ragstream.core.settings import GeneratorSettings, QuerySettings, Settings
from ragstream.core.telemetry import span
from ragstream.query.generate import GenerationError, Generator, OpenAIGenerator
from ragstream.query.retrieve import NO_FILTER, Fusion, RetrievalResult, Retriever, fuse_results

Transform = Literal["keywords", "hyde", "decompose"]
TRANSFORMS: tuple[Transform, ...] = ("keywords", "hyde", "decompose")
MAX_KEYWORDS = 16
MAX_PASSAGE_CHARS = 2000

KEYWORDS_SYSTEM = (
    "You turn a search question into keywords for a BM25 keyword index. Reply with one line "
    "of 3 to 12 keywords or short phrases separated by commas: the question's most "
    "distinctive terms plus synonyms and technical terms that a document answering it would "
    "use. No explanations, no numbering."
)
HYDE_SYSTEM = (
    "Write a short passage (2 to 4 sentences) that directly answers the question, in the "
    "style of the document or paper abstract that would contain the answer. State specific "
    "facts plausibly even if you are unsure: the passage is only used to search for real "
    "documents and is never shown to anyone. Reply with the passage only."
)
DECOMPOSE_SYSTEM = (
    "You split a search question into the separate questions it asks. If it asks about "
    "several distinct things, reply with each as a self-contained question on its own line "
    "(at most {n} lines). If it asks about one thing, reply with the question unchanged on one "
    "line. No numbering, no explanations."
)

_LABEL = re.compile(r"^\s*(?:keywords?|passage|answer|questions?|sub-?questions?)\s*:\s*", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\))\s*")
_QUOTES = "\"'`“”‘’"


class TransformUnavailable(ValueError):
    """A transform is switched on but no OpenAI-compatible endpoint is configured."""


@dataclass(frozen=True)
class Prompt:
    """A chat prompt with no sources: what `Generator.generate` takes as its context."""

    system: str
    user: str
    sources: tuple[SourceChunk, ...] = ()
    evidence: tuple[str, ...] = ()


def keywords_prompt(question: str) -> Prompt:
    return Prompt(KEYWORDS_SYSTEM, f"Question: {question}")


def hyde_prompt(question: str) -> Prompt:
    return Prompt(HYDE_SYSTEM, f"Question: {question}")


def decompose_prompt(question: str, max_parts: int) -> Prompt:
    return Prompt(DECOMPOSE_SYSTEM.format(n=max_parts), f"Question: {question}")


def _clean(piece: str) -> str:
    return " ".join(_BULLET.sub("", _LABEL.sub("", piece)).strip().strip(_QUOTES).split())


def parse_keywords(reply: str) -> str:
    """Comma/semicolon/line separated keywords → one space-joined string, deduplicated."""
    seen: dict[str, str] = {}
    for line in reply.splitlines():
        for piece in re.split(r"[,;]", _LABEL.sub("", line)):
            term = _clean(piece)
            if term and term.lower() not in seen:
                seen[term.lower()] = term
    return " ".join(list(seen.values())[:MAX_KEYWORDS])


def parse_passage(reply: str) -> str:
    """The passage with a leading label, quotes and extra whitespace removed, length-capped."""
    return " ".join(_LABEL.sub("", reply.strip()).strip(_QUOTES).split())[:MAX_PASSAGE_CHARS]


def parse_subquestions(reply: str, max_parts: int) -> list[str]:
    """One sub-question per line (bullets and numbering dropped), deduplicated, capped."""
    seen: dict[str, str] = {}
    for line in reply.splitlines():
        part = _clean(line)
        if part and part.lower() not in seen:
            seen[part.lower()] = part
    return list(seen.values())[:max_parts]


class SubQuery(BaseModel):
    """One retrieval: the (sub-)question and what each leg searches with (None: the question)."""

    model_config = ConfigDict(frozen=True)

    question: str
    lexical_query: str | None = None
    dense_text: str | None = None


class QueryPlan(BaseModel):
    """The retrievals one question becomes, with each transform's latency (summed over
    sub-questions) under `transform.<name>` and the transforms whose call failed."""

    question: str
    subqueries: list[SubQuery]
    timings_ms: dict[str, float]
    failed: list[Transform]


def enabled_transforms(q: QuerySettings) -> tuple[Transform, ...]:
    flags = {"keywords": q.transform_keywords, "hyde": q.transform_hyde}
    flags["decompose"] = q.transform_decompose
    return tuple(t for t in TRANSFORMS if flags[t])


def endpoint_generator(g: GeneratorSettings) -> OpenAIGenerator | None:
    """The OpenAI-compatible client of the configured endpoint, or None when there is none:
    the one place the engine's generator and the transforms build it from settings."""
    if not g.base_url:
        return None
    return OpenAIGenerator(g.base_url, g.model, g.api_key, g.timeout_s, g.max_tokens)


class QueryTransformer:
    """Turns a question into a `QueryPlan` with the enabled transforms, via an LLM."""

    def __init__(
        self, llm: Generator, transforms: Iterable[Transform], max_subqueries: int = 3
    ) -> None:
        self.llm = llm
        wanted = set(transforms)
        self.transforms = tuple(t for t in TRANSFORMS if t in wanted)
        if wanted - set(TRANSFORMS) or not self.transforms:
            raise ValueError(f"transforms must be a non-empty subset of {TRANSFORMS}")
        if max_subqueries < 2:
            raise ValueError(f"max_subqueries must be >= 2, got {max_subqueries}")
        self.max_subqueries = max_subqueries

    @classmethod
    def from_settings(
        cls, settings: Settings, transforms: Iterable[Transform] | None = None
    ) -> QueryTransformer | None:
        """The transformer for `transforms` (default: those switched on in settings); None
        when none is on. Raises `TransformUnavailable` when one is on without an endpoint."""
        names = tuple(transforms) if transforms is not None else None
        names = names if names is not None else enabled_transforms(settings.query)
        if not names:
            return None
        llm = endpoint_generator(settings.generator)
        if llm is None:
            raise TransformUnavailable(
                f"query transforms {list(names)} need an OpenAI-compatible endpoint: set "
                "generator.base_url (RAGSTREAM_GENERATOR__BASE_URL) or switch them off"
            )
        return cls(llm, names, settings.query.max_subqueries)

    @property
    def name(self) -> str:
        return "+".join(self.transforms)

    def plan(self, question: str) -> QueryPlan:
        timings: dict[str, float] = {}
        failed: list[Transform] = []
        parts = [question]
        if "decompose" in self.transforms:
            prompt = decompose_prompt(question, self.max_subqueries)
            reply = self._ask("decompose", prompt, timings, failed)
            split = parse_subquestions(reply or "", self.max_subqueries)
            parts = split if len(split) > 1 else [question]
        subqueries = [self._subquery(part, timings, failed) for part in parts]
        return QueryPlan(
            question=question, subqueries=subqueries, timings_ms=timings, failed=failed
        )

    def _subquery(self, text: str, timings: dict[str, float], failed: list[Transform]) -> SubQuery:
        lexical = dense = None
        if "keywords" in self.transforms:
            words = parse_keywords(self._ask("keywords", keywords_prompt(text), timings, failed))
            lexical = f"{text} {words}" if words else None
        if "hyde" in self.transforms:
            passage = parse_passage(self._ask("hyde", hyde_prompt(text), timings, failed))
            dense = f"{text}\n{passage}" if passage else None
        return SubQuery(question=text, lexical_query=lexical, dense_text=dense)

    def _ask(
        self, name: Transform, prompt: Prompt, timings: dict[str, float], failed: list[Transform]
    ) -> str:
        """One LLM call in its own span; "" (and a mark on the span) when it fails."""
        start = time.perf_counter()
        with span(f"query.transform.{name}", generator=self.llm.name) as sp:
            try:
                reply = self.llm.generate("", prompt)
            except GenerationError as exc:
                reply = ""
                failed.append(name)
                sp.set_attribute("failed", True)
                sp.set_attribute("error", str(exc)[:300])
            ms = (time.perf_counter() - start) * 1000.0
            sp.set_attribute("latency_ms", ms)
            sp.set_attribute("output_chars", len(reply))
        timings[f"transform.{name}"] = timings.get(f"transform.{name}", 0.0) + ms
        return reply


def retrieve_transformed(
    retriever: Retriever,
    question: str,
    transformer: QueryTransformer | None,
    *,
    n: int = 100,
    flt: SearchFilter = NO_FILTER,
    fusion: Fusion = "rrf",
    k: int = DEFAULT_RRF_K,
    dense_text: str | None = None,
    lexical_query: str | None = None,
    dense_vector: Sequence[float] | None = None,
) -> RetrievalResult:
    """Retrieve for `question` as planned by `transformer` (plain retrieval when None).

    `dense_text` / `lexical_query`: what each leg searches with when there is no
    transformer (a conversation's plan), and `dense_vector` the query vector of
    `dense_text` where the caller has it already; a transformer plans from `question` alone.
    `timings_ms` adds `transform.<name>` to the legs' timings (summed over sub-questions),
    and `total` covers the transforms too: it is what the user waits for."""
    if transformer is None:
        return retriever.retrieve(
            question,
            n=n,
            flt=flt,
            fusion=fusion,
            k=k,
            lexical_query=lexical_query,
            dense_text=dense_text,
            dense_vector=dense_vector,
        )
    start = time.perf_counter()
    plan = transformer.plan(question)
    results = [
        retriever.retrieve(
            sq.question,
            n=n,
            flt=flt,
            fusion=fusion,
            k=k,
            lexical_query=sq.lexical_query,
            dense_text=sq.dense_text,
        )
        for sq in plan.subqueries
    ]
    result = fuse_results(question, results, k)
    total = (time.perf_counter() - start) * 1000.0
    timings = {**result.timings_ms, **plan.timings_ms, "total": total}
    return result.model_copy(update={"query": question, "timings_ms": timings})


__all__ = [
    "TRANSFORMS",
    "Prompt",
    "QueryPlan",
    "QueryTransformer",
    "SubQuery",
    "Transform",
    "TransformUnavailable",
    "enabled_transforms",
    "endpoint_generator",
    "parse_keywords",
    "parse_passage",
    "parse_subquestions",
    "retrieve_transformed",
]
