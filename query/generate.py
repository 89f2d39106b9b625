"""Answer generation: an OpenAI-compatible client, or an offline extractive default.

Both take the assembled context (system prompt, user prompt with spotlighted sources, the
`SourceChunk`s behind the `[S1]` ids) and return answer text with inline citations, which
`query.verify` then checks. The extractive generator lets the embedded default answer with no
network: it only copies source sentences, each with its citation (grounded by construction),
and never one that reads like an instruction to the assistant (sources are untrusted).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from opentelemetry import trace

from ragstream.core.answers import SourceChunk
from ragstream.core.language import CJK_SENTENCE_END
from ragstream.core.telemetry import span
from ragstream.operators.embed import Embedder
from ragstream.operators.llm import async_openai_client, openai_client
from ragstream.query.verify import (
    CITATION,
    content_tokens,
    quotable,
    sentence_spans,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam

# An LLM's reply that declines: the `NOT_ANSWERABLE` the system prompt (query/assemble.py)
# asks for when the sources do not hold the answer, or a model's own words for it.
_DECLINES = re.compile(
    r"^\W*(?:NOT[_ ]ANSWERABLE\b|(?:I'?m sorry,? )?(?:I )?(?:cannot|can't|can not|am unable to|"
    r"am not able to) answer\b.{0,60}\bsources?\b|the (?:provided )?sources? (?:do(?:es)? not|"
    r"don't|doesn't) (?:contain|hold|say|mention|include|provide|answer)\b)",
    re.IGNORECASE | re.DOTALL,
)


def declined(text: str) -> str:
    """The generator's reason when its reply says the sources do not hold the answer (and
    cites nothing), else "".

    >>> declined("NOT_ANSWERABLE: the sources do not say who founded the company.")
    'the sources do not say who founded the company.'
    >>> declined("I cannot answer this from the sources.")
    'I cannot answer this from the sources.'
    >>> declined("The sources do not mention X, but Y holds [S1].")
    ''
    """
    stripped = text.strip()
    if not stripped or CITATION.search(stripped) or not _DECLINES.match(stripped):
        return ""
    reason = re.sub(r"^\W*NOT[_ ]ANSWERABLE\W*", "", stripped, flags=re.IGNORECASE)
    return reason or stripped


class ContextLike(Protocol):
    """What `query.assemble` produces; any object with these attributes will do."""

    @property
    def sources(self) -> Sequence[SourceChunk]: ...
    @property
    def system(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def evidence(self) -> Sequence[str]: ...


class Generator(Protocol):
    name: str

    def generate(self, question: str, context: ContextLike) -> str: ...
    def stream(self, question: str, context: ContextLike) -> Iterator[str]: ...


class GenerationError(RuntimeError):
    """The generation endpoint failed (unreachable, timed out, HTTP error, malformed reply)."""


def _approx_tokens(*texts: str) -> int:
    return sum(len(t) for t in texts) // 4


class OpenAIGenerator:
    """Chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, ...):
    blocking (`generate`, `stream`) for the CLI and the embedded client, awaited
    (`agenerate`) for the server, where a slow endpoint costs waiting, not a thread."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_s: float = 60.0,
        max_tokens: int = 512,
        temperature: float = 0.0,
        max_retries: int = 1,
    ) -> None:
        self._client = openai_client(
            base_url, api_key, timeout_s=timeout_s, max_retries=max_retries
        )
        self._async_options = {"timeout_s": timeout_s, "max_retries": max_retries}
        self._async_client: AsyncOpenAI | None = None  # made in the server's event loop
        self._api_key = api_key
        self.base_url, self.model = base_url, model
        self.max_tokens, self.temperature = max_tokens, temperature
        self.name = f"openai:{model}"
        # a conversation's answer is written from the question as asked with the history
        self.reads_history = True

    def generate(self, question: str, context: ContextLike) -> str:
        return "".join(self._run(question, context, stream=False))

    def stream(self, question: str, context: ContextLike) -> Iterator[str]:
        yield from self._run(question, context, stream=True)

    def _run(self, question: str, context: ContextLike, stream: bool) -> Iterator[str]:
        import openai

        messages = _messages(question, context)
        with self._span(messages) as sp:
            chars = 0
            try:
                reply = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,
                    stream=stream,
                    max_tokens=self.max_tokens,
                    temperature=self.temperature,
                )
                pieces: Iterable[str | None] = (
                    (c.choices[0].delta.content if c.choices else None for c in reply)
                    if isinstance(reply, openai.Stream)
                    else [reply.choices[0].message.content]
                )
                for piece in pieces:
                    if piece:
                        chars += len(piece)
                        yield piece
            except (openai.OpenAIError, IndexError, AttributeError) as exc:
                raise self._failed(exc) from exc
            finally:
                sp.set_attribute("output_chars", chars)

    async def agenerate(
        self, question: str, context: ContextLike, on_text: Callable[[str], None] | None = None
    ) -> str:
        """The completion, awaited; streamed when `on_text` takes the pieces as they come."""
        import openai

        messages = _messages(question, context)
        pieces: list[str] = []
        with self._span(messages) as sp:
            try:
                client, most, warmth = self._aclient(), self.max_tokens, self.temperature
                if on_text is None:
                    reply = await client.chat.completions.create(
                        model=self.model, messages=messages, max_tokens=most, temperature=warmth
                    )
                    pieces.append(reply.choices[0].message.content or "")
                else:
                    chunks = await client.chat.completions.create(
                        model=self.model,
                        messages=messages,
                        stream=True,
                        max_tokens=most,
                        temperature=warmth,
                    )
                    async with chunks:  # closed however it ends: cancelled, the request too
                        async for chunk in chunks:
                            piece = chunk.choices[0].delta.content if chunk.choices else None
                            if piece:
                                pieces.append(piece)
                                on_text(piece)
            except (openai.OpenAIError, IndexError, AttributeError) as exc:
                raise self._failed(exc) from exc
            finally:
                sp.set_attribute("output_chars", sum(map(len, pieces)))
        return "".join(pieces)

    def _aclient(self) -> AsyncOpenAI:
        if self._async_client is None:
            o = self._async_options
            self._async_client = async_openai_client(
                self.base_url,
                self._api_key,
                timeout_s=float(o["timeout_s"]),
                max_retries=int(o["max_retries"]),
            )
        return self._async_client

    def _span(self, messages: list[ChatCompletionMessageParam]) -> AbstractContextManager[Any]:
        tokens = _approx_tokens(*(str(m.get("content", "")) for m in messages))
        return span(
            "query.generate", generator=self.name, model=self.model, prompt_tokens_approx=tokens
        )

    def _failed(self, exc: Exception) -> GenerationError:
        return GenerationError(
            f"generation failed ({self.model} at {self.base_url}): {type(exc).__name__}: {exc}"
        )


