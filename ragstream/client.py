"""`Client` and `AsyncClient`: the same questions and the same typed results, embedded or
over HTTP.

    from ragstream import Client, AsyncClient
    with Client(data_dir=".ragstream") as c:           # embedded: opens the stores here
        answer = c.query("how are deleted files handled?")
    with Client(url="http://127.0.0.1:8765") as c:    # a running `serve` / `watch --serve`
        c.retrieve("deleted files", k=5).results
    async with AsyncClient(url="http://127.0.0.1:8765") as c:
        answer = await c.query("...")

The HTTP clients import neither torch nor any store (httpx and the pydantic models only).
One process owns an embedded data dir: when another process holds it, the embedded client
talks to the endpoint that process recorded; when it records none, the error says which
pid holds it and how to query it. Failures raise the typed errors of
`ragstream.core.errors`, with the server's message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from ragstream.connectors.state import endpoint_path, read_json
from ragstream.core.answers import Answer, QueryRequest, Retrieval
from ragstream.core.errors import (
    DataDirBusyError,
    RagstreamError,
    UnreachableError,
    error_class,
)
from ragstream.core.models import FileDetail, FileRecord, ReindexStatus, StatusReport, VerifyReport
from ragstream.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from ragstream.query.engine import QueryEngine
    from ragstream.reindex import Maintainer, ProgressHandler

M = TypeVar("M", bound=BaseModel)
FILES = TypeAdapter(list[FileRecord])
DataDirBusy = DataDirBusyError  # the name earlier releases exported
StreamEvent = str | Answer  # a text delta, then the verified Answer last


# ---- the wire: pure helpers shared by the sync and the async client ---------------------
def _options(url: str, api_key: str | None, timeout_s: float) -> dict[str, Any]:
    """httpx client options. Certificates are checked for https; a plain-http URL skips
    loading the CA bundle (a tenth of a second of every CLI query). Proxies from the
    environment are ignored: the server is named explicitly."""
    return {
        "base_url": url,
        "headers": {"Authorization": f"Bearer {api_key}"} if api_key else {},
        "timeout": timeout_s,
        "trust_env": False,
        "verify": url.lower().startswith("https:"),
    }


def _request(question: str | QueryRequest, options: dict[str, Any]) -> QueryRequest:
    if isinstance(question, QueryRequest):
        return question.model_copy(update=options) if options else question
    return QueryRequest(query=question, **options)


def _raise_for(response: httpx.Response) -> None:
    """A non-2xx reply as the typed error its body's `code` names, with its message."""
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    message = str(body.get("error") or response.text or response.reason_phrase)
    details = body.get("details")
    if details:
        first = details[0]
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{message}: {where}: {first.get('msg', '')}".rstrip(": ")
    cls = error_class(str(body.get("code", "")))
    if cls is RagstreamError:
        message = f"HTTP {response.status_code} from {response.url}: {message}"
    raise cls(message)


def _unreachable(url: str, exc: Exception) -> UnreachableError:
    return UnreachableError(
        f"no ragstream server answers at {url} ({type(exc).__name__}): start one with "
        "`ragstream serve` or `ragstream watch PATH --serve`, or check the URL"
    )


def _parse(model: type[M], response: httpx.Response) -> M:
    _raise_for(response)
    return model.model_validate_json(response.content)


class _EventReader:
    """Server-Sent Events a line at a time: `feed` returns what the blank line that ends an
    event carries (a text delta or the Answer), or raises the error event's typed error."""

    def __init__(self) -> None:
        self._event, self._data = "message", list[str]()

    def feed(self, line: str) -> StreamEvent | None:
        if line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        if line or not self._data:
            return None
        event, data = self._event, "\n".join(self._data)
        self._event, self._data = "message", []
        if event == "text":
            return str(json.loads(data)["delta"])
        if event == "answer":
            return Answer.model_validate_json(data)
        body = json.loads(data)
        raise error_class(str(body.get("code", "")))(str(body.get("error", data)))


# ---- sync -------------------------------------------------------------------------------
class _Http:
    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(**_options(self.url, api_key, timeout_s))

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            return self._client.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc

    def stream(self, body: Any) -> Iterator[StreamEvent]:
        try:
            with self._client.stream("POST", "/v1/query", json=body) as response:
                if not response.is_success:
                    response.read()
                    _raise_for(response)
                events = _EventReader()
                for line in response.iter_lines():
                    if (item := events.feed(line)) is not None:
                        yield item
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc

    def close(self) -> None:
        self._client.close()


