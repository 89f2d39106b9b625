"""`Client`: the same questions and the same `Answer`s, embedded or over HTTP.

    from ragstream import Client
    with Client(data_dir=".ragstream") as c:          # embedded: opens the stores here
        answer = c.query("how are deleted files handled?")
    Client(url="http://127.0.0.1:8765").query(...)     # a running `ragstream serve`
    c.reindex_start("minilm-l3", wait=True); c.reindex_promote()   # blue/green, same API

One process owns an embedded data dir. When another process (a `serve`) holds it, the
embedded client reads the endpoint that process recorded and talks to it over HTTP; when
the dir is held and no endpoint is recorded, the error says exactly that.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ragstream.api import load_settings, open_engine
from ragstream.connectors.state import read_json
from ragstream.connectors.vector_stores import StoreBusyError
from ragstream.core.answers import Answer, QueryRequest
from ragstream.core.models import ReindexStatus
from ragstream.core.settings import Settings
from ragstream.flows.reindex import ReindexError
from ragstream.query.engine import QueryEngine
from ragstream.query.server import endpoint_path
from ragstream.reindex import Maintainer, ProgressHandler, PromoteOptions


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
        self._maintainer: Maintainer | None = None
        self._api_key, self._timeout = api_key, timeout_s
        self.url = url
        if url is None:
            s = settings or load_settings(data_dir)
            try:
                self._engine, self._maintainer = self._stack.enter_context(open_engine(s))
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
        return Answer.model_validate_json(self._call("query", request.model_dump_json()))

    def _call(self, path: str, body: str) -> bytes:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(
            f"{self.url}/v1/{path}", data=body.encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            if err.code == HTTPStatus.CONFLICT:
                raise ReindexError(json.loads(detail).get("error", detail)) from err
            raise RuntimeError(f"{path} failed: HTTP {err.code}: {detail}") from err

    # ---- blue/green reindex (the same commands as `ragstream reindex ...`) -----------------
    def _admin(
        self, command: str, local: Callable[[Maintainer], ReindexStatus], **body: Any
    ) -> ReindexStatus:
        if self._maintainer is not None:
            return local(self._maintainer)
        raw = self._call(f"admin/reindex/{command}", json.dumps(body))
        return ReindexStatus.model_validate_json(raw)

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
