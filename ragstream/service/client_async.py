# Generated from ragstream/client.py by `make generate` (tools/generate_async.py).
# Do not edit: edit Client in ragstream/client.py, then run `make generate`.
"""`AsyncClient`: `Client`'s questions and typed results as coroutines over HTTP (an
`AsyncRemoteIndex`); `ragstream.client` and `ragstream` export it. Generated from `Client`: edit
that, then run `make generate`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from ragstream.core.answers import Answer, Retrieval
from ragstream.core.models import (
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal
from ragstream.core.snapshot import SnapshotInfo
from ragstream.service.base import Messages, Mode, ProgressHandler, Question, States, StreamEvent
from ragstream.service.remote_async import AsyncRemoteIndex


class AsyncClient:
    """`Client`'s methods as coroutines over HTTP (httpx.AsyncClient); `stream` is an
    async iterator. Embedded use is the sync `Client`: the stores are not async.

    Args:
        url: A running `ragstream serve` or `watch --serve`, e.g. `http://127.0.0.1:8765`.
        api_key: The key sent as `Authorization: Bearer ...` (`server.api_keys`).
        timeout_s: Seconds a request may take.
        principal: Who the questions read as where sources mirror file permissions: its
            user name travels in `X-Ragstream-User`, honoured by a server that trusts the
            header (`server.trust_user_header`), as `Client`'s does over HTTP.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        principal: Principal | str | None = None,
    ) -> None:
        user = principal.user if isinstance(principal, Principal) else principal
        self._index = AsyncRemoteIndex(url, api_key=api_key, timeout_s=timeout_s, user=user)

    @property
    def mode(self) -> Mode:
        """Always "http"."""
        return self._index.mode

    @property
    def url(self) -> str | None:
        """The server's URL."""
        return self._index.url

    async def status(self) -> StatusReport:
        """`Client.status`, awaited: docs, chunks, embedder, last sync, dead letters; loads no
        model."""
        return await self._index.status()

    async def query(self, question: Question, **options: Any) -> Answer:
        """`Client.query`, awaited: answer with verified citations (or a structured refusal)."""
        return await self._index.query(question, **options)

    def stream(self, question: Question, **options: Any) -> AsyncIterator[StreamEvent]:
        """`Client.stream` as an async iterator: the answer's text as it is generated (str
        deltas), then the verified `Answer`."""
        return self._index.stream(question, **options)

    async def chat(self, messages: Messages, **options: Any) -> Answer:
        """`Client.chat`, awaited: answer a conversation's last message as `query` answers a
        question (citations, verification, refusals), retrieval shaped by the history."""
        return await self._index.chat(messages, **options)

    def chat_stream(self, messages: Messages, **options: Any) -> AsyncIterator[StreamEvent]:
        """`Client.chat_stream` as an async iterator: `chat` as `stream` answers a question: the
        answer's text as it is generated (str deltas), then the verified `Answer` (with
        `effective_query` and `conversation`)."""
        return self._index.chat_stream(messages, **options)

    async def retrieve(self, question: Question, **options: Any) -> Retrieval:
        """`Client.retrieve`, awaited: ranked candidates with their text and per-leg ranks and
        scores; no generation."""
        return await self._index.retrieve(question, **options)

    async def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport:
        """`Client.verify`, awaited: audit the index against its folders (`ragstream verify`; an
        admin key over HTTP). `paths` and `repair` need the data dir itself (embedded)."""
        return await self._index.verify(
            sample=sample, paths=paths, repair=repair, allow_mass_delete=allow_mass_delete
        )

    async def files(
        self, *, state: States = None, paths: Sequence[str | Path] = ()
    ) -> list[FileRecord]:
        """`Client.files`, awaited: the per-file ledger (`ragstream files`); over HTTP, the key's
        tenant only."""
        return await self._index.files(state=state, paths=paths)

    async def file(self, doc_id: str) -> FileDetail:
        """`Client.file`, awaited: one file's record and live chunks in order
        (`ragstream file DOC_ID`); over HTTP, another tenant's file is `NotFoundError` like a
        file that does not exist."""
        return await self._index.file(doc_id)

    async def fields(self) -> list[FieldInfo]:
        """`Client.fields`, awaited: the metadata fields the documents carry
        (`ragstream fields`), by name: each field's type, how many documents carry it, example
        values and where it was read. What a `filter` may name; over HTTP, the key's tenant's
        documents only."""
        return await self._index.fields()

    async def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """`Client.log`, awaited: the newest `limit` retrieval-log entries, oldest first (an
        admin key over HTTP)."""
        return await self._index.log(limit=limit)

    async def snapshot(self) -> SnapshotInfo:
        """`Client.snapshot`, awaited: snapshot the data dir into its `snapshots/`
        (`ragstream snapshot create`; an admin key over HTTP): while a server holds it, that
        process writes the file, and queries keep answering meanwhile."""
        return await self._index.snapshot()

    async def snapshots(self) -> list[SnapshotInfo]:
        """`Client.snapshots`, awaited: the data dir's snapshots, newest first
        (`ragstream snapshot list`)."""
        return await self._index.snapshots()

    async def reindex_status(self) -> ReindexStatus:
        """`Client.reindex_status`, awaited: both sides' live and deleted counts, the backfill's
        progress, the lag, the gate."""
        return await self._index.reindex_status()

    async def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """`Client.reindex_start`, awaited; `wait` polls the server's backfill."""
        return await self._index.reindex_start(embedder, wait=wait, on_progress=on_progress)

    async def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        """`Client.reindex_run`, awaited: continue (or repair) the backfill of the open reindex
        until the new side is full."""
        return await self._index.reindex_run(on_progress)

    async def reindex_promote(self, **options: Any) -> ReindexStatus:
        """`Client.reindex_promote`, awaited: make the new side live once its gate passes (else
        `RefusedError`, nothing changed)."""
        return await self._index.reindex_promote(**options)

    async def reindex_rollback(self) -> ReindexStatus:
        """`Client.reindex_rollback`, awaited: point queries back at the old side (both sides
        keep receiving every write)."""
        return await self._index.reindex_rollback()

    async def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        """`Client.reindex_cleanup`, awaited: drop the retired side after a promote; `confirm`
        must be True."""
        return await self._index.reindex_cleanup(confirm=confirm)

    async def reindex_abort(self) -> ReindexStatus:
        """`Client.reindex_abort`, awaited: drop the new side before a promote; the live side is
        untouched."""
        return await self._index.reindex_abort()

    async def close(self) -> None:
        """Close the HTTP connection pool; `async with` does it."""
        await self._index.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
