"""The query pipeline: a question in, a verified `Answer` or a structured refusal out.

An answer runs these stages in order (`QueryEngine._stages`); each computes what it needs,
then its refusal rules (query/refusal.py) decide, and the first refusal ends the answer:

1. rank: retrieve → fuse → rerank under the caller's filters and tenants. Refused by
   `wordless` (the question has no letters) and the sufficiency `gate` (check "gate").
2. answerable: the answer judge reads the best sentences and the decision combines its
   reading with the index's signals (query/answerable.py). Refused by `not_answerable`
   (check "decision").
3. generate: assemble → generate → verify. Refused by `declined_answer`: the generator
   said the sources hold no answer (check "generator").
4. cite: the verified text, its citations and the sources' file versions. Refused by
   `no_answer`: no sentence answers (check "generator"), and `low_grounding`: too few
   supported claims (check "grounding").
5. names: the question's proper names in the documents the answer cites. Refused by
   `unnamed`: they never name what is asked about (check "names").

`retrieve` runs stage 1 alone, an answer with `generate=False` stops after stage 2, and
`answer_from` (the gold-context evaluation) replaces stages 1–2 with the answer judge's
reading of the chunks it is given, its verdict not applied. Query transforms
(query/transforms.py), when switched on, rewrite what each retrieval leg searches with;
rerank, assembly and generation still see the question as asked.

One `QueryEngine` owns the stores of one data dir (read-only use) and the models
(`QueryModels`, which several engines can share). The embedded `Client` calls `answer`; the
HTTP server calls `answer_async`, the same stages and rules with the CPU stages on its
thread pool and an endpoint generator's completion awaited between them, so both return
identical `Answer`s. Every query is one root span `ragstream.query` whose trace id the
answer carries.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.core.answers import (
    Answer,
    Answerability,
    QueryRequest,
    Refusal,
    Retrieval,
    SourceChunk,
)
from ragstream.core.answers import Verification as Verified
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure, span
from ragstream.operators.embed import Embedder, with_vector_memo
from ragstream.query import refusal, shapes
from ragstream.query.answerable import Asked, Limits, answering, judge, unmentioned_in
from ragstream.query.answerable import ranking_signals as ranking
from ragstream.query.assemble import Context, assemble
from ragstream.query.decision import LEAD_TAIL, leg_leads
from ragstream.query.freshness import with_versions
from ragstream.query.gate import DEFAULT_DENSE_FLOOR
from ragstream.query.generate import ExtractiveGenerator, Generator
from ragstream.query.models import QueryModels
from ragstream.query.rerank import NO_RERANKER, Reranked, rerank, rerank_depth
from ragstream.query.retrieve import Candidate, FixedSide, LiveSide, Retriever
from ragstream.query.transforms import QueryTransformer, endpoint_generator, retrieve_transformed
from ragstream.query.verify import verify

# the side the current answer pinned (per thread / task: concurrent answers pin their own)
_PINNED: ContextVar[LiveSide | None] = ContextVar("ragstream_query_side", default=None)


@dataclass
class _Run:
    """One answer in the making: the request, and what the stages so far computed."""

    request: QueryRequest
    answer: Answer
    root: Span  # the answer's root span
    tenants: tuple[str, ...] | None = None
    on_text: Callable[[str], None] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    ranked: list[Reranked] = field(default_factory=list)
    leads: dict[str, float] = field(default_factory=dict)  # each leg's lead (rank stage)
    evidence: list[str] = field(default_factory=list)  # sentences read as answering
    sources: list[SourceChunk] = field(default_factory=list)  # what the generator was shown
    checked: Verified | None = None


# one stage of an answer: it computes into the run, then returns its rules' refusal or None
Stage = Callable[[_Run], Refusal | None]
# runs `fn(*args)` off the event loop (a server's bounded thread pool) and awaits the result
Offload = Callable[..., Awaitable[Any]]


class QueryEngine:
    def __init__(
        self, settings: Settings, retriever: Retriever, models: QueryModels | None = None
    ) -> None:
        """`models`: the models to answer with (None: load those `settings` name)."""
        self.settings = settings
        self.retriever = retriever
        models = models if models is not None else QueryModels.load(settings)
        self.reranker = models.reranker
        self.support_judge = models.support_judge
        self.answer_judge = models.answer_judge
        self.decision = models.decision
        q = settings.query
        self.log = (
            RetrievalLog(settings.retrieval_log_path, q.log_max_bytes, q.log_keep)
            if q.log_queries
            else None
        )
        self.generator: Generator = endpoint_generator(settings.generator) or ExtractiveGenerator(
            lambda: self.sentence_embedder, judged=self.answer_judge is not None
        )
        # query transforms (keywords / HyDE / decompose): None unless switched on in settings
        self.transformer = QueryTransformer.from_settings(settings)

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, models: QueryModels | None = None) -> Iterator[QueryEngine]:
        configure(settings.telemetry.exporter, settings.telemetry.otlp_endpoint)
        with Retriever.open(settings) as retriever:
            yield cls(settings, retriever, models)

    @property
    def models(self) -> QueryModels:
        """The models this engine answers with, to build another engine without reloading."""
        return QueryModels(self.reranker, self.support_judge, self.answer_judge, self.decision)

    @property
    def sentence_embedder(self) -> Embedder:
        """The answer's embedder behind the vector memo that the extractive generator and
        the verifier share (they encode mostly the same sentences): the side the answer
        pinned, so a promote or rollback landing mid-answer swaps neither model."""
        return with_vector_memo(self._side().embedder, self.settings.query.vector_memo)

    @property
    def reranker_name(self) -> str:
        return self.reranker.name if self.reranker is not None else NO_RERANKER

    def answer(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Answer:
        """Answer one question; `tenants` comes from the caller's API key, never the body.

        `on_text` receives the generator's text as it is produced (streaming); the returned
        `Answer` is the verified one either way, so a streamed answer ends equal to an
        unstreamed one."""
        stages = self._stages() if request.generate else self._stages()[:2]
        with self._started(request, tenants, on_text) as run:
            answer = self._run(run, stages)
        self._logged(request, tenants, answer)
        return answer

    async def answer_async(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer:
        """`answer` for an asyncio server, the same stages, rules and result: the CPU stages
        run through `offload` (a bounded thread pool), and an endpoint generator's completion
        is awaited in between, so a slow LLM costs waiting, not a thread. Cancelled (the
        client went away), the completion's request is closed with it."""
        awaited = getattr(self.generator, "agenerate", None)
        if awaited is None or not request.generate:
            return await offload(self.answer, request, tenants, on_text)
        with self._started(request, tenants, on_text) as run:
            refused = await offload(self._until_refused, run, self._stages()[:2])
            if refused is None:
                context = await offload(self._assembled, run)
                with _timed(run.timings, "generate"):
                    text = await awaited(request.query, context, on_text)
                refused = await offload(self._after_text, run, context, text)
            answer = self._closed(run, refused)
        self._logged(request, tenants, answer)
        return answer

    def _logged(
        self, request: QueryRequest, tenants: tuple[str, ...] | None, answer: Answer
    ) -> None:
        if self.log is not None:
            self.log.append(shapes.log_entry(request.query, request.filters, tenants, answer))

    def retrieve(self, request: QueryRequest, tenants: tuple[str, ...] | None = None) -> Retrieval:
        """Ranked candidates with their text and the gate's verdict; nothing is generated."""
        with self._started(request, tenants) as run:
            return shapes.retrieval(self._run(run, self._stages()[:1]), run.ranked)

    def answer_from(self, request: QueryRequest, chunks: Sequence[IndexedChunk]) -> Answer:
        """Generate and verify from exactly these chunks (best first), skipping retrieval,
        rerank and the gate: the gold-context evaluation asks whether the generator and the
        verifier accept an answer when the evidence is certainly in the context. Not logged:
        it is not a query anyone asked the index."""
        with self._started(request, gold_context=len(chunks)) as run:
            gold = [
                Candidate(chunk=c, score=1 / i, ranks={}, scores={})
                for i, c in enumerate(chunks, 1)
            ]
            self._ranked(run, [Reranked(candidate=c) for c in gold])
            return self._run(run, (self._read, *self._stages()[2:]))

    def _stages(self) -> tuple[Stage, ...]:
        """Every stage of an answer, in order (the module docstring names each one's
        refusal rules)."""
        return (self._rank, self._answerable, self._generate, self._cite, self._names)

    def _run(self, run: _Run, stages: Sequence[Stage]) -> Answer:
        """The stages in order, until one refuses: that refusal is the answer's."""
        return self._closed(run, self._until_refused(run, stages))

    @staticmethod
    def _until_refused(run: _Run, stages: Sequence[Stage]) -> Refusal | None:
        for stage in stages:
            if (refused := stage(run)) is not None:
                return refused
        return None

    def _closed(self, run: _Run, refused: Refusal | None) -> Answer:
        run.answer.refusal, run.answer.timings_ms = refused, run.timings
        run.root.set_attribute("refused", refused is not None)
        if run.checked is not None:
            run.root.set_attribute("grounding", run.answer.grounding)
        return run.answer

    def _rank(self, run: _Run) -> Refusal | None:
        """retrieve → fuse → rerank under the caller's filters and tenants; also how far
        each leg's best candidate leads its pool (an answerability signal)."""
        q, request = self.settings.query, run.request
        result = retrieve_transformed(
            Retriever(FixedSide(self._side()), self.retriever.lexical),
            request.query,
            self.transformer,
            n=request.n,
            flt=shapes.search_filter(request.filters, run.tenants),
            fusion=request.fusion,
            k=request.rrf_k,
        )
        run.timings.update({f"retrieve.{k}": v for k, v in result.timings_ms.items()})
        depth = rerank_depth(self.reranker, q.rerank_depth, request.k)
        head = list(result.candidates[:depth])  # at least k; all of them without a reranker
        with _timed(run.timings, "rerank"):
            ranked = rerank(request.query, head, self.reranker, request.k)
        self._ranked(run, ranked)
        run.leads = leg_leads([c.scores for c in result.candidates[: LEAD_TAIL[1]]])
        dense_floor = q.dense_floor if q.dense_floor is not None else DEFAULT_DENSE_FLOOR
        return refusal.wordless(request.query) or refusal.gate(
            ranked, rerank_floor=q.rerank_floor, dense_floor=dense_floor
        )

    def _answerable(self, run: _Run) -> Refusal | None:
        """The answer judge reads the best sentences of the chunks that passed the gate, and
        the decision combines its reading with the index's signals (query/answerable.py)."""
        with _timed(run.timings, "answerable"):
            verdict, read, dense = self._judge(run)
        run.answer.answerability, run.answer.answered = verdict, verdict.score
        limits, calibrated = Limits.from_settings(self.settings.query), self.decision is not None
        return refusal.not_answerable(
            verdict, limits, dense=dense, read=read, calibrated=calibrated
        )

    def _read(self, run: _Run) -> None:
        """The answer judge's reading of the chunks, for the generator; no verdict applied."""
        self._judge(run)

    def _generate(self, run: _Run) -> Refusal | None:
        """assemble → generate → verify; the generator is handed the sentences the answer
        judge read as answering. Declined, the answer shows no text and the sources the
        generator was shown, as any answer does."""
        context = self._assembled(run)
        with _timed(run.timings, "generate"):
            text = self._text(run.request.query, context, run.on_text)
        return self._checked(run, context, text)

    def _assembled(self, run: _Run) -> Context:
        """The sources in the prompt (token budget, stable ids, delimiters), with the
        sentences the answer judge read as answering."""
        q, question, side = self.settings.query, run.request.query, self._side()
        with _timed(run.timings, "assemble"):
            context = assemble(
                run.ranked,
                budget_tokens=q.budget_tokens,
                count_tokens=side.embedder.count_tokens,
                order=q.order,
                expand_parent=q.expand_parent,
                parent_lookup=side.vectors.live_chunks,
                query=question,
            )
        context.evidence, run.sources = list(run.evidence), context.sources
        return context

    def _after_text(self, run: _Run, context: Context, text: str) -> Refusal | None:
        """Every stage after the generator wrote `text`: verify, cite, names."""
        return self._checked(run, context, text) or self._until_refused(run, self._stages()[3:])

    def _checked(self, run: _Run, context: Context, text: str) -> Refusal | None:
        """The text verified against the sources it was written from; declined, the answer
        shows no text and the sources the generator was shown, as any answer does."""
        q = self.settings.query
        with _timed(run.timings, "verify"):
            run.checked = verify(
                text,
                context.sources,
                self.sentence_embedder,
                cross_encoder=getattr(self.reranker, "model", None),
                judge=self.support_judge,
                contradiction_floor=q.contradiction_floor,
            )
        refused = refusal.declined_answer(text)
        if refused is not None:
            run.answer.sources = run.sources
            _withhold(run.answer, "generator_declined", 1.0)
        return refused

    def _cite(self, run: _Run) -> Refusal | None:
        """The verified text and claims, the sources stamped with their file versions, and
        the citations of the sources the claims cite."""
        answer, checked, q = run.answer, run.checked, self.settings.query
        assert checked is not None  # the generate stage ran
        for name in ("text", "claims", "grounding", "invented_cids", "injection_flags"):
            setattr(answer, name, getattr(checked, name))
        stored = self._side().vectors.get([s.point_id for s in run.sources]) if run.sources else []
        answer.sources = with_versions(run.sources, stored)
        answer.citations = shapes.citations(checked.claims, answer.sources)
        judged = answer.answerability is not None and self.answer_judge is not None
        scores = [s.score for s in answer.sources]
        return refusal.no_answer(checked.claims, judged=judged, scores=scores) or (
            refusal.low_grounding(
                checked.grounding, min_grounding=q.min_grounding, on_low=q.on_low_grounding
            )
        )

    def _names(self, run: _Run) -> Refusal | None:
        """The question's proper names in the documents the answer cites. Refused, the
        answer's text, claims and citations are withheld (the sources stay, as shown)."""
        answer, q = run.answer, self.settings.query
        dense = answer.answerability.signals.get("dense_best", 0.0) if answer.answerability else 0.0
        names = refusal.names_to_check(
            answer.query,
            named_floor=q.answerable.named_floor,
            dense_best=dense,
            answerable_dense=q.answerable.dense,
        )
        documents = self._side().vectors.live_chunks
        missing = unmentioned_in(names, shapes.cited(answer), documents) if names else []
        refused = refusal.unnamed(
            names, missing, named_floor=q.answerable.named_floor, answered=answer.answered
        )
        if refused is not None:
            _withhold(answer, "names_unmentioned", float(len(missing)))
        return refused

    def _judge(self, run: _Run) -> tuple[Answerability, int, float]:
        """The answerability verdict on the ranked chunks (query/answerable.py `judge`), how
        many sentences the answer judge read, and the best dense cosine; `run.evidence`
        becomes the sentences it read as answering (at least `query.answerable.sentence_floor`)."""
        q, chunks = self.settings.query, [r.candidate.chunk for r in run.ranked]
        dense = max((r.candidate.scores.get("dense", 0.0) for r in run.ranked), default=0.0)
        signals = {**ranking(run.ranked), **run.leads}
        asked = Asked(run.request.query, chunks, self.retriever.lexical.doc_freqs, dense, signals)
        verdict, read = judge(asked, Limits.from_settings(q), self.answer_judge, self.decision)
        run.evidence = answering(chunks, read, q.answerable.sentence_floor)
        return verdict, len(read), dense

    @contextmanager
    def _started(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        **attributes: int,
    ) -> Iterator[_Run]:
        """One answer's run, on the side it pinned and under its root span, whose trace id
        the answer carries."""
        extra = attributes or {"k": request.k, "n": request.n}
        with self._pinned(), span("query", query_chars=len(request.query), **extra) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            name, generator = self.reranker_name, self.generator.name
            answer = shapes.blank_answer(request.query, name, generator, trace_id)
            yield _Run(request, answer, root, tenants, on_text)

    def _ranked(self, run: _Run, ranked: list[Reranked]) -> None:
        """Record the ranked candidates, and the slug of the embedder whose collection
        ranked them: read from the candidates, not the live side, so a promote or rollback
        meanwhile never labels an answer with the model that did not rank it."""
        run.ranked = ranked
        run.answer.candidates = [shapes.candidate_view(r) for r in ranked]
        slugs = (r.candidate.chunk.embedder for r in ranked if r.candidate.chunk.embedder)
        run.answer.embedder = next(slugs, self._side().embedder.version.slug)

    def _text(self, question: str, context: Context, on_text: Callable[[str], None] | None) -> str:
        if on_text is None:
            return self.generator.generate(question, context)
        pieces = []
        for piece in self.generator.stream(question, context):
            pieces.append(piece)
            on_text(piece)
        return "".join(pieces)

    def _side(self) -> LiveSide:
        """The side this answer pinned (`_pinned`), else the live one now."""
        return _PINNED.get() or self.retriever.side

    @contextmanager
    def _pinned(self) -> Iterator[LiveSide]:
        """One side for every stage of one answer: retrieval, assembly (token counts, parent
        chunks), generation, verification and file versions all read the side the answer
        started on, however many promotes land meanwhile (the live pointer is read once)."""
        side = self._side()
        token = _PINNED.set(side)
        try:
            yield side
        finally:
            _PINNED.reset(token)


def _withhold(answer: Answer, signal: str, value: float) -> None:
    """Withhold a refused answer's text, claims and citations, and record in its verdict
    (when it has one) the signal that refused it."""
    if answer.answerability is not None:
        answer.answerability.signals[signal] = value
        answer.answerability.answerable = False
    answer.text, answer.claims, answer.citations = "", [], []


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Record how long the block took, in ms, as `timings[name]` (not when it raises)."""
    start = time.perf_counter()
    yield
    timings[name] = round((time.perf_counter() - start) * 1000, 3)
