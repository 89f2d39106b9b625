"""The errors a user can cause or fix, each with the CLI exit code that names it.

They live on floor 1 so every floor raises the same types and the remote client maps HTTP
failures back onto them: `except NoIndexError` works the same embedded or over HTTP. The
message is one line that says what to do; the CLI prints it without a traceback.

| code | error |
|---|---|
| 0 | (not an error) done |
| 1 | any other `RagstreamError` (a server-side failure) |
| 2 | `InvalidRequestError`: a bad argument or request body (`NotFoundError`: no such document) |
| 3 | (not an error) the mass-delete guard held deletions back |
| 4 | `RefusedError`: a reindex command refused; nothing changed |
| 5 | `DataDirBusyError`: another process holds the data dir and serves no endpoint |
| 6 | `NoIndexError`: nothing indexed in this data dir yet |
| 7 | `ModelUnavailableError`: an unknown or unloadable embedder / reranker |
| 8 | `UnreachableError`: no server answers at the URL |
| 9 | `AuthError`: a missing or unknown API key, or not an admin key |
| 10 | `SettingsError`: an unknown or invalid setting |
| 11 | `NotReadyError`: the server is up but its index is not open yet |
| 12 | (not an error) `verify` found drift (with `--repair`: drift the repair left behind) |
| 13 | `OverloadedError`: the server is at capacity, or this key past its rate (HTTP 429) |
| 14 | `ServerTimeoutError`: the server gave up on the request (HTTP 504) |
| 15 | `StorageFormatError`: a data dir of a newer storage format, or an older one not migrated |

`EXIT_CODES` is the same table for programs (the CLI's `--help` prints it).
"""

from __future__ import annotations


class RagstreamError(Exception):
    """Base of every user-facing error. `exit_code` is what the CLI exits with; `code` names
    the error in an HTTP error body (`{"error": message, "code": code}`); `http_status` is
    what the server answers it with."""

    exit_code = 1
    code = "error"
    http_status = 500


class InvalidRequestError(RagstreamError, ValueError):
    """A bad argument or request body: a filter that names no field, a path that is not a
    folder, a blank question (exit 2, HTTP 422)."""

    exit_code = 2
    code = "invalid_request"
    http_status = 422


class NotFoundError(InvalidRequestError):
    """No such document (or not one of the caller's tenant: the same answer, so a key cannot
    probe another tenant's paths)."""

    code = "not_found"
    http_status = 404


class BadSnapshotError(InvalidRequestError):
    """A snapshot file that is not whole: a member missing, changed or cut short, or a
    manifest whose counts its stores do not hold; the message names which (exit 2)."""

    code = "bad_snapshot"


class RefusedError(RagstreamError):
    """A reindex command that does not apply now, such as a promote whose gate fails or a
    rollback with nothing promoted; nothing changed (exit 4, HTTP 409)."""

    exit_code = 4
    code = "refused"
    http_status = 409


class DataDirBusyError(RagstreamError):
    """Another process holds the data dir and serves no endpoint: a `watch` without
    `--serve`. The message names its pid and says to run it with `--serve` (exit 5)."""

    exit_code = 5
    code = "data_dir_busy"
    http_status = 503


class NoIndexError(RagstreamError):
    """Nothing is indexed in this data dir yet: run `ragstream sync` first (exit 6)."""

    exit_code = 6
    code = "no_index"
    http_status = 503


class ModelUnavailableError(RagstreamError):
    """An unknown or unloadable embedder or reranker, or not the exact embedder version
    the live collection records (exit 7)."""

    exit_code = 7
    code = "model_unavailable"
    http_status = 503


