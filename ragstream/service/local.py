"""The local index: an embedded data dir opened in this process. Its stores open on entry
(a status, an audit and the ledger need nothing more); on the first question or reindex
command it becomes the served index over every side (`ServedIndex`), which loads the query
models (embedder, reranker, judges, decision, generator) and answers from then on."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ragstream.connectors.fields import FieldCatalog, field_catalogue
from ragstream.connectors.protocols import LexicalIndex, SearchFilter, VectorStore
from ragstream.connectors.state import SourcesBook
from ragstream.core.answers import Answer, QueryFilters, Retrieval
from ragstream.core.errors import ForbiddenError
from ragstream.core.models import (
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal
from ragstream.core.rwlock import Unlocked
from ragstream.core.settings import Settings
from ragstream.core.snapshot import SnapshotInfo
from ragstream.query.retrieve import no_index
from ragstream.query.shapes import search_filter
from ragstream.service import audit, snapshots
from ragstream.service.base import (
    Messages,
    Mode,
    ProgressHandler,
    Question,
    States,
    StreamEvent,
    Tenants,
    state_list,
)
from ragstream.service.ingest import query_log
from ragstream.service.served import ServedIndex, open_served, view_status, with_endpoint
from ragstream.service.status import status_report
from ragstream.service.stores import LiveStores, open_live


class LocalIndex:
    """An embedded data dir, held by this process until `close`, as `tenants` see it (None:
    every tenant): every read, count, ledger row and answer restricted to their sources, as
    a served index restricts an API key's; its questions are read as `principal` where
    sources mirror file permissions (None: `everyone`'s files only). What a server keeps for
    admin keys (the retrieval log, the audit, snapshots, reindex commands) is refused to a
    tenant-scoped index."""

    def __init__(
        self, settings: Settings, principal: Principal | None = None, tenants: Tenants = None
    ) -> None:
        self.settings, self.principal, self.tenants = settings, principal, tenants
        self._scope = ExitStack()
        self._lock = threading.Lock()  # the stores are swapped once, for the engine's
        self._live: LiveStores | None = None
        self._index: ServedIndex | None = None

    def open(self) -> LocalIndex:
        """Open the stores (no model); raises `StoreBusyError` if another process holds them."""
        self._live = self._scope.enter_context(open_live(self.settings))
        return self

    @property
    def mode(self) -> Mode:
        return "embedded"

    @property
    def url(self) -> None:
        return None

    # ---- what the open stores answer --------------------------------------------------------
    def _held(self) -> LiveStores | None:
        """The live collection's name, its store and BM25, as this process holds them (once
        a swap to the served index under way is done: the stores are closed meanwhile)."""
        with self._lock:
            if self._index is not None:
                retriever = self._index.engine.retriever
                return retriever.side.collection, retriever.side.vectors, retriever.lexical
            return self._live

    def _stores(self) -> tuple[VectorStore, LexicalIndex]:
        held = self._held()
        if held is None:
            raise no_index(self.settings)
        return held[1], held[2]

    def status(self) -> StatusReport:
        """The operator's status, or as this index's principal sees it (`view_status`)."""
        held = self._held()
        if held is None:
            return status_report(self.settings, None, None)
        synced = SourcesBook(self.settings.state_dir).load()
        live = (held[0], held[1])
        report = view_status(self.settings, live, held[2], self.tenants, self._readers(), synced)
        if self._index is None or self.tenants is not None:  # a tenant sees no endpoint
            return report
        return with_endpoint(report, self._index.engine.retriever.embedder.endpoint)

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport:
        """Audit the index against its folders; `repair` runs a sync pass, which opens the
        stores itself, so this index lets go of them first (the next call reopens them)."""
        self._operator("the audit")
        if repair:
            self._release()
            report = audit.verify(
                paths,
                settings=self.settings,
                sample=sample,
                repair=True,
                allow_mass_delete=allow_mass_delete,
            )
            self.open()
            return report
        vectors, lexical = self._stores()
        return audit.verify_stores(audit.audited(self.settings, paths), vectors, lexical, sample)

    def files(self, *, state: States = None, paths: Sequence[str | Path] = ()) -> list[FileRecord]:
        vectors, lexical = self._stores()
        s, readers = audit.audited(self.settings, paths), self._readers()
        states = state_list(state)
        return audit.files_of_stores(s, vectors, lexical, states, self.tenants, readers)

    def file(self, doc_id: str) -> FileDetail:
        vectors, lexical = self._stores()
        s, readers = audit.audited(self.settings), self._readers()
        return audit.file_detail(s, vectors, lexical, doc_id, self.tenants, readers)

    def fields(self) -> list[FieldInfo]:
        """The catalogue of metadata fields (`state/fields.json`) with each field's count,
        examples and origins among the documents this index's principal may read."""
        vectors, _ = self._stores()
        readers = self._readers()
        scoped = self.tenants is not None or readers is not None
        flt = search_filter(QueryFilters(), self.tenants, readers) if scoped else None
        s = self.settings
        types = FieldCatalog(s.state_dir, s.parse.metadata_timezone).types()
        return field_catalogue(vectors, types, flt or SearchFilter())

    def _readers(self) -> tuple[str, ...] | None:
        """What this index's principal may read in the ledger (`Settings.readers_of`); with
        no principal, all of it: whoever opens the data dir here holds every stored chunk
        anyway (a served index filters every caller's ledger)."""
        if self.principal is None:
            return None
        return self.settings.readers_of(self.principal, SourcesBook(self.settings.state_dir).load())

    def _operator(self, what: str) -> None:
        """Refuse an operator's command to a tenant-scoped index (a server keeps them for
        admin keys)."""
        if self.tenants is not None:
            raise ForbiddenError(f"{what} is the operator's: this index is scoped to a tenant")

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        self._operator("the retrieval log")
        return query_log(limit=limit, settings=self.settings)

    def snapshot(self) -> SnapshotInfo:
        """A snapshot of the data dir, in its `snapshots/` (this process holds it)."""
        self._operator("a snapshot")
        if self._index is not None:
            return self._index.snapshot()
        if self._live is None:
            raise no_index(self.settings)
        name, vectors, lexical = self._live
        return snapshots.take(self.settings, (name, vectors), lexical, Unlocked())

    def snapshots(self) -> list[SnapshotInfo]:
        self._operator("the snapshots")
        return snapshots.listed_snapshots(self.settings)

    # ---- what needs the query models: the served index over every side ---------------------
    def _served(self) -> ServedIndex:
        """The served index, opened once: the model-free stores are closed and the data dir
        reopened with every side and its embedder; read as this index's principal."""
        with self._lock:
            if self._index is None:
                self._release()
                self._index = self._scope.enter_context(open_served(self.settings))
            return self._index.scoped(self.tenants, self.principal)

    def warm(self) -> None:
        """Open what a first question needs now (the served index, the embedder's weights,
        the cosine scale), so it waits on no cold start: the MCP stdio server calls this in
        the background as it starts; a question asked meanwhile waits on the load under way."""
        self._served()
        if self._index is not None:
            self._index.warm()

    def query(self, question: Question, **options: Any) -> Answer:
        return self._served().query(question, **options)

    def stream(self, question: Question, **options: Any) -> Iterator[StreamEvent]:
        return self._served().stream(question, **options)

    def chat(self, messages: Messages, **options: Any) -> Answer:
        return self._served().chat(messages, **options)

    def chat_stream(self, messages: Messages, **options: Any) -> Iterator[StreamEvent]:
        return self._served().chat_stream(messages, **options)

    def retrieve(self, question: Question, **options: Any) -> Retrieval:
        return self._served().retrieve(question, **options)

    def _reindexing(self) -> ServedIndex:
        self._operator("a reindex command")
        return self._served()

    def reindex_status(self) -> ReindexStatus:
        return self._reindexing().reindex_status()

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """Open the new embedder's side; `wait` backfills it here."""
        return self._reindexing().reindex_start(embedder, wait=wait, on_progress=on_progress)

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        return self._reindexing().reindex_run(on_progress)

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        """Options: `eval_dataset`, `eval_split`, `eval_margin`, `eval_limit_queries`."""
        return self._reindexing().reindex_promote(**options)

    def reindex_rollback(self) -> ReindexStatus:
        return self._reindexing().reindex_rollback()

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return self._reindexing().reindex_cleanup(confirm=confirm)

    def reindex_abort(self) -> ReindexStatus:
        return self._reindexing().reindex_abort()

    def _release(self) -> None:
        self._scope.close()
        self._scope = ExitStack()
        self._live, self._index = None, None

    def close(self) -> None:
        self._release()

    def __enter__(self) -> LocalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
