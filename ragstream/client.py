"""`Client`: the same questions and the same `Answer`s, embedded or over HTTP.

    from ragstream import Client
    with Client(data_dir=".ragstream") as c:          # embedded: opens the stores here
        answer = c.query("how are deleted files handled?")
    Client(url="http://127.0.0.1:8765").query(...)     # a running `ragstream serve`

One process owns an embedded data dir. When another process (a `serve`) holds it, the
embedded client reads the endpoint that process recorded and talks to it over HTTP; when
the dir is held and no endpoint is recorded, the error says exactly that.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from connectors.state import read_json
from connectors.vector_stores import StoreBusyError
from core.answers import Answer, QueryRequest
from core.settings import Settings
from query.engine import QueryEngine
from query.server import endpoint_path
from ragstream.api import load_settings


class DataDirBusy(RuntimeError):
    """The data dir is held by another process that serves no HTTP endpoint."""


class Client:
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
        self._api_key, self._timeout = api_key, timeout_s
        self.url = url
        if url is None:
            s = settings or load_settings(data_dir)
            try:
                self._engine = self._stack.enter_context(QueryEngine.open(s))
            except StoreBusyError as err:
                recorded = read_json(endpoint_path(s.state_dir), {}).get("url")
                if not recorded:
                    raise DataDirBusy(
                        f"{s.data_dir} is held by another process and it records no HTTP "
                        "endpoint; stop it, or run it as `ragstream serve` and query that"
                    ) from err
                self.url = str(recorded)

    @property
    def mode(self) -> str:
        return "embedded" if self._engine is not None else "http"

    def query(self, question: str | QueryRequest, **options: Any) -> Answer:
        request = (
            question
            if isinstance(question, QueryRequest)
            else QueryRequest(query=question, **options)
        )
        if self._engine is not None:
            return self._engine.answer(request)
        return self._post(request)

    def _post(self, request: QueryRequest) -> Answer:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(
            f"{self.url}/v1/query",
            data=request.model_dump_json().encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return Answer.model_validate_json(resp.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise RuntimeError(f"query failed: HTTP {err.code}: {detail}") from err

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
