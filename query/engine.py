"""The query pipeline: a question in, a verified `Answer` or a structured refusal out.

`QueryEngine` runs the stages of query/stages.py in order, each computing what it needs and
then applying its refusal rules (query/refusal.py); the first refusal ends the answer:

1. `rank`: retrieve → fuse → rerank under the caller's filters and tenants. Refused by
   `wordless` (the question has no letters) and the sufficiency `gate` (check "gate").
2. `answerable`: the answer judge reads the best sentences and the decision combines its
   reading with the index's signals (query/answerable.py). Refused by `not_answerable`
   (check "decision").
3. `generate`: assemble → generate → verify. Refused by `declined_answer`: the generator
   said the sources hold no answer (check "generator").
4. `cite`: the verified text, its citations and the sources' file versions. Refused by
   `no_answer`: no sentence answers (check "generator"), and `low_grounding`: too few
   supported claims (check "grounding").
5. `names`: the question's proper names in the documents the answer cites. Refused by
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
identical `Answer`s. Every stage of one answer reads the side (live collection) the answer
started on. Every query is one root span `ragstream.query` whose trace id the answer carries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.core.answers import Answer, QueryRequest, Refusal, Retrieval
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure, span
from ragstream.operators.embed import Embedder, with_vector_memo
from ragstream.query import shapes, stages
from ragstream.query.generate import ExtractiveGenerator, Generator
from ragstream.query.models import QueryModels
from ragstream.query.rerank import NO_RERANKER, Reranked
from ragstream.query.retrieve import Candidate, LiveSide, Retriever
from ragstream.query.stages import AnswerRun, Stage, timed, until_refused
from ragstream.query.transforms import QueryTransformer, endpoint_generator

# the side the current answer pinned (per thread / task: concurrent answers pin their own)
_PINNED: ContextVar[LiveSide | None] = ContextVar("ragstream_query_side", default=None)

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
        return with_vector_memo(self.side().embedder, self.settings.query.vector_memo)

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
        chosen = self.stages() if request.generate else self.stages()[:2]
        with self._started(request, tenants, on_text) as run:
            answer = self._run(run, chosen)
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
            refused = await offload(until_refused, self, run, self.stages()[:2])
            if refused is None:
                context = await offload(stages.assembled, self, run)
                with timed(run.timings, "generate"):
                    text = await awaited(request.query, context, on_text)
                refused = await offload(stages.after_text, self, run, context, text)
            answer = self._closed(run, refused)
        self._logged(request, tenants, answer)
        return answer

    def retrieve(self, request: QueryRequest, tenants: tuple[str, ...] | None = None) -> Retrieval:
        """Ranked candidates with their text and the gate's verdict; nothing is generated."""
        with self._started(request, tenants) as run:
            return shapes.retrieval(self._run(run, self.stages()[:1]), run.ranked)

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
            stages.record_ranked(self, run, [Reranked(candidate=c) for c in gold])
            return self._run(run, (stages.read, *self.stages()[2:]))

    @staticmethod
    def stages() -> tuple[Stage, ...]:
        """Every stage of an answer, in order (the module docstring names each one's
        refusal rules)."""
        return (stages.rank, stages.answerable, stages.generate, stages.cite, stages.names)

    def side(self) -> LiveSide:
        """The side the current answer pinned (`_pinned`), else the live one now."""
        return _PINNED.get() or self.retriever.side

    def _run(self, run: AnswerRun, chosen: Sequence[Stage]) -> Answer:
        """The stages in order, until one refuses: that refusal is the answer's."""
        return self._closed(run, until_refused(self, run, chosen))

    def _closed(self, run: AnswerRun, refused: Refusal | None) -> Answer:
        run.answer.refusal, run.answer.timings_ms = refused, run.timings
        run.root.set_attribute("refused", refused is not None)
        if run.checked is not None:
            run.root.set_attribute("grounding", run.answer.grounding)
        return run.answer

    def _logged(
        self, request: QueryRequest, tenants: tuple[str, ...] | None, answer: Answer
    ) -> None:
        if self.log is not None:
            self.log.append(shapes.log_entry(request.query, request.filters, tenants, answer))

    @contextmanager
    def _started(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        **attributes: int,
    ) -> Iterator[AnswerRun]:
        """One answer's run, on the side it pinned and under its root span, whose trace id
        the answer carries."""
        extra = attributes or {"k": request.k, "n": request.n}
        with self._pinned(), span("query", query_chars=len(request.query), **extra) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            name, generator = self.reranker_name, self.generator.name
            answer = shapes.blank_answer(request.query, name, generator, trace_id)
            yield AnswerRun(request, answer, root, tenants, on_text)

    @contextmanager
    def _pinned(self) -> Iterator[LiveSide]:
        """One side for every stage of one answer: retrieval, assembly (token counts, parent
        chunks), generation, verification and file versions all read the side the answer
        started on, however many promotes land meanwhile (the live pointer is read once)."""
        side = self.side()
        token = _PINNED.set(side)
        try:
            yield side
        finally:
            _PINNED.reset(token)