class EndpointDownError(ModelUnavailableError):
    """The model endpoint (`embedding_endpoint`) did not answer after its retries: a query
    that needs a new vector gets HTTP 503 with `Retry-After`; a sync leaves the affected files
    pending (not dead letters) and the next pass, or `watch` once the endpoint is back,
    indexes them (exit 7)."""

    code = "endpoint_down"

    def __init__(self, message: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EmbedderDriftError(ModelUnavailableError):
    """The model behind a remote embedder's name changed: its probe texts' vectors moved away
    from the ones recorded with the collection. Nothing more is written; reindex to the new
    model, or pin the old one on the endpoint (exit 7, HTTP 503)."""

    code = "embedder_drift"


class UnreachableError(RagstreamError):
    """No server answers at the URL (exit 8)."""

    exit_code = 8
    code = "unreachable"
    http_status = 502


class AuthError(RagstreamError):
    """A missing or unknown API key, or a tenant key on an admin route (exit 9, HTTP 401)."""

    exit_code = 9
    code = "unauthorized"
    http_status = 401


class ForbiddenError(AuthError):
    """A valid key that may not run this command (reindex needs an admin key)."""

    code = "forbidden"
    http_status = 403


class SettingsError(RagstreamError, ValueError):
    """An unknown setting (the message names the closest valid one), a renamed one (it
    names the new name and variable) or an invalid value (exit 10)."""

    exit_code = 10
    code = "invalid_setting"
    http_status = 500


class NotReadyError(RagstreamError):
    """The server is up but still opening its index (exit 11, HTTP 503): `/v1/ready` says
    when to route traffic to it."""

    exit_code = 11
    code = "not_ready"
    http_status = 503


class OverloadedError(RagstreamError):
    """The server refused the request for now (HTTP 429, with `Retry-After`): its requests
    in flight and its queue are full. The clients retry it a few times first."""

    exit_code = 13
    code = "overloaded"
    http_status = 429


class RateLimitedError(OverloadedError):
    """This API key sent more requests a minute than `server.rate_per_key` allows."""

    code = "rate_limited"


class ShuttingDownError(NotReadyError):
    """The server is draining for shutdown (HTTP 503, with `Retry-After`)."""

    code = "shutting_down"


class ServerTimeoutError(RagstreamError):
    """The request did not finish within `server.request_timeout_s` (HTTP 504)."""

    exit_code = 14
    code = "timeout"
    http_status = 504


class StorageFormatError(RagstreamError):
    """The data dir records a storage format this ragstream does not open: a newer one
    (upgrade ragstream), or an older one with `store.migrate = "ask"` (the message names
    `ragstream migrate --data-dir D`) (exit 15, HTTP 409)."""

    exit_code = 15
    code = "storage_format"
    http_status = 409


def error_class(code: str) -> type[RagstreamError]:
    """The error type an HTTP error body's `code` names (the base type if unknown)."""
    return next((c for c in _all(RagstreamError) if c.code == code), RagstreamError)


def _all(cls: type[RagstreamError]) -> list[type[RagstreamError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all(sub))
    return out


EXIT_GUARD = 3  # the mass-delete guard held deletions back (a report, not an exception)
EXIT_REFUSED = RefusedError.exit_code
EXIT_BUSY = DataDirBusyError.exit_code
EXIT_DRIFT = 12  # `verify` found drift (with --repair: drift the repair left behind)

EXIT_CODES: dict[int, str] = {
    0: "ok",
    RagstreamError.exit_code: "server-side failure",
    InvalidRequestError.exit_code: "usage",
    EXIT_GUARD: "mass-delete guard held",
    RefusedError.exit_code: "refused",
    DataDirBusyError.exit_code: "data dir busy",
    NoIndexError.exit_code: "no index yet",
    ModelUnavailableError.exit_code: "model unavailable",
    UnreachableError.exit_code: "server unreachable",
    AuthError.exit_code: "bad API key",
    SettingsError.exit_code: "invalid setting",
    NotReadyError.exit_code: "server not ready",
    EXIT_DRIFT: "verify found drift",
    OverloadedError.exit_code: "server overloaded",
    ServerTimeoutError.exit_code: "server timed out",
    StorageFormatError.exit_code: "storage format not opened",
}
