"""The query pipeline: a question in, a verified `Answer` or a structured refusal out.

`QueryEngine` runs one named pipeline of query/pipelines.py per request (the stage order and
which public method runs which pipeline are written there): each stage computes what it needs
and then applies its refusal rules (query/refusal.py); the first refusal ends the answer. The
question being answered is set once on the run (`AnswerRun.question`) and every stage reads
it. Query transforms (query/transforms.py), when switched on, rewrite what each retrieval leg
searches with; rerank, assembly and generation still see the question being answered.

One `QueryEngine` owns the stores of one data dir (read-only use) and the models
(`QueryModels`, which several engines can share). The embedded `Client` calls `answer`; the
HTTP server calls `answer_async`, the same pipeline through the runner's awaiting form (the
CPU stages on its thread pool, an endpoint generator's completion awaited between them), so
both return identical `Answer`s. Every stage of one answer reads the side (live collection)
the answer started on. Every query is one root span `ragstream.query` whose trace id the answer
carries, and whose `stages` attribute names the stages that ran.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from ragstream.connectors.fields import FieldCatalog
from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.connectors.state import SourcesBook
from ragstream.core.answers import Answer, ChatRequest, QueryRequest, Refusal, Retrieval
from ragstream.core.filters import Where, check
from ragstream.core.models import IndexedChunk
from ragstream.core.permissions import Principal
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure, span
from ragstream.operators.embed import Embedder, with_vector_memo
from ragstream.query import pipelines, shapes
from ragstream.query.conversation import Bounded, Rewriter, bounded
from ragstream.query.generate import ExtractiveGenerator, Generator
from ragstream.query.models import QueryModels
from ragstream.query.pipelines import Pipeline
from ragstream.query.recency import Recency, checked
from ragstream.query.rerank import NO_RERANKER
from ragstream.query.retrieve import LiveSide, Retriever
from ragstream.query.scales import CosineScales
from ragstream.query.stages import AnswerRun, Offload
from ragstream.query.transforms import QueryTransformer, endpoint_generator

# the side the current answer pinned (per thread / task: concurrent answers pin their own)
_PINNED: ContextVar[LiveSide | None] = ContextVar("ragstream_query_side", default=None)


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
        # each side's cosines on the scale the floors were fitted on (query/scales.py)
        self.scales = CosineScales(settings, self.decision)
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
        # a conversation's standalone test and rewrite (query/conversation.py)
        self.rewriter = Rewriter.from_settings(settings)
        # what a chunk's `readers` must hold one of (None: no source mirrors permissions);
        # no principal: `everyone`'s files only (`reading_as` gives a principal's view)
        self.synced = SourcesBook(settings.state_dir).load()  # as the data dir was synced
        self.readers = settings.readers_of(None, self.synced)
        self.fields = FieldCatalog(settings.state_dir, settings.parse.metadata_timezone)

    def where(self, request: QueryRequest, tenants: tuple[str, ...] | None = None) -> Where | None:
        """The request's metadata filter checked against the catalogue of fields (those of
        the `tenants`' own sources), or `InvalidRequestError` naming what is wrong (a 422,
        exit 2): never a filter that silently matches nothing or everything."""
        if request.filter is None:
            return None
        zone = self.settings.parse.metadata_timezone
        sources = self.settings.sources_of(tenants)
        return check(request.filter, self.fields.types(sources), zone=zone)

    def recency(
        self, request: QueryRequest, tenants: tuple[str, ...] | None = None
    ) -> Recency | None:
        """The request's preference for recent documents, its field checked against the
        catalogue (a datetime field of the tenants' own sources)."""
        pref = request.prefer_recent
        if pref is None:
            return None
        fields = self.fields.types(self.settings.sources_of(tenants))
        return checked(pref.field, pref.half_life, fields)

    def reading_as(self, principal: Principal | None) -> QueryEngine:
        """This engine (the same models and stores) answering as `principal` reads: every
        search of both legs filtered by `Settings.readers_of(principal)`."""
        engine = copy.copy(self)
        engine.readers = self.settings.readers_of(principal, self.synced)
        return engine

    def configured(self, settings: Settings) -> QueryEngine:
        """An engine over the same stores (this engine's retriever), answering with other
        `settings` and the models they name."""
        return QueryEngine(settings, self.retriever)

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
        answer = self.run(self._answering(request), request, tenants, on_text).answer
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
        pipeline = self._answering(request)
        run = await self.run_async(pipeline, request, tenants, on_text, offload=offload)
        self._logged(request, tenants, run.answer)
        return run.answer

    def chat(
        self,
        request: ChatRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Answer:
        """Answer a conversation's last message as `answer` answers a question (citations,
        verification, refusals), retrieval shaped by the history: the `converse` stage
        sets the effective question every later stage reads. The answer carries it
        (`effective_query`) and how the history was read (`conversation`)."""
        query, history = self._conversation(request)
        answer = self.run(self._chatting(query), query, tenants, on_text, history=history).answer
        self._logged(query, tenants, answer)
        return answer

    async def chat_async(
        self,
        request: ChatRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer:
        """`chat` for an asyncio server (as `answer_async` is `answer`'s): the LLM rewrite
        and the completion are awaited, the CPU stages run through `offload`."""
        query, history = self._conversation(request)
        pipeline = self._chatting(query)
        run = await self.run_async(
            pipeline, query, tenants, on_text, offload=offload, history=history
        )
        self._logged(query, tenants, run.answer)
        return run.answer

    def _conversation(self, request: ChatRequest) -> tuple[QueryRequest, Bounded]:
        """The question as a `QueryRequest`, and the history within `query.conversation`'s
        bounds (the oldest messages dropped first)."""
        c = self.settings.query.conversation
        return request.as_query(), bounded(request.history, c.max_turns, c.max_chars)

    def retrieve(self, request: QueryRequest, tenants: tuple[str, ...] | None = None) -> Retrieval:
        """Ranked candidates with their text and the gate's verdict; nothing is generated."""
        run = self.run(pipelines.RETRIEVE, request, tenants)
        return shapes.retrieval(run.answer, run.ranked)

    def chat_retrieve(
        self, request: ChatRequest, tenants: tuple[str, ...] | None = None
    ) -> Retrieval:
        """`retrieve` for a conversation's last message: the candidates of the effective
        question (`converse`, then `rank`), which the retrieval carries (`effective_query`)."""
        query, history = self._conversation(request)
        run = self.run(pipelines.CHAT_RETRIEVE, query, tenants, history=history)
        return shapes.retrieval(run.answer, run.ranked)

    def answer_from(self, request: QueryRequest, chunks: Sequence[IndexedChunk]) -> Answer:
        """Generate and verify from exactly these chunks (best first), skipping retrieval,
        rerank and the gate: the gold-context evaluation asks whether the generator and the
        verifier accept an answer when the evidence is certainly in the context. Not logged:
        it is not a query anyone asked the index."""
        return self.run(pipelines.FROM_CHUNKS, request, None, None, chunks).answer

    def run(
        self,
        pipeline: Pipeline,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        given: Sequence[IndexedChunk] = (),
        history: Bounded | None = None,
    ) -> AnswerRun:
        """One request through `pipeline` (query/pipelines.py), blocking; the finished run,
        its `answer` closed. `given`: the chunks a `GIVEN` stage answers from; `history`: a
        conversation's (the `converse` stage reads it)."""
        with self._started(request, tenants, on_text, given, history) as run:
            self._closed(run, pipelines.run_blocking(self, run, pipeline))
        return run

    async def run_async(
        self,
        pipeline: Pipeline,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
        given: Sequence[IndexedChunk] = (),
        *,
        offload: Offload,
        history: Bounded | None = None,
    ) -> AnswerRun:
        """`run` awaited: with nothing to await (`pipelines.awaits`), the whole run is one
        `offload` call; else the runner's awaiting form, each stage's awaitable form awaited."""
        if not pipelines.awaits(self, pipeline):
            args = (pipeline, request, tenants, on_text, given, history)
            done: AnswerRun = await offload(self.run, *args)
            return done
        with self._started(request, tenants, on_text, given, history) as run:
            self._closed(run, await pipelines.run_awaited(self, run, pipeline, offload))
        return run

    def side(self) -> LiveSide:
        """The side the current answer pinned (`_pinned`), else the live one now."""
        return _PINNED.get() or self.retriever.side

    @staticmethod
    def _answering(request: QueryRequest) -> Pipeline:
        """The pipeline of an answer: the whole one, or up to the decision without generating."""
        return pipelines.ANSWER if request.generate else pipelines.DECIDE

    @staticmethod
    def _chatting(request: QueryRequest) -> Pipeline:
        """The pipeline of a conversation's answer: `converse`, then `_answering`'s."""
        return pipelines.CHAT if request.generate else pipelines.CHAT_DECIDE

    def _closed(self, run: AnswerRun, refused: Refusal | None) -> Answer:
        run.answer.refusal, run.answer.timings_ms = refused, run.timings
        run.root.set_attribute("refused", refused is not None)
        run.root.set_attribute("stages", run.ran)
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
        given: Sequence[IndexedChunk] = (),
        history: Bounded | None = None,
    ) -> Iterator[AnswerRun]:
        """One answer's run, on the side it pinned and under its root span, whose trace id
        the answer carries; the question it answers is set here (a conversation's
        `converse` stage, the first, sets the effective one)."""
        question = request.query
        extra = {"gold_context": len(given)} if given else {"k": request.k, "n": request.n}
        with self._pinned(), span("query", query_chars=len(question), **extra) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            name, generator = self.reranker_name, self.generator.name
            answer = shapes.blank_answer(question, name, generator, trace_id)
            run = AnswerRun(request, question, answer, root, tenants, on_text, given)
            run.history, run.readers = history, self.readers
            run.where, run.recency = self.where(request, tenants), self.recency(request, tenants)
            yield run

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