class Client:
    """Embedded (`data_dir`, or settings) or remote (`url`); the same methods either way."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        settings: Settings | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self._stack = ExitStack()
        self._engine: QueryEngine | None = None
        self._maintainer: Maintainer | None = None
        self._http: _Http | None = None
        if url is None:
            s = settings or load_settings(data_dir)
            url = recorded_endpoint(s) or self._open_embedded(s)
        if url is not None:
            self._http = _Http(url, api_key, timeout_s)
            self._stack.callback(self._http.close)

    def _open_embedded(self, s: Settings) -> str | None:
        """Open the stores here; or the URL of the process that holds them."""
        from ragstream.api import open_engine
        from ragstream.connectors.vector_stores import StoreBusyError

        try:
            self._engine, self._maintainer = self._stack.enter_context(open_engine(s))
            return None
        except StoreBusyError as err:
            recorded = recorded_endpoint(s)
            if not recorded:
                raise DataDirBusyError(busy_message(s)) from err
            return recorded

    @property
    def mode(self) -> str:
        return "embedded" if self._engine is not None else "http"

    @property
    def url(self) -> str | None:
        return self._http.url if self._http is not None else None

    def query(self, question: str | QueryRequest, **options: Any) -> Answer:
        """Answer with verified citations (or a structured refusal)."""
        request = _request(question, options)
        if self._engine is not None:
            return self._engine.answer(request)
        return _parse(Answer, self._remote().call("POST", "/v1/query", _body(request)))

    def stream(self, question: str | QueryRequest, **options: Any) -> Iterator[StreamEvent]:
        """The answer's text as it is generated (str deltas), then the verified `Answer`."""
        request = _request(question, options)
        if self._engine is not None:
            pieces: list[str] = []
            answer = self._engine.answer(request, on_text=pieces.append)
            yield from pieces
            yield answer
            return
        yield from self._remote().stream(_body(request, stream=True))

    def retrieve(self, question: str | QueryRequest, **options: Any) -> Retrieval:
        """Ranked candidates with their text and per-leg ranks and scores; no generation."""
        request = _request(question, options)
        if self._engine is not None:
            return self._engine.retrieve(request)
        return _parse(Retrieval, self._remote().call("POST", "/v1/retrieve", _body(request)))

    def status(self) -> StatusReport:
        if self._engine is not None:
            from ragstream.status import engine_status

            return engine_status(self._engine)
        return _parse(StatusReport, self._remote().call("GET", "/v1/status"))

    def verify(self, *, sample: int | None = None) -> VerifyReport:
        """Audit the index against its folders (`ragstream verify`; an admin key over HTTP)."""
        if self._engine is not None:
            from ragstream.audit import audited, verify_stores

            r = self._engine.retriever
            return verify_stores(audited(self._engine.settings), r.vectors, r.lexical, sample)
        query = f"?sample={sample}" if sample is not None else ""
        return _parse(VerifyReport, self._remote().call("GET", f"/v1/verify{query}"))

    def files(self, *, state: str | Sequence[str] | None = None) -> list[FileRecord]:
        """The per-file ledger (`ragstream files`); over HTTP, the key's tenant only."""
        states = [state] if isinstance(state, str) else list(state or ())
        if self._engine is not None:
            from ragstream.audit import audited, files_of_stores

            r = self._engine.retriever
            s = audited(self._engine.settings)
            return files_of_stores(s, r.vectors, r.lexical, states)
        query = "?" + "&".join(f"state={x}" for x in states) if states else ""
        response = self._remote().call("GET", f"/v1/files{query}")
        _raise_for(response)
        return FILES.validate_python(response.json())

    def file(self, doc_id: str) -> FileDetail:
        """One file's record and live chunks in order (`ragstream file DOC_ID`); over HTTP,
        another tenant's file is `NotFoundError` like a file that does not exist."""
        if self._engine is not None:
            from ragstream.audit import audited, file_detail

            r = self._engine.retriever
            return file_detail(audited(self._engine.settings), r.vectors, r.lexical, doc_id)
        path = "/v1/files/" + quote(doc_id, safe="")
        return _parse(FileDetail, self._remote().call("GET", path))

    def _remote(self) -> _Http:
        assert self._http is not None
        return self._http

    # ---- blue/green reindex (the same commands as `ragstream reindex ...`) -----------------
    def _admin(
        self, command: str, local: Callable[[Maintainer], ReindexStatus], **body: Any
    ) -> ReindexStatus:
        if self._maintainer is not None:
            return local(self._maintainer)
        response = self._remote().call("POST", f"/v1/admin/reindex/{command}", body)
        return _parse(ReindexStatus, response)

    def reindex_status(self) -> ReindexStatus:
        return self._admin("status", lambda m: m.status())

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        """Open the new embedder's side. `wait` backfills it here (embedded); over HTTP the
        serving process backfills in the background (poll `reindex_status`)."""

        def local(m: Maintainer) -> ReindexStatus:
            return m.start(embedder, wait=wait, on_progress=on_progress)

        return self._admin("start", local, embedder=embedder)

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        return self._admin("run", lambda m: m.run(on_progress))

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        """Options: `eval_dataset`, `eval_split`, `eval_margin`, `eval_limit_queries`."""
        from ragstream.reindex import PromoteOptions

        opts = PromoteOptions(**options)
        return self._admin(
            "promote", lambda m: m.promote(opts), **opts.model_dump(exclude_none=True)
        )

    def reindex_rollback(self) -> ReindexStatus:
        return self._admin("rollback", lambda m: m.rollback())

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return self._admin("cleanup", lambda m: m.cleanup(confirm), confirm=confirm)

    def reindex_abort(self) -> ReindexStatus:
        return self._admin("abort", lambda m: m.abort())

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- async (HTTP only) ------------------------------------------------------------------
class AsyncClient:
    """The HTTP client's methods as coroutines (httpx.AsyncClient); `stream` is an async
    iterator. Embedded use is the sync `Client`: the stores are not async."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 120.0):
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(**_options(self.url, api_key, timeout_s))

    async def _call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            return await self._client.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc

    async def query(self, question: str | QueryRequest, **options: Any) -> Answer:
        body = _body(_request(question, options))
        return _parse(Answer, await self._call("POST", "/v1/query", body))

    async def stream(
        self, question: str | QueryRequest, **options: Any
    ) -> AsyncIterator[StreamEvent]:
        body = _body(_request(question, options), stream=True)
        try:
            async with self._client.stream("POST", "/v1/query", json=body) as response:
                if not response.is_success:
                    await response.aread()
                    _raise_for(response)
                events = _EventReader()
                async for line in response.aiter_lines():
                    if (item := events.feed(line)) is not None:
                        yield item
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc

    async def retrieve(self, question: str | QueryRequest, **options: Any) -> Retrieval:
        body = _body(_request(question, options))
        return _parse(Retrieval, await self._call("POST", "/v1/retrieve", body))

    async def status(self) -> StatusReport:
        return _parse(StatusReport, await self._call("GET", "/v1/status"))

    async def _admin(self, command: str, **body: Any) -> ReindexStatus:
        response = await self._call("POST", f"/v1/admin/reindex/{command}", body)
        return _parse(ReindexStatus, response)

    async def reindex_status(self) -> ReindexStatus:
        return await self._admin("status")

    async def reindex_start(self, embedder: str) -> ReindexStatus:
        return await self._admin("start", embedder=embedder)

    async def reindex_run(self) -> ReindexStatus:
        return await self._admin("run")

    async def reindex_promote(self, **options: Any) -> ReindexStatus:
        return await self._admin("promote", **options)

    async def reindex_rollback(self) -> ReindexStatus:
        return await self._admin("rollback")

    async def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        return await self._admin("cleanup", confirm=confirm)

    async def reindex_abort(self) -> ReindexStatus:
        return await self._admin("abort")

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _body(request: QueryRequest, *, stream: bool = False) -> dict[str, Any]:
    body = request.model_dump(mode="json", exclude_defaults=True)
    body["query"] = request.query
    if stream:
        body["stream"] = True
    return body


def recorded_endpoint(s: Settings) -> str | None:
    """The URL a live `serve` / `watch --serve` recorded for this data dir, if any. Asked
    before opening the stores, so a query to a served data dir loads no model here."""
    import os

    record = read_json(endpoint_path(s.state_dir), {})
    url, pid = record.get("url"), record.get("pid")
    if not url:
        return None
    if isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # left behind by a process that died: nobody serves there
        except PermissionError:
            pass  # alive, another user's
    return str(url)


def busy_message(s: Settings) -> str:
    """Who holds the data dir and how to query it anyway."""
    pid = _ingest_holder(s.state_dir / "ingest.lock")
    who = f"a sync/watch (pid {pid})" if pid else "another process (an embedded client?)"
    return (
        f"{s.data_dir} is held by {who} that serves no HTTP endpoint: to query it while it "
        f"runs, start it as `ragstream watch PATH --data-dir {s.data_dir} --serve`; or stop "
        "it and query again"
    )


def _ingest_holder(lock: Path) -> str | None:
    """The pid a live sync/watch recorded in its ingest lock; None if no process holds it
    (the file outlives its process, so the lock itself is asked, not just the file)."""
    import fcntl
    import os

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock.read_text().strip() or "?"
    finally:
        os.close(fd)  # also drops a lock taken just now
    return None


__all__ = ["AsyncClient", "Client", "DataDirBusy", "StreamEvent"]
