# Generated from ragstream/service/remote.py by `make generate` (tools/generate_async.py).
# Do not edit: edit RemoteIndex in ragstream/service/remote.py, then run `make generate`.
"""`AsyncRemoteIndex`: the index a running server holds, over asyncio requests
(httpx.AsyncClient), with `RemoteIndex`'s methods and retries; `ragstream.service.remote` exports
it. Generated from `RemoteIndex`: edit that, then run `make generate`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
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


class AsyncRemoteIndex(Endpoint):
    """`RemoteIndex`'s methods as coroutines (httpx.AsyncClient), with the same retries; `stream`
    is an async iterator (not retried either)."""

    @cached_property
    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(**self._options)

    async def _do(self, call: Call[T]) -> T:
        attempt, waited = (0, 0.0)
        while True:
            try:
                response = await self._client.request(call.method, call.path, json=call.body)
            except httpx.TransportError as exc:
                raise unreachable(self._url, exc) from exc
            wait = retry_after(response, attempt, self._retries, waited, self._patience_s)
            if wait is None:
                return call.read(response)
            await asyncio.sleep(wait)
            attempt, waited = (attempt + 1, waited + wait)

    async def status(self) -> StatusReport:
        return await self._do(status_call())

    async def query(self, question: Question, **options: Any) -> Answer:
        return await self._do(query_call(query_request(question, options)))

    def stream(self, question: Question, **options: Any) -> AsyncIterator[StreamEvent]:
        body = query_body(query_request(question, options), stream=True)
        return self._events("/v1/query", body)

    def chat_stream(self, messages: Messages, **options: Any) -> AsyncIterator[StreamEvent]:
        return self._events("/v1/chat", chat_body(chat_request(messages, options), stream=True))

    async def _events(self, path: str, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        """The Server-Sent Events of a streamed `POST path`: str deltas, then the `Answer`."""
        try:
            async with self._client.stream("POST", path, json=body) as response:
                if not response.is_success:
                    await response.aread()
                    raise_for(response)
                events = EventReader()
                async for line in response.aiter_lines():
                    if (item := events.feed(line)) is not None:
                        yield item
        except httpx.TransportError as exc:
            raise unreachable(self._url, exc) from exc

    async def chat(self, messages: Messages, **options: Any) -> Answer:
        return await self._do(chat_call(chat_request(messages, options)))

    async def retrieve(self, question: Question, **options: Any) -> Retrieval:
        return await self._do(retrieve_call(query_request(question, options)))

    async def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport:
        return await self._do(verify_call(self._url, sample, paths, repair))

    async def files(
        self, *, state: States = None, paths: Sequence[str | Path] = ()
    ) -> list[FileRecord]:
        return await self._do(files_call(state))

    async def file(self, doc_id: str) -> FileDetail:
        return await self._do(file_call(doc_id))

    async def fields(self) -> list[FieldInfo]:
        return await self._do(fields_call())

    async def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        return await self._do(log_call(limit))

    async def snapshot(self) -> SnapshotInfo:
        return await self._do(snapshot_call())

    async def snapshots(self) -> list[SnapshotInfo]:
        return await self._do(snapshots_call())

    async def reindex_status(self) -> ReindexStatus:
        return await self._do(reindex_call("status"))

    async def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """`RemoteIndex.reindex_start`, awaited: over HTTP the serving process backfills; `wait`
        polls until it is done."""
        status = await self._do(reindex_call("start", embedder=embedder))
        while wait and backfilling((status := (await self.reindex_status())), on_progress):
            await asyncio.sleep(POLL_S)
        return status

    async def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        return await self._do(reindex_call("run"))

    async def reindex_promote(self, **options: Any) -> ReindexStatus:
        return await self._do(reindex_call("promote", **promote_body(options)))

    async def reindex_rollback(self) -> ReindexStatus:
        return await self._do(reindex_call("rollback"))

    async def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return await self._do(reindex_call("cleanup", confirm=confirm))

    async def reindex_abort(self) -> ReindexStatus:
        return await self._do(reindex_call("abort"))

    async def aclose(self) -> None:
        await self._client.aclose()
