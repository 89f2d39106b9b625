"""The API's routes, each described once as a `Call` (method, path, body, how to read the
reply), and what `RemoteIndex` and its asyncio twin `AsyncRemoteIndex` share to run them: an
error reply as the typed error its body's `code` names (`raise_for`, once), when a 429 / 503
is tried again (`retry_after`), the httpx options, the Server-Sent Events reader and the
`Endpoint` base. Imports httpx and the pydantic models of `core` (`promote_body` checks the
promote's options with `core.models.PromoteOptions` before they are sent), no model and no
store."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel, TypeAdapter

from ragstream.core.answers import Answer, ChatRequest, QueryRequest, Retrieval
from ragstream.core.errors import (
    DataDirBusyError,
    InvalidRequestError,
    RagstreamError,
    UnreachableError,
    error_class,
)
from ragstream.core.models import (
    FieldInfo,
    FileDetail,
    FileRecord,
    PromoteOptions,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.snapshot import SnapshotInfo
from ragstream.service.base import (
    USER_HEADER,
    Mode,
    ProgressHandler,
    States,
    StreamEvent,
    state_list,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
FILES = TypeAdapter(list[FileRecord])
FIELDS = TypeAdapter(list[FieldInfo])
SNAPSHOTS = TypeAdapter(list[SnapshotInfo])
POLL_S = 1.0  # how often a waiting `reindex_start` asks the server how the backfill goes
RETRIES = 3  # a 429 or 503 that says when to come back is tried again this many times
MAX_RETRY_WAIT_S = 30.0  # and never waited for longer than this, whatever it says


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to the API and how its reply becomes a result."""

    method: str
    path: str
    body: Any
    read: Callable[[httpx.Response], T]


# ---- the routes, one function each -------------------------------------------------------
def status_call() -> Call[StatusReport]:
    return Call("GET", "/v1/status", None, _model(StatusReport))


def query_call(request: QueryRequest) -> Call[Answer]:
    return Call("POST", "/v1/query", query_body(request), _model(Answer))


def chat_call(request: ChatRequest) -> Call[Answer]:
    """`POST /v1/chat` with the whole conversation (answered, not streamed)."""
    return Call("POST", "/v1/chat", chat_body(request), _model(Answer))


