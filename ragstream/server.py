"""The HTTP API: one FastAPI app for `ragstream serve` and `ragstream watch --serve`.

    GET  /v1/health              liveness (always 200 while the process runs)
    GET  /v1/ready               200 once the live collection is open and its embedder
                                 loaded, else 503 {"ready": false, ...}
    GET  /v1/status              StatusReport (a tenant key sees its own sources' records)
    GET  /v1/files               the per-file ledger, [FileRecord] (tenant-scoped; ?state=)
    GET  /v1/files/{doc_id}      FileDetail: one file's record and chunks (tenant-scoped)
    GET  /v1/eval                the saved `ragstream eval` reports, newest first (admin)
    GET  /v1/verify              VerifyReport: the disk ↔ vectors ↔ BM25 audit (admin; ?sample=)
    GET  /v1/events              sync outcomes live, Server-Sent Events (`watch --serve` only)
    POST /v1/query               QueryRequest -> Answer; {"stream": true} -> Server-Sent
                                 Events: `text` deltas as generated, then `answer`
    POST /v1/retrieve            QueryRequest -> Retrieval (ranked candidates, no generation)
    POST /v1/admin/reindex/{cmd} blue/green commands; with `api_keys` set, an admin key only
    GET  /openapi.json, /docs, /redoc   the schema and its viewers, every asset served here
    GET  /, /console/*           the web console (Ask, Files, Live, Reindex, Quality)

With `api_keys` configured every request needs `Authorization: Bearer KEY` and the key's
tenant becomes a filter inside both stores; the body can never widen it. Errors are JSON
`{"error": message, "code": ...}` (422 adds pydantic's `details`), never a traceback.
"""

import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragstream.audit import audited, file_detail, files_of_stores, verify_stores
from ragstream.connectors.state import VerifyBook
from ragstream.core.answers import Answer, QueryRequest, Retrieval
from ragstream.core.errors import (
    AuthError,
    ForbiddenError,
    NotReadyError,
    RagstreamError,
)
from ragstream.core.models import FileDetail, FileRecord, ReindexStatus, StatusReport, VerifyReport
from ragstream.core.settings import Settings
from ragstream.feed import OutcomeFeed
from ragstream.query.engine import QueryEngine
from ragstream.reindex import CleanupOptions, Maintainer, PromoteOptions, StartOptions
from ragstream.status import engine_status

CONSOLE = Path(__file__).parent / "console"  # the web console's page, script and styles
MAX_BODY = 1 << 20
# A refused body up to this size is read and dropped before the 413 goes out, and the
# connection is kept open: a client still sending when the server closes gets a broken pipe
# instead of the 413 (urllib, requests). Beyond it the server answers at once and closes;
# reading more would let anyone make it read unbounded input.
DRAIN_LIMIT = 16 * MAX_BODY
Tenants = tuple[str, ...] | None


@dataclass
class Serving:
    """What the app answers from. `engine` is None until the stores are open (not ready)."""

    settings: Settings
    engine: QueryEngine | None = None
    maintainer: Maintainer | None = None
    # one query at a time through the embedded stores; shared with the index batches when
    # the app runs inside `watch --serve`
    lock: AbstractContextManager[object] = field(default_factory=threading.Lock)
    feed: OutcomeFeed | None = None  # sync outcomes, when this process syncs (`watch --serve`)

    def ready_engine(self) -> QueryEngine:
        if self.engine is None:
            raise NotReadyError("the server is starting: the index is not open yet; retry")
        return self.engine


def _error(status: int, message: str, code: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, "code": code, **extra}, status_code=status)


