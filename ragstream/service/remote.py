"""The remote index: a running `serve` or `watch --serve`, over HTTP, with the same methods
and typed results as the local one. `RemoteIndex` runs the routes of `remote_calls` over
blocking requests (httpx.Client); `AsyncRemoteIndex`, its asyncio twin (httpx.AsyncClient), is
generated from it into `remote_async` by `make generate` and exported here too. No method
loads torch, tantivy, rank_bm25 or numpy."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx

from ragstream.core.answers import Answer, Retrieval
from ragstream.core.models import (
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.snapshot import SnapshotInfo
from ragstream.service.base import (
    Messages,
    ProgressHandler,
    Question,
    States,
    StreamEvent,
    chat_request,
    query_request,
)
from ragstream.service.remote_async import AsyncRemoteIndex
from ragstream.service.remote_calls import (
    POLL_S,
    Call,
    Endpoint,
    EventReader,
    T,
    backfilling,
    chat_body,
    chat_call,
    fields_call,
    file_call,
    files_call,
    log_call,
    promote_body,
    query_body,
    query_call,
    raise_for,
    reindex_call,
    retrieve_call,
    retry_after,
    snapshot_call,
    snapshots_call,
    status_call,
    unreachable,
    verify_call,
)

__all__ = ["AsyncRemoteIndex", "RemoteIndex"]


class RemoteIndex(Endpoint):
    """The index a running server holds, over blocking requests (one per method; a waiting
    `reindex_start` polls). A 429 or 503 with `Retry-After` is tried again `retries` times
    (a server still opening its index: until the client's timeout has passed), then raised
    as its typed error; `stream` is not retried."""

    @cached_property
    def _client(self) -> httpx.Client:
        return httpx.Client(**self._options)

    def _do(self, call: Call[T]) -> T:
        attempt, waited = 0, 0.0
        while True:
            try:
                response = self._client.request(call.method, call.path, json=call.body)
            except httpx.TransportError as exc:
                raise unreachable(self._url, exc) from exc
            wait = retry_after(response, attempt, self._retries, waited, self._patience_s)
            if wait is None:
                return call.read(response)
            time.sleep(wait)
            attempt, waited = attempt + 1, waited + wait

    def status(self) -> StatusReport:
        return self._do(status_call())

    def query(self, question: Question, **options: Any) -> Answer:
        return self._do(query_call(query_request(question, options)))

    def stream(self, question: Question, **options: Any) -> Iterator[StreamEvent]:
        body = query_body(query_request(question, options), stream=True)
        return self._events("/v1/query", body)

    def chat_stream(self, messages: Messages, **options: Any) -> Iterator[StreamEvent]:
        return self._events("/v1/chat", chat_body(chat_request(messages, options), stream=True))

    def _events(self, path: str, body: dict[str, Any]) -> Iterator[StreamEvent]:
        """The Server-Sent Events of a streamed `POST path`: str deltas, then the `Answer`."""
        try:
            with self._client.stream("POST", path, json=body) as response:
                if not response.is_success:
                    response.read()
                    raise_for(response)
                events = EventReader()
                for line in response.iter_lines():
                    if (item := events.feed(line)) is not None:
                        yield item
        except httpx.TransportError as exc:
            raise unreachable(self._url, exc) from exc

    def chat(self, messages: Messages, **options: Any) -> Answer:
        return self._do(chat_call(chat_request(messages, options)))

    def retrieve(self, question: Question, **options: Any) -> Retrieval:
        return self._do(retrieve_call(query_request(question, options)))

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport:
        return self._do(verify_call(self._url, sample, paths, repair))

    def files(self, *, state: States = None, paths: Sequence[str | Path] = ()) -> list[FileRecord]:
        return self._do(files_call(state))

    def file(self, doc_id: str) -> FileDetail:
        return self._do(file_call(doc_id))

    def fields(self) -> list[FieldInfo]:
        return self._do(fields_call())

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        return self._do(log_call(limit))

    def snapshot(self) -> SnapshotInfo:
        return self._do(snapshot_call())

    def snapshots(self) -> list[SnapshotInfo]:
        return self._do(snapshots_call())

    def reindex_status(self) -> ReindexStatus:
        return self._do(reindex_call("status"))

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """Over HTTP the serving process backfills; `wait` polls until it is done."""
        status = self._do(reindex_call("start", embedder=embedder))
        while wait and backfilling(status := self.reindex_status(), on_progress):
            time.sleep(POLL_S)
        return status

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        return self._do(reindex_call("run"))

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        return self._do(reindex_call("promote", **promote_body(options)))

    def reindex_rollback(self) -> ReindexStatus:
        return self._do(reindex_call("rollback"))

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return self._do(reindex_call("cleanup", confirm=confirm))

    def reindex_abort(self) -> ReindexStatus:
        return self._do(reindex_call("abort"))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