def _messages(question: str, context: ContextLike) -> list[ChatCompletionMessageParam]:
    """The chat messages of one answer: the system rules, a conversation's earlier
    messages (when the context carries them), and the sources with the question."""
    user = context.user
    if question and question not in user:  # the assembler normally embeds the question
        user = f"{user}\n\nQuestion: {question}"
    history: list[ChatCompletionMessageParam] = [
        {"role": "assistant", "content": m.content}
        if m.role == "assistant"
        else {"role": "user", "content": m.content}
        for m in getattr(context, "history", ())
    ]
    system: ChatCompletionMessageParam = {"role": "system", "content": context.system}
    return [system, *history, {"role": "user", "content": user}]


def _judged(candidates: Sequence[tuple[int, int, str, str]], evidence: Sequence[str]) -> list[int]:
    """The candidates that are sentences the answer judge read as holding the answer, in
    the judge's order (texts compared with whitespace normalized)."""
    where = {text: j for j, (*_, text) in reversed(list(enumerate(candidates)))}
    found = (where.get(" ".join(e.split())) for e in evidence)
    return list(dict.fromkeys(j for j in found if j is not None))


def cited(sentence: str, cid: str) -> str:
    """A copied sentence with its citation before its final stop: `... [S1].`, and for a
    CJK sentence `...[S1]。` (no space, its own full stop kept).

    >>> cited("Yen is the currency.", "S1"), cited("日元是日本的货币。", "S2")
    ('Yen is the currency [S1].', '日元是日本的货币[S2]。')
    """
    stop = sentence[-1:] if sentence[-1:] in CJK_SENTENCE_END else ""
    if stop:
        return f"{sentence[:-1]}[{cid}]{stop}"
    return f"{sentence.rstrip('.!?:;, ')} [{cid}]."


