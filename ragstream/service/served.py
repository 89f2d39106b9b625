"""The served index: `IndexService` over stores this process holds open (a `serve`, a
`watch --serve`, an embedded `Client` once it answers), so every face asks one object.

    ServedIndex.over(settings, sides, lexical)   the engine and the reindex commands over
                                                 one set of open sides (built only here)
    index.scoped(tenants, principal)             the view an API key's tenants may see, read
                                                 as a principal: the same stores, every read
                                                 restricted to them

Reads of the stores run under `lock.read()` (inside `watch --serve` the index's own lock, so
they wait only while an index batch or a backfill page writes); the reindex commands take
the writers' side themselves. `query_async` runs the engine's stages through the caller's
bounded pool (`offload`), each under the read lock, and awaits an LLM in between.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ragstream.connectors.fields import field_catalogue
from ragstream.connectors.protocols import LexicalIndex, SearchFilter, VectorStore
from ragstream.connectors.state import VerifyBook
from ragstream.connectors.stores import configured_live, open_lexical_index
from ragstream.core.answers import Answer, ChatRequest, QueryFilters, QueryRequest, Retrieval
from ragstream.core.errors import (
    InvalidRequestError,
    ModelUnavailableError,
    NotFoundError,
    NotReadyError,
)
from ragstream.core.ids import in_sources, source_of
from ragstream.core.models import (
    DocOutcome,
    FieldInfo,
    FileDetail,
    FileRecord,
    PromoteOptions,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal
from ragstream.core.rwlock import StoreLock, Unlocked
from ragstream.core.settings import Settings
from ragstream.core.snapshot import SnapshotInfo
from ragstream.core.source_config import SourceConfig
from ragstream.core.telemetry import configure, span
from ragstream.flows.runtime import Runtime
from ragstream.flows.sides import IndexSides, open_sides
from ragstream.operators.remote_embed import EndpointHealth
from ragstream.query.engine import QueryEngine
from ragstream.query.retrieve import Retriever, no_index
from ragstream.query.shapes import search_filter
from ragstream.service import audit, snapshots
from ragstream.service.base import (
    Followed,
    Messages,
    Mode,
    Offload,
    ProgressHandler,
    Question,
    States,
    StreamEvent,
    Tenants,
    chat_request,
    query_request,
    state_list,
)
from ragstream.service.feed import OutcomeFeed
from ragstream.service.ingest import query_log
from ragstream.service.reindex import Maintainer
from ragstream.service.status import status_report

T = TypeVar("T")

Servable = Settings | Runtime  # a data dir to open, or a running flow's open stores


@dataclass(frozen=True)
class ServedIndex:
    """One index held open by this process, answering as one caller's tenants see it
    (`tenants` None: every tenant, as an operator or a keyless server)."""

    engine: QueryEngine
    maintainer: Maintainer | None = None
    lock: StoreLock = field(default_factory=Unlocked)
    feed: OutcomeFeed | None = None  # sync outcomes, when this process syncs (`watch --serve`)
    tenants: Tenants = None
    principal: Principal | None = None  # who reads, where sources mirror file permissions

    @classmethod
    def over(
        cls,
        settings: Settings,
        sides: IndexSides,
        lexical: LexicalIndex,
        kick: Callable[[], None] | None = None,
        feed: OutcomeFeed | None = None,
    ) -> ServedIndex:
        """The engine and the reindex commands over one set of open sides, reading under
        the sides' lock; `kick` wakes the backfill of a running flow (`watch --serve`)."""
        retriever = Retriever(sides, lexical, memo=settings.query.vector_memo)
        engine = QueryEngine(settings, retriever)
        return cls(engine, Maintainer(sides, lexical, kick=kick), sides.lock, feed)

    def scoped(self, tenants: Tenants, principal: Principal | None = None) -> ServedIndex:
        """The same index as `tenants` see it, read as `principal`: every read, count and
        feed restricted (the engine's searches by `Settings.readers_of(principal)`)."""
        engine = self.engine.reading_as(principal)
        return replace(self, tenants=tenants, principal=principal, engine=engine)

    @property
    def settings(self) -> Settings:
        return self.engine.settings

    @property
    def mode(self) -> Mode:
        return "embedded"

    @property
    def url(self) -> None:
        return None

    def _locked(self, fn: Callable[..., T]) -> Callable[..., T]:
        def read(*args: Any, **kwargs: Any) -> T:
            with self.lock.read():
                return fn(*args, **kwargs)

        return read

    # ---- what the process answers about itself ----------------------------------------------
    def warm(self) -> None:
        """Open the models a first query needs (the live embedder opens its weights on its
        first encode), so the first answer is as fast as the second. A remote model is asked
        once; a model that cannot be opened is not waited for (the first query says why).
        The live side's cosine scale is measured here when it has none yet (query/scales.py)."""
        with span("serve.warm"), suppress(ModelUnavailableError):
            self.engine.retriever.embedder.encode_queries(["warm up"])
            self.engine.scales.of(self.engine.retriever.side)

    def health(self) -> dict[str, Any]:
        """Liveness with the model names: embedder, reranker, generator."""
        engine = self.engine
        return {
            "ok": True,
            "ready": True,
            "embedder": engine.retriever.embedder.version.model_dump(mode="json"),
            "reranker": engine.reranker_name,
            "generator": engine.generator.name,
        }

    def readiness(self) -> dict[str, Any]:
        """What is open: the live collection and its embedder; a remote embedder's endpoint
        and its state ("drifted": not ready, every query would be refused; "down": still
        ready, queries whose vectors are remembered and every other read still answer)."""
        retriever = self.engine.retriever
        ready: dict[str, Any] = {
            "ready": True,
            "collection": retriever.collection,
            "embedder": retriever.embedder.version.slug,
        }
        health = retriever.embedder.endpoint
        if health is not None:
            endpoint = health.view()
            ready["embedding_endpoint"] = endpoint.model_dump(mode="json")
            if endpoint.state == "drifted":
                ready.update(ready=False, reason=endpoint.detail)
        return ready

    # ---- questions --------------------------------------------------------------------------
    def query(self, question: Question, **options: Any) -> Answer:
        request = query_request(question, options)
        return self._locked(self.engine.answer)(request, self.tenants)

    async def query_async(
        self,
        request: QueryRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer:
        """`query` for an asyncio server: the CPU stages run on `offload` (a bounded pool),
        each under the read lock; an endpoint generator's completion is awaited between."""
        locked = self._offloaded(offload)
        return await self.engine.answer_async(request, self.tenants, on_text, offload=locked)

    def chat(self, messages: Messages, **options: Any) -> Answer:
        """Answer a conversation's last message, retrieval shaped by its history."""
        request = chat_request(messages, options)
        return self._locked(self.engine.chat)(request, self.tenants)

    async def chat_async(
        self,
        request: ChatRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer:
        """`chat` for an asyncio server, run as `query_async` runs a question."""
        locked = self._offloaded(offload)
        return await self.engine.chat_async(request, self.tenants, on_text, offload=locked)

    def _offloaded(self, offload: Offload) -> Offload:
        """`offload` with each call under the read lock."""

        async def locked(fn: Callable[..., T], *args: Any) -> T:
            return await offload(self._locked(fn), *args)

        return locked

    def stream(self, question: Question, **options: Any) -> Iterator[StreamEvent]:
        pieces: list[str] = []
        request = query_request(question, options)
        answer = self._locked(self.engine.answer)(request, self.tenants, pieces.append)
        yield from pieces
        yield answer

    def chat_stream(self, messages: Messages, **options: Any) -> Iterator[StreamEvent]:
        """`chat` as `stream` gives a question's answer: the text's pieces, then the
        `Answer`."""
        pieces: list[str] = []
        request = chat_request(messages, options)
        answer = self._locked(self.engine.chat)(request, self.tenants, pieces.append)
        yield from pieces
        yield answer

    def retrieve(self, question: Question, **options: Any) -> Retrieval:
        request = query_request(question, options)
        return self._locked(self.engine.retrieve)(request, self.tenants)

    # ---- the index and its ledger -----------------------------------------------------------
    def status(self) -> StatusReport:
        """Docs, chunks, embedder, last sync, dead letters, as this view's tenants and
        principal see them (`view_status`)."""
        engine = self.engine
        side, lexical = engine.retriever.side, engine.retriever.lexical
        live = (side.collection, side.vectors)
        view = self._locked(view_status)
        report = view(self.settings, live, lexical, self.tenants, engine.readers, engine.synced)
        if self.tenants is not None:  # a tenant is not shown the operator's endpoint
            return report
        return with_endpoint(report, engine.retriever.embedder.endpoint)

    def files(self, *, state: States = None, paths: Sequence[str | Path] = ()) -> list[FileRecord]:
        r, s = self.engine.retriever, audit.audited(self.settings, paths)
        states = state_list(state)
        files = self._locked(audit.files_of_stores)
        return files(s, r.vectors, r.lexical, states, self.tenants, self.engine.readers)

    def file(self, doc_id: str) -> FileDetail:
        r, s = self.engine.retriever, audit.audited(self.settings)
        detail = self._locked(audit.file_detail)
        return detail(s, r.vectors, r.lexical, doc_id, self.tenants, self.engine.readers)

    def fields(self) -> list[FieldInfo]:
        """The catalogue of metadata fields as this view's tenants and principal see it:
        each field's type, how many of their documents carry it, examples, origins."""
        engine = self.engine
        scoped = self.tenants is not None or engine.readers is not None
        flt = search_filter(QueryFilters(), self.tenants, engine.readers) if scoped else None
        catalogue = self._locked(field_catalogue)
        side = engine.retriever.side
        return catalogue(side.vectors, engine.fields.types(), flt or SearchFilter())

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
        pause: Callable[[], None] = lambda: None,
    ) -> VerifyReport:
        """Audit disk ↔ vectors ↔ BM25; `pause` runs between the pages it reads. Repair
        rewrites the stores, which a served index reads only: it is a sync pass's work."""
        if repair:
            raise InvalidRequestError(
                "a served index audits only: repair with `ragstream verify --repair` once "
                "it stops, or restart `watch` (its catch-up scan repairs the drift)"
            )
        r, s = self.engine.retriever, audit.audited(self.settings, paths)
        verify = self._locked(audit.verify_stores)
        return verify(s, r.vectors, r.lexical, sample, pause=pause)

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        return query_log(limit=limit, settings=self.settings)

    def eval_reports(self) -> list[dict[str, Any]]:
        """The saved `ragstream eval` reports of this data dir, newest first, as JSON."""
        from ragstream.eval.evaluation import saved_reports

        saved = saved_reports(self.settings.data_dir)
        return [{"file": f, "report": json.loads(r.to_json())} for f, r in saved]

    # ---- snapshots ----------------------------------------------------------------------------
    def snapshot(self) -> SnapshotInfo:
        """A snapshot of the data dir now, in its `snapshots/`: index batches wait while it
        is written, queries go on."""
        r = self.engine.retriever
        return snapshots.take(self.settings, (r.collection, r.vectors), r.lexical, self.lock)

    def snapshots(self) -> list[SnapshotInfo]:
        return snapshots.listed_snapshots(self.settings)

    def snapshot_file(self, snapshot_id: str) -> Path:
        """The file of one listed snapshot (`NotFoundError` for any other id)."""
        for info in snapshots.listed_snapshots(self.settings):
            if info.id == snapshot_id:
                return Path(info.path)
        raise NotFoundError(f"no snapshot {snapshot_id!r}; GET /v1/snapshots lists them")

    # ---- the live feed ----------------------------------------------------------------------
    def follow(self, wait_s: float) -> Followed:
        """The last audit's counts and every document written from now on (the recent ones
        first), the tenants' own only; `NotFoundError` where this process syncs nothing."""
        if self.feed is None:
            raise NotFoundError("the live feed is served by `ragstream watch --serve`")
        audited_last = VerifyBook(self.settings.state_dir).load()
        drift = audited_last.counts() if audited_last is not None else None
        own = self.settings.sources_of(self.tenants)
        return Followed(drift, self._readable(_outcomes(self.feed, own, wait_s)))

    def _readable(self, outcomes: Iterator[DocOutcome | None]) -> Iterator[DocOutcome | None]:
        """The outcomes of documents this view's principal may read now, where sources mirror
        permissions (a deleted or dead-lettered document's is withheld: its name is not
        known to be theirs)."""
        readers, engine = self.engine.readers, self.engine
        mirrored = self.settings.mirrored(engine.synced)
        readable = self._locked(engine.retriever.vectors.readable_docs)
        for outcome in outcomes:
            if (
                outcome is None
                or readers is None
                or source_of(outcome.doc_id) not in mirrored
                or readable(readers, outcome.doc_id)
            ):
                yield outcome

    # ---- blue/green commands ----------------------------------------------------------------
    def _maintainer(self) -> Maintainer:
        if self.maintainer is None:
            raise NotReadyError("reindex commands are not served by this process yet")
        return self.maintainer

    def reindex_status(self) -> ReindexStatus:
        return self._maintainer().status()

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        return self._maintainer().start(embedder, wait=wait, on_progress=on_progress)

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        return self._maintainer().run(on_progress)

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        """Options: `eval_dataset`, `eval_split`, `eval_margin`, `eval_limit_queries`."""
        return self._maintainer().promote(PromoteOptions(**options))

    def reindex_rollback(self) -> ReindexStatus:
        return self._maintainer().rollback()

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return self._maintainer().cleanup(confirm)

    def reindex_abort(self) -> ReindexStatus:
        return self._maintainer().abort()

    def close(self) -> None:
        """Nothing to close: whoever opened the stores closes them."""

    def __enter__(self) -> ServedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def with_endpoint(report: StatusReport, health: EndpointHealth | None) -> StatusReport:
    """The operator's status with the remote embedding endpoint as this process sees it
    (its state, what it cost), and a warning when it is down or drifted."""
    if health is None:
        return report
    endpoint = health.view()
    warnings = report.warnings
    if endpoint.state in ("down", "drifted") and endpoint.detail not in warnings:
        warnings = [*warnings, f"embedding endpoint {endpoint.state}: {endpoint.detail}"]
    return report.model_copy(update={"embedding_endpoint": endpoint, "warnings": warnings})


def view_status(
    settings: Settings,
    live: tuple[str, VectorStore],
    lexical: LexicalIndex,
    tenants: Tenants,
    readers: tuple[str, ...] | None,
    synced: Sequence[SourceConfig] = (),
) -> StatusReport:
    """The status as `tenants` (None: every tenant) see it, read through `readers`
    (`Settings.readers_of` a principal; None: no filter): the counts are the stores' counts
    under the filter their searches apply (`search_filter`, the one rule), and the dead
    letters and redactions those of their own readable files (`for_tenants`,
    `for_readers`). Neither given: the operator's status, unfiltered."""
    scoped = tenants is not None or readers is not None
    flt = search_filter(QueryFilters(), tenants, readers) if scoped else None
    report = status_report(settings, live, lexical, flt)
    report = for_tenants(report, settings.sources_of(tenants))
    if readers is None:
        return report
    readable = live[1].readable_docs(readers)
    return for_readers(report, settings.mirrored(synced), readable)


def for_tenants(report: StatusReport, own: frozenset[str] | None) -> StatusReport:
    """A tenant's view of the status: the dead letters and redactions of its own sources
    only, and none of the operator's warnings (they name server paths and models)."""
    if own is None:
        return report
    return report.model_copy(
        update={
            "dead_letters": [d for d in report.dead_letters if source_of(d.doc_id) in own],
            "redactions": [r for r in report.redactions if source_of(r.doc_id) in own],
            "warnings": [],
        }
    )


def for_readers(report: StatusReport, mirrored: frozenset[str], readable: set[str]) -> StatusReport:
    """A principal's view of the status: of a source that mirrors permissions, only the
    dead letters and redactions of the documents it may read (a dead-lettered file has no
    stamp: it is withheld), and none of the operator's warnings."""

    def shown(doc_id: str) -> bool:
        return source_of(doc_id) not in mirrored or doc_id in readable

    return report.model_copy(
        update={
            "dead_letters": [d for d in report.dead_letters if shown(d.doc_id)],
            "redactions": [r for r in report.redactions if shown(r.doc_id)],
            "warnings": [],
        }
    )


def _outcomes(
    feed: OutcomeFeed, own: frozenset[str] | None, wait_s: float
) -> Iterator[DocOutcome | None]:
    """The outcomes `feed` publishes from now on, of the `own` sources (None: all); None
    after each `wait_s` without one, so a reader can check that its client is still there.
    Ends when the feed closes."""
    with feed.subscribe() as inbox:
        while True:
            try:
                outcome = inbox.get(timeout=wait_s)
            except queue.Empty:
                yield None
                continue
            if outcome is None:
                return
            if in_sources(outcome.doc_id, own):
                yield outcome


def settings_of(target: Servable) -> Settings:
    return target if isinstance(target, Settings) else target.settings


@contextmanager
def open_served(target: Servable, feed: OutcomeFeed | None = None) -> Iterator[ServedIndex]:
    """The served index over a data dir opened here (every side and its embedder), or over
    a running flow's stores (its lock, its backfill woken by reindex commands, `feed`
    carrying its outcomes)."""
    if isinstance(target, Runtime):
        kick = target.backfill.kick if target.backfill is not None else None
        yield ServedIndex.over(target.settings, target.sides, target.lexical, kick, feed)
        return
    s = target
    if configured_live(s) is None:
        raise no_index(s)
    configure(s.telemetry.exporter, s.telemetry.otlp_endpoint)
    with (
        open_sides(s) as sides,
        closing(open_lexical_index(s.lexical, s.lexical_dir, lambda: sides.live.vectors)) as lex,
    ):
        yield ServedIndex.over(s, sides, lex, feed=feed)


@contextmanager
def open_engine(settings: Settings) -> Iterator[tuple[QueryEngine, Maintainer]]:
    """The served index's engine and reindex commands, for programs that drive them
    directly (benchmarks, tests)."""
    with open_served(settings) as index:
        assert index.maintainer is not None  # `over` always builds one
        yield index.engine, index.maintainer
