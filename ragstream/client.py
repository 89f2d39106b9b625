"""`Client` and `AsyncClient`: the same questions and the same typed results, embedded or
over HTTP.

    from ragstream import Client, AsyncClient
    with Client(data_dir=".ragstream") as c:           # embedded: opens the stores here
        answer = c.query("how are deleted files handled?")
    with Client(url="http://127.0.0.1:8765") as c:    # a running `serve` / `watch --serve`
        c.retrieve("deleted files", k=5).results
    async with AsyncClient(url="http://127.0.0.1:8765") as c:
        answer = await c.query("...")
    with Client(data_dir=".ragstream") as c:           # a conversation: the last message
        first = c.query("How do I resize a volume?")   # is the question, the rest history
        c.chat([{"role": "user", "content": "How do I resize a volume?"},
                {"role": "assistant", "content": first.text},
                {"role": "user", "content": "and without downtime?"}])

    ragstream.status(data_dir=".ragstream")            # the package's verb: one question

Both are thin facades over `ragstream.service.connect`, which decides where the index is
answered: a URL, the endpoint a running server recorded in the data dir, or the data dir
opened here (stores at once, query models on the first question); `status` is
`Client.status` asked once, so it answers while a `watch --serve` owns the data dir. The
HTTP clients import neither torch nor any store. Failures raise the typed errors of
`ragstream.core.errors`, with the server's message. `AsyncClient`, `Client`'s asyncio twin
over HTTP, is generated from `Client` into `ragstream.service.client_async` by
`make generate` and exported here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ragstream.core.answers import Answer, ChatMessage, Retrieval
from ragstream.core.models import (
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal, principal_of
from ragstream.core.settings import Settings
from ragstream.core.snapshot import SnapshotInfo
from ragstream.service.base import (
    Messages,
    Mode,
    ProgressHandler,
    Question,
    States,
    StreamEvent,
)
from ragstream.service.client_async import AsyncClient
from ragstream.service.connect import connect


def status(*, settings: Settings | None = None, data_dir: str | Path | None = None) -> StatusReport:
    """Docs, chunks, embedder, last sync, dead letters and warnings of the index of
    `data_dir` (or `settings`); loads no model.

    Asked where `connect` says: the process serving the data dir (a running `serve` /
    `watch --serve`) when one recorded its endpoint there, else the stores opened here
    for the call.
    """
    with connect(data_dir, settings=settings) as index:
        return index.status()


class Client:
    """Embedded (`data_dir`, or settings) or remote (`url`); the same methods either way.

    Where the index is answered is decided once, by `ragstream.service.connect`: a `url` is
    a running server; else the endpoint a live `serve` / `watch --serve` recorded in the data
    dir (no model loads in this process); else the data dir's stores, opened here.

    Args:
        data_dir: The index's data dir (default: the `data_dir` setting, `.ragstream`).
        url: A running `ragstream serve` or `watch --serve`, e.g. `http://127.0.0.1:8765`.
        api_key: The key sent as `Authorization: Bearer ...` (`server.api_keys`).
        settings: Settings to use instead of the environment and `ragstream.toml`.
        timeout_s: Seconds an HTTP request may take.
        principal: Who the questions read as where sources mirror file permissions
            (docs/guide/permissions.md): a `Principal`, or a user name or uid whose groups
            the system gives (`id`). None: `everyone`'s files only. Over HTTP its user name
            travels in `X-Ragstream-User`, honoured by a server that trusts the header.
        tenant: The index as this tenant sees it (None: every tenant). Embedded, every call
            is scoped to its sources, and the operator's commands (log, audit, snapshots,
            reindex) are refused; over HTTP, the key `server.api_keys` maps to it is sent
            unless `api_key` is given.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        settings: Settings | None = None,
        timeout_s: float = 120.0,
        principal: Principal | str | None = None,
        tenant: str | None = None,
    ) -> None:
        if isinstance(principal, str):
            principal = principal_of(principal)
        self._index = connect(
            data_dir,
            url=url,
            api_key=api_key,
            settings=settings,
            timeout_s=timeout_s,
            principal=principal,
            tenant=tenant,
        )

    @property
    def mode(self) -> Mode:
        """ "embedded" (the stores are open in this process) or "http"."""
        return self._index.mode

    @property
    def url(self) -> str | None:
        """The server's URL over HTTP; None when the stores are open in this process."""
        return self._index.url

    def status(self) -> StatusReport:
        """Docs, chunks, embedder, last sync, dead letters; loads no model."""
        return self._index.status()

    def query(self, question: Question, **options: Any) -> Answer:
        """Answer with verified citations (or a structured refusal)."""
        return self._index.query(question, **options)

    def stream(self, question: Question, **options: Any) -> Iterator[StreamEvent]:
        """The answer's text as it is generated (str deltas), then the verified `Answer`."""
        return self._index.stream(question, **options)

    def chat(self, messages: Messages, **options: Any) -> Answer:
        """Answer a conversation's last message as `query` answers a question (citations,
        verification, refusals), retrieval shaped by the history.

        Args:
            messages: The conversation, oldest first: `ChatMessage`s or `{"role": "user" |
                "assistant", "content": ...}` dicts; the last one is the user's question.
            **options: `k`, `n`, `fusion`, `rrf_k`, `filters`, `generate`, as in `query`.

        Returns:
            The `Answer`, with `effective_query` (what each retrieval leg ran) and
            `conversation` (how much history was read or dropped, and how the question was
            rewritten).
        """
        return self._index.chat(messages, **options)

    def chat_stream(self, messages: Messages, **options: Any) -> Iterator[StreamEvent]:
        """`chat` as `stream` answers a question: the answer's text as it is generated (str
        deltas), then the verified `Answer` (with `effective_query` and `conversation`)."""
        return self._index.chat_stream(messages, **options)

    def retrieve(self, question: Question, **options: Any) -> Retrieval:
        """Ranked candidates with their text and per-leg ranks and scores; no generation."""
        return self._index.retrieve(question, **options)

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport:
        """Audit the index against its folders (`ragstream verify`; an admin key over HTTP).
        `paths` and `repair` need the data dir itself (embedded)."""
        return self._index.verify(
            sample=sample, paths=paths, repair=repair, allow_mass_delete=allow_mass_delete
        )

    def files(self, *, state: States = None, paths: Sequence[str | Path] = ()) -> list[FileRecord]:
        """The per-file ledger (`ragstream files`); over HTTP, the key's tenant only."""
        return self._index.files(state=state, paths=paths)

    def file(self, doc_id: str) -> FileDetail:
        """One file's record and live chunks in order (`ragstream file DOC_ID`); over HTTP,
        another tenant's file is `NotFoundError` like a file that does not exist."""
        return self._index.file(doc_id)

    def fields(self) -> list[FieldInfo]:
        """The metadata fields the documents carry (`ragstream fields`), by name: each
        field's type, how many documents carry it, example values and where it was read.
        What a `filter` may name; over HTTP, the key's tenant's documents only."""
        return self._index.fields()

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest `limit` retrieval-log entries, oldest first (an admin key over HTTP)."""
        return self._index.log(limit=limit)

    def snapshot(self) -> SnapshotInfo:
        """Snapshot the data dir into its `snapshots/` (`ragstream snapshot create`; an
        admin key over HTTP): while a server holds it, that process writes the file, and
        queries keep answering meanwhile."""
        return self._index.snapshot()

    def snapshots(self) -> list[SnapshotInfo]:
        """The data dir's snapshots, newest first (`ragstream snapshot list`)."""
        return self._index.snapshots()

    # ---- blue/green reindex (the same commands as `ragstream reindex ...`) -----------------
    def reindex_status(self) -> ReindexStatus:
        """Both sides' live and deleted counts, the backfill's progress, the lag, the gate."""
        return self._index.reindex_status()

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """Open the new embedder's side. `wait` blocks until it is backfilled: here when
        embedded, polling the serving process's background backfill over HTTP."""
        return self._index.reindex_start(embedder, wait=wait, on_progress=on_progress)

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        """Continue (or repair) the backfill of the open reindex until the new side is full."""
        return self._index.reindex_run(on_progress)

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        """Make the new side live once its gate passes (else `RefusedError`, nothing changed).

        The options are `eval_dataset`, `eval_split`, `eval_margin` and
        `eval_limit_queries`: with a dataset, the new side's nDCG@10 must be at most the
        margin below the old side's.
        """
        return self._index.reindex_promote(**options)

    def reindex_rollback(self) -> ReindexStatus:
        """Point queries back at the old side (both sides keep receiving every write)."""
        return self._index.reindex_rollback()

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        """Drop the retired side after a promote; `confirm` must be True."""
        return self._index.reindex_cleanup(confirm=confirm)

    def reindex_abort(self) -> ReindexStatus:
        """Drop the new side before a promote; the live side is untouched."""
        return self._index.reindex_abort()

    def close(self) -> None:
        """Close the stores (embedded) or the HTTP connection pool; `with` does it."""
        self._index.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["AsyncClient", "ChatMessage", "Client", "StreamEvent", "status"]