def create_app(serving: Serving) -> FastAPI:
    app = FastAPIOffline(
        title="ragstream",
        version="0.1.0",
        summary="Answers with verified citations from an index kept in sync with folders.",
        swagger_ui_parameters={"validatorUrl": None},  # the viewer calls nothing outside
    )
    settings = serving.settings

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        """Bodies are read whole, so their size is checked before: a body must state it."""
        length = request.headers.get("content-length")
        if request.method == "POST" and length is None:
            return _error(411, "send the body with a Content-Length header", "invalid_request")
        size = int(length or 0)
        if size > MAX_BODY:
            refused = _error(413, f"body too large (limit {MAX_BODY} bytes)", "invalid_request")
            if size <= DRAIN_LIMIT:  # read whole: the connection stays usable, nothing to close
                async for _ in request.stream():
                    pass
            else:  # left unread: the connection cannot carry another request
                refused.headers["connection"] = "close"
            return refused
        return await call_next(request)

    @app.exception_handler(RagstreamError)
    async def user_error(request: Request, exc: RagstreamError) -> JSONResponse:
        return _error(exc.http_status, str(exc), exc.code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = json.loads(json.dumps(exc.errors(), default=str))
        return _error(422, "invalid request", "invalid_request", details=details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"no such endpoint: {request.url.path}" if exc.status_code == 404 else exc.detail
        return _error(exc.status_code, str(message), "not_found")

    def key_of(request: Request) -> str:
        return request.headers.get("authorization", "").removeprefix("Bearer ").strip()

    def tenants(request: Request) -> Tenants:
        """The caller's tenant, decided here from the API key (never from the body)."""
        keys = settings.api_keys
        if not keys:
            return None
        key = key_of(request)
        if key not in keys:
            raise AuthError("missing or unknown API key: send `Authorization: Bearer KEY`")
        return (keys[key],)

    def admin(request: Request) -> None:
        if settings.api_keys and key_of(request) not in settings.admin_api_keys:
            raise ForbiddenError("admin commands need an admin API key")

    TenantsDep = Annotated[Tenants, Depends(tenants)]

    @app.get("/v1/health", tags=["service"])
    def health() -> dict[str, Any]:
        """Liveness: the process answers. Model names once the index is open."""
        engine = serving.engine
        if engine is None:
            return {"ok": True, "ready": False}
        return {
            "ok": True,
            "ready": True,
            "embedder": engine.retriever.embedder.version.model_dump(mode="json"),
            "reranker": engine.reranker_name,
            "generator": engine.generator.name,
        }

    @app.get("/v1/ready", tags=["service"], responses={503: {"description": "not ready"}})
    def ready() -> JSONResponse:
        """Readiness: the live collection is open and its embedder is loaded."""
        engine = serving.engine
        if engine is None:
            return JSONResponse({"ready": False, "reason": "index not open yet"}, 503)
        return JSONResponse(
            {"ready": True, "collection": engine.retriever.collection,
             "embedder": engine.retriever.embedder.version.slug}
        )  # fmt: skip

    @app.get("/v1/status", tags=["index"])
    def status(caller: TenantsDep) -> StatusReport:
        """Docs, chunks, embedder, last sync, dead letters (a tenant key: its own only)."""
        engine = serving.ready_engine()
        with serving.lock:
            report = engine_status(engine)
        return report if caller is None else _for_tenant(report, settings, caller)

    @app.post("/v1/query", tags=["query"], response_model=Answer, responses=_SSE_DOC)
    def query(request: QueryRequest, caller: TenantsDep) -> Any:
        """Answer with verified citations, or a structured refusal."""
        engine = serving.ready_engine()
        if request.stream:
            return _sse(_answer_events(serving, engine, request, caller))
        with serving.lock:
            return engine.answer(request, tenants=caller)

    @app.post("/v1/retrieve", tags=["query"])
    def retrieve(request: QueryRequest, caller: TenantsDep) -> Retrieval:
        """Ranked candidates (fused, reranked) with their text and per-leg ranks; no LLM."""
        engine = serving.ready_engine()
        with serving.lock:
            return engine.retrieve(request, tenants=caller)

    @app.get("/v1/files", tags=["index"])
    def files(
        caller: TenantsDep, state: Annotated[list[str] | None, Query()] = None
    ) -> list[FileRecord]:
        """The per-file ledger: state, chunks, embedder, version, indexed-at, reason (a
        tenant key: its own sources' files only). `?state=dead&state=stale` narrows it."""
        engine = serving.ready_engine()
        r = engine.retriever
        with serving.lock:
            return files_of_stores(audited(settings), r.vectors, r.lexical, state, caller)

    @app.get("/v1/files/{doc_id:path}", tags=["index"])
    def file(doc_id: str, caller: TenantsDep) -> FileDetail:
        """One file: its ledger record and live chunks in order, with hashes and whether each
        vector was embedded, reused or kept at its last change (a tenant key: its own only)."""
        engine = serving.ready_engine()
        r = engine.retriever
        with serving.lock:
            return file_detail(audited(settings), r.vectors, r.lexical, doc_id, caller)

    @app.get("/v1/verify", tags=["index"], dependencies=[Depends(admin)])
    def verify(sample: Annotated[int | None, Query(ge=1)] = None) -> VerifyReport:
        """Audit disk ↔ vectors ↔ BM25 (admin): each drift class with counts and examples.
        Repair is `ragstream verify --repair` (or a restarted `watch`: its catch-up scan)."""
        engine = serving.ready_engine()
        r = engine.retriever
        with serving.lock:
            return verify_stores(audited(settings), r.vectors, r.lexical, sample)

    @app.get("/v1/eval", tags=["quality"], dependencies=[Depends(admin)])
    def eval_reports() -> JSONResponse:
        """The saved `ragstream eval` reports of this data dir, newest first (admin): what
        the console's Quality page tables and plots. `[{"file", "report"}]`."""
        from ragstream.eval.evaluation import saved_reports

        saved = saved_reports(settings.data_dir)
        return JSONResponse([{"file": f, "report": json.loads(r.to_json())} for f, r in saved])

    @app.get("/v1/events", tags=["index"], responses=_EVENTS_DOC)
    def events(caller: TenantsDep) -> Any:
        """Sync outcomes as they happen (Server-Sent Events), from `watch --serve` only: first
        `drift` (the last audit's counts), then one `outcome` per document written (a tenant
        key: its own sources' documents only)."""
        if serving.feed is None:
            return _error(404, "the live feed is served by `ragstream watch --serve`", "not_found")
        own = None if caller is None else {s.name for s in settings.sources if s.tenant in caller}
        return _sse(_outcome_events(serving.feed, settings, own))

    # the web console: plain files in the package, every asset served here (offline)
    app.mount("/console", StaticFiles(directory=CONSOLE), name="console")

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(CONSOLE / "index.html")

    _admin_routes(app, serving, Depends(admin))
    return app


_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": 'an Answer; with "stream": true, Server-Sent Events: `text` events '
        '({"delta": ...}) as the answer is generated, then one `answer` event (the verified '
        'Answer) or one `error` event ({"error", "code"})',
        "content": {"text/event-stream": {}},
    }
}