class ExtractiveGenerator:
    """Offline default: the source sentences that answer the question, each with its `[Sn]`.

    With the trained answer judge (`judged`, the default), the answer is what it read:
    `context.evidence` holds the sentences it scored as holding the answer, best first, and
    the answer copies them in that order, at most `max_sentences`. The first sentence is
    the one that holds the answer; the others support or explain it. None of them in the
    sources is an empty answer (a `not_answerable` refusal), never a list of sentences
    that are only near the question.

    Without a judge, the sentences are chosen by meaning: score = cosine(query, sentence)
    with the given embedder + 0.2 x the fraction of the question's content tokens present
    in the sentence, at least `min_similarity` (0.35 lies between where off-topic and
    on-topic sentences score with all-MiniLM-L6-v2), best first.
    """

    def __init__(
        self,
        embedder: Embedder | Callable[[], Embedder],
        max_sentences: int = 3,
        min_similarity: float = 0.35,
        *,
        judged: bool = False,
    ) -> None:
        # a callable is asked per answer: the engine hands the live collection's embedder,
        # which a blue/green promote or rollback replaces while the generator lives on
        self._embedder = embedder
        self.max_sentences = max_sentences
        self.min_similarity = min_similarity
        self.judged = judged
        self.name = "extractive"

    @property
    def embedder(self) -> Embedder:
        return self._embedder() if callable(self._embedder) else self._embedder

    def _candidates(self, sources: Sequence[SourceChunk]) -> list[tuple[int, int, str, str]]:
        seen: set[str] = set()
        out = []
        for i, src in enumerate(sources):
            for start, end in sentence_spans(src.text):
                text = " ".join(src.text[start:end].split())
                if text in seen or not quotable(text):
                    continue
                seen.add(text)
                out.append((i, start, src.cid, text))
        return out

    def generate(self, question: str, context: ContextLike) -> str:
        tokens = _approx_tokens(question, *(s.text for s in context.sources))
        model = self.embedder.version.name
        with span("query.generate", generator=self.name, model=model, prompt_tokens_approx=tokens):
            candidates = self._candidates(context.sources)
            if not candidates or not question.strip():
                return ""
            if self.judged:
                chosen = _judged(candidates, context.evidence)[: self.max_sentences]
            else:
                chosen = self._nearest(question, candidates)
            answer = " ".join(cited(candidates[j][3], candidates[j][2]) for j in chosen)
            trace.get_current_span().set_attribute("output_chars", len(answer))
            return answer

    def _nearest(self, question: str, candidates: list[tuple[int, int, str, str]]) -> list[int]:
        """The candidates nearest the question in meaning, best first (no judge)."""
        embedder = self.embedder
        query = np.asarray(embedder.encode_query(question), dtype=np.float32)
        cosine = embedder.encode_passages([c[3] for c in candidates]) @ query
        q_tokens = content_tokens(question)
        scores = [
            float(cos) + 0.2 * len(q_tokens & content_tokens(c[3])) / max(len(q_tokens), 1)
            for cos, c in zip(cosine, candidates, strict=True)
        ]
        ranked = sorted(range(len(candidates)), key=lambda j: -scores[j])
        return [j for j in ranked[: self.max_sentences] if scores[j] >= self.min_similarity]

    def stream(self, question: str, context: ContextLike) -> Iterator[str]:
        answer = self.generate(question, context)
        if answer:
            yield answer