def chat_body(request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    body = request.model_dump(mode="json", exclude_defaults=True, exclude={"stream"})
    if stream:
        body["stream"] = True
    return body


def retrieve_call(request: QueryRequest) -> Call[Retrieval]:
    return Call("POST", "/v1/retrieve", query_body(request), _model(Retrieval))


def verify_call(
    url: str, sample: int | None, paths: Sequence[str | Path], repair: bool
) -> Call[VerifyReport]:
    if repair:
        raise DataDirBusyError(
            f"the data dir is held by the process serving {url}; stop it, then run "
            "`ragstream verify --repair` (or restart it: its catch-up scan repairs stale, "
            "orphan and missing documents)"
        )
    if paths:
        raise InvalidRequestError(
            f"the process serving {url} audits the folders it syncs; PATH arguments audit "
            "other folders, which needs the data dir itself: stop it, or leave PATH out"
        )
    query = f"?sample={sample}" if sample is not None else ""
    return Call("GET", f"/v1/verify{query}", None, _model(VerifyReport))


def files_call(state: States) -> Call[list[FileRecord]]:
    states = state_list(state)
    query = "?" + urlencode([("state", s) for s in states]) if states else ""
    return Call("GET", f"/v1/files{query}", None, _adapted(FILES))


def file_call(doc_id: str) -> Call[FileDetail]:
    return Call("GET", "/v1/files/" + quote(doc_id, safe=""), None, _model(FileDetail))


def fields_call() -> Call[list[FieldInfo]]:
    return Call("GET", "/v1/fields", None, _adapted(FIELDS))


def log_call(limit: int | None) -> Call[list[dict[str, Any]]]:
    query = f"?limit={limit}" if limit else ""
    return Call("GET", f"/v1/log{query}", None, _adapted(TypeAdapter(list[dict[str, Any]])))


def snapshot_call() -> Call[SnapshotInfo]:
    return Call("POST", "/v1/snapshots", None, _model(SnapshotInfo))


def snapshots_call() -> Call[list[SnapshotInfo]]:
    return Call("GET", "/v1/snapshots", None, _adapted(SNAPSHOTS))


def reindex_call(command: str, **body: Any) -> Call[ReindexStatus]:
    return Call("POST", f"/v1/admin/reindex/{command}", body, _model(ReindexStatus))


def promote_body(options: dict[str, Any]) -> dict[str, Any]:
    """The promote options, checked here (an unknown option fails before any request)."""
    return PromoteOptions(**options).model_dump(exclude_none=True)


def query_body(request: QueryRequest, *, stream: bool = False) -> dict[str, Any]:
    body = request.model_dump(mode="json", exclude_defaults=True)
    body["query"] = request.query
    if stream:
        body["stream"] = True
    return body


# ---- replies -----------------------------------------------------------------------------
def raise_for(response: httpx.Response) -> None:
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


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        raise_for(response)
        return model.model_validate_json(response.content)

    return read


def _adapted(adapter: TypeAdapter[T]) -> Callable[[httpx.Response], T]:
    def read(response: httpx.Response) -> T:
        raise_for(response)
        return adapter.validate_json(response.content)

    return read


def retry_after(
    response: httpx.Response,
    attempt: int,
    retries: int,
    waited: float = 0.0,
    patience_s: float = 0.0,
) -> float | None:
    """Seconds to wait before trying again, or None: the reply is not a 429 / 503 that says
    when to come back (`Retry-After`), or the tries are spent. A server that says it is
    still opening its index (`not_ready`) is waited for until `patience_s` (the client's
    timeout) have passed in all (`waited` so far), however many tries that takes: it is
    coming.

    >>> r = httpx.Response(429, headers={"Retry-After": "2"})
    >>> retry_after(r, 0, 3), retry_after(r, 3, 3), retry_after(httpx.Response(500), 0, 3)
    (2.0, None, None)
    >>> starting = httpx.Response(503, headers={"Retry-After": "2"}, json={"code": "not_ready"})
    >>> retry_after(starting, 9, 3, 18.0, 120.0), retry_after(starting, 99, 3, 500.0, 120.0)
    (2.0, None)
    """
    header = response.headers.get("retry-after")
    if response.status_code not in (429, 503) or header is None:
        return None
    if attempt >= retries and not (_starting(response) and waited < patience_s):
        return None
    try:
        return min(max(float(header), 0.0), MAX_RETRY_WAIT_S)
    except ValueError:  # an HTTP date: come back in a second
        return 1.0


def _starting(response: httpx.Response) -> bool:
    """A 503 from a server still opening its index (`NotReadyError`)."""
    try:
        body = response.json()
    except ValueError:
        return False
    return (
        response.status_code == 503 and isinstance(body, dict) and body.get("code") == "not_ready"
    )


def unreachable(url: str, exc: Exception) -> UnreachableError:
    return UnreachableError(
        f"no ragstream server answers at {url} ({type(exc).__name__}): start one with "
        "`ragstream serve` or `ragstream watch PATH --serve`, or check the URL"
    )


def client_options(
    url: str, api_key: str | None, timeout_s: float, user: str | None = None
) -> dict[str, Any]:
    """httpx client options. Certificates are checked for https; a plain-http URL skips
    loading the CA bundle (a tenth of a second of every CLI query). Proxies from the
    environment are ignored: the server is named explicitly. `user` goes in the
    `X-Ragstream-User` header (honoured by a server that trusts it)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if user:
        headers[USER_HEADER] = user
    return {
        "base_url": url,
        "headers": headers,
        "timeout": timeout_s,
        "trust_env": False,
        "verify": url.lower().startswith("https:"),
    }


class EventReader:
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


def backfilling(status: ReindexStatus, on_progress: ProgressHandler | None) -> bool:
    """True while the server's backfill runs (reporting its progress on the way)."""
    record = status.record
    if record is None or record.phase != "backfilling":
        return False
    if on_progress is not None:
        on_progress(record.progress)
    return True


# ---- the endpoint ------------------------------------------------------------------------
class Endpoint:
    """A server's URL, how it is called (key, timeout) and how often a 429 / 503 that says
    when to come back is tried again."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = RETRIES,
        user: str | None = None,
    ):
        self._url, self._retries, self._patience_s = url.rstrip("/"), retries, timeout_s
        self._options = client_options(self._url, api_key, timeout_s, user)

    @property
    def mode(self) -> Mode:
        return "http"

    @property
    def url(self) -> str:
        return self._url