def _admin_routes(app: FastAPI, serving: Serving, guard: Any) -> None:
    def maintainer() -> Maintainer:
        if serving.maintainer is None:
            raise NotReadyError("reindex commands are not served by this process yet")
        return serving.maintainer

    kw: dict[str, Any] = {"tags": ["reindex (admin)"], "dependencies": [guard]}

    @app.post("/v1/admin/reindex/status", **kw)
    def reindex_status() -> ReindexStatus:
        return maintainer().status()

    @app.post("/v1/admin/reindex/start", **kw)
    def reindex_start(body: StartOptions) -> ReindexStatus:
        return maintainer().start(body.embedder)

    @app.post("/v1/admin/reindex/run", **kw)
    def reindex_run() -> ReindexStatus:
        return maintainer().run()

    @app.post("/v1/admin/reindex/promote", **kw)
    def reindex_promote(body: PromoteOptions | None = None) -> ReindexStatus:
        return maintainer().promote(body or PromoteOptions())

    @app.post("/v1/admin/reindex/rollback", **kw)
    def reindex_rollback() -> ReindexStatus:
        return maintainer().rollback()

    @app.post("/v1/admin/reindex/cleanup", **kw)
    def reindex_cleanup(body: CleanupOptions | None = None) -> ReindexStatus:
        return maintainer().cleanup((body or CleanupOptions()).confirm)

    @app.post("/v1/admin/reindex/abort", **kw)
    def reindex_abort() -> ReindexStatus:
        return maintainer().abort()


