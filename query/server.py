"""HTTP front of the query engine (stdlib server, pydantic at the boundary).

    POST /v1/query   QueryRequest JSON -> Answer JSON
    GET  /v1/health  {"ok": true, "embedder": ..., "reranker": ..., "generator": ...}
    POST /v1/admin/<name>  the admin routes the face registers (blue/green reindex commands),
                     JSON object in, JSON out; with `api_keys` set they need an admin key

Binds 127.0.0.1 by default. With `api_keys` configured, every request needs
`Authorization: Bearer KEY` and the key's tenant becomes a filter inside both stores; the
body can never widen it. Invalid input is a 4xx with pydantic's error list, never a 500.
The address is recorded in `<data_dir>/state/endpoint.json`, so a client that finds the
embedded data dir locked by this process talks to it instead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragstream.connectors.state import write_json_atomic
from ragstream.core.answers import QueryRequest
from ragstream.query.engine import QueryEngine

MAX_BODY = 1 << 20
ENDPOINT_FILE = "endpoint.json"


def endpoint_path(state_dir: Path) -> Path:
    return state_dir / ENDPOINT_FILE


# An admin route: request body (a JSON object) -> (HTTP status, JSON payload). The route maps
# its own errors to statuses; this module knows nothing about what it does.
AdminRoute = Callable[[dict[str, Any]], tuple[int, Any]]


class QueryServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        engine: QueryEngine,
        host: str,
        port: int,
        lock: AbstractContextManager[object] | None = None,
        admin: Mapping[str, AdminRoute] | None = None,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.engine = engine
        self.admin = dict(admin or {})
        # One query at a time through the embedded stores; shared with the index batches
        # when the server runs inside `watch --serve`.
        self.lock: AbstractContextManager[object] = lock or threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record_endpoint(self, state_dir: Path) -> None:
        write_json_atomic(endpoint_path(state_dir), {"url": self.url})


class _Handler(BaseHTTPRequestHandler):
    server: QueryServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        return

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path != "/v1/health":
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            return
        engine = self.server.engine
        self._send(
            HTTPStatus.OK,
            {
                "ok": True,
                "embedder": engine.retriever.embedder.version.model_dump(),
                "reranker": engine.reranker_name,
                "generator": engine.generator.name,
            },
        )

    def _key(self) -> str:
        return self.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    def _body(self) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return None
        return self.rfile.read(length)

    def do_POST(self) -> None:
        if self.path.startswith("/v1/admin/"):
            self._admin(self.path.removeprefix("/v1/admin/"))
            return
        if self.path != "/v1/query":
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            return
        keys = self.server.engine.settings.api_keys
        key = self._key()
        if keys and key not in keys:
            self._send(HTTPStatus.UNAUTHORIZED, {"error": "missing or unknown API key"})
            return
        tenants = (keys[key],) if keys else None
        body = self._body()
        if body is None:
            return
        try:
            request = QueryRequest.model_validate_json(body)
        except ValidationError as err:
            errors = json.loads(err.json(include_url=False, include_context=False))
            self._send(
                HTTPStatus.UNPROCESSABLE_ENTITY, {"error": "invalid request", "details": errors}
            )
            return
        with self.server.lock:
            answer = self.server.engine.answer(request, tenants=tenants)
        self._send(HTTPStatus.OK, answer.model_dump(mode="json"))

    def _admin(self, name: str) -> None:
        route = self.server.admin.get(name)
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such admin command: {name}"})
            return
        settings = self.server.engine.settings
        if settings.api_keys and self._key() not in settings.admin_api_keys:
            self._send(HTTPStatus.FORBIDDEN, {"error": "admin commands need an admin API key"})
            return
        body = self._body()
        if body is None:
            return
        try:
            payload = json.loads(body or b"{}")
        except json.JSONDecodeError as err:
            self._send(HTTPStatus.BAD_REQUEST, {"error": f"body is not JSON: {err}"})
            return
        if not isinstance(payload, dict):
            self._send(HTTPStatus.BAD_REQUEST, {"error": "body must be a JSON object"})
            return
        status, result = route(payload)
        self._send(status, result)