def _answer_events(
    serving: Serving, engine: QueryEngine, request: QueryRequest, tenants: Tenants
) -> Iterator[str]:
    """SSE frames. The answer runs on its own thread (which takes and releases the store
    lock itself); this generator only relays what it puts on the queue."""
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def run() -> None:
        try:
            with serving.lock:
                answer = engine.answer(
                    request, tenants=tenants, on_text=lambda d: events.put(("text", d))
                )
            events.put(("answer", answer))
        except RagstreamError as exc:
            events.put(("error", {"error": str(exc), "code": exc.code}))
        except Exception as exc:  # the stream has started: report, never hang the client
            events.put(("error", {"error": f"{type(exc).__name__}: {exc}", "code": "error"}))

    threading.Thread(target=run, name="ragstream-stream", daemon=True).start()
    while True:
        kind, payload = events.get()
        if kind == "text":
            yield _frame("text", json.dumps({"delta": payload}))
            continue
        data = payload.model_dump_json() if isinstance(payload, Answer) else json.dumps(payload)
        yield _frame(kind, data)
        return


_EVENTS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: one `drift` event ({kind: count} of the last audit, "
        "or null), then an `outcome` event (a DocOutcome) per document written; a comment "
        "line every few seconds keeps the connection checked",
        "content": {"text/event-stream": {}},
    }
}
KEEPALIVE_S = 5.0


def _outcome_events(feed: OutcomeFeed, settings: Settings, own: set[str] | None) -> Iterator[str]:
    """SSE frames of the feed; the keep-alive comment makes a gone client end the stream."""
    audit = VerifyBook(settings.state_dir).load()
    yield _frame("drift", json.dumps(audit.counts() if audit is not None else None))
    with feed.subscribe() as inbox:
        while True:
            try:
                outcome = inbox.get(timeout=KEEPALIVE_S)
            except queue.Empty:
                yield ": keep-alive\n\n"
                continue
            if own is None or outcome.doc_id.split(":", 1)[0] in own:
                yield _frame("outcome", outcome.model_dump_json())


def _sse(frames: Iterator[str]) -> StreamingResponse:
    """A Server-Sent Events response, unbuffered by proxies."""
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _frame(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


def _for_tenant(report: StatusReport, settings: Settings, tenants: tuple[str, ...]) -> StatusReport:
    """A tenant's key sees the dead letters and redactions of its own sources only, and
    none of the operator's warnings (they name server paths and models)."""
    own = {s.name for s in settings.sources if s.tenant in tenants}

    def mine(doc_id: str) -> bool:
        return doc_id.split(":", 1)[0] in own

    return report.model_copy(
        update={
            "dead_letters": [d for d in report.dead_letters if mine(d.doc_id)],
            "redactions": [r for r in report.redactions if mine(r.doc_id)],
            "warnings": [],
        }
    )


@contextmanager
def run_server(app: FastAPI, host: str, port: int) -> Iterator[str]:
    """uvicorn on a background thread; yields the URL once it accepts connections.

    The socket is bound here first, so port 0 (any free port) reports the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="ragstream-http", daemon=True
    )
    thread.start()
    while not server.started:
        if not thread.is_alive():
            sock.close()
            raise RuntimeError(f"the HTTP server on {host}:{bound} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


__all__ = ["MAX_BODY", "Serving", "create_app", "run_server"]
