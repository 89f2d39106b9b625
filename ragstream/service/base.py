"""What an index answers, wherever it lives: the `IndexService` protocol that the local
implementation (stores opened in this process) and the remote one (a running `serve` or
`watch --serve`, over HTTP) both satisfy; `ServedService`, what a serving process adds to it
(a tenant-scoped view, the awaited answer, its models, the live feed), which the HTTP routes
call; and the types their methods share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from ragstream.core.answers import Answer, ChatMessage, ChatRequest, QueryRequest, Retrieval
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import (
    DocOutcome,
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexProgress,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal
from ragstream.core.snapshot import SnapshotInfo

StreamEvent = str | Answer  # a text delta, then the verified Answer last
ProgressHandler = Callable[[ReindexProgress], None]
Question = str | QueryRequest
# a conversation, oldest first, the last message the question: `ChatMessage`s or plain
# `{"role", "content"}` dicts, or a whole `ChatRequest`
Messages = ChatRequest | Sequence[ChatMessage | dict[str, Any]]
States = str | Sequence[str] | None
Mode = Literal["embedded", "http"]
Tenants = tuple[str, ...] | None  # an API key's tenants; None: every tenant
USER_HEADER = "X-Ragstream-User"  # the user a trusted reverse proxy authenticated


class Caller(NamedTuple):
    """Who asks: the tenants of their API key (None: every tenant) and the principal they
    read as where sources mirror file permissions (None: `everyone`'s files only)."""

    tenants: Tenants = None
    principal: Principal | None = None


Offload = Callable[..., Awaitable[Any]]  # runs `fn(*args)` on a bounded pool, awaited


def query_request(question: Question, options: dict[str, Any]) -> QueryRequest:
    """A question and keyword options (`k`, `filters`, ...) as one `QueryRequest`."""
    if isinstance(question, QueryRequest):
        return question.model_copy(update=options) if options else question
    return QueryRequest(query=question, **options)


def chat_request(messages: Messages, options: dict[str, Any]) -> ChatRequest:
    """A conversation and keyword options (`k`, `filters`, ...) as one `ChatRequest`,
    validated (`ValidationError` names what is wrong: no message, a last message that is
    not the user's, past `MAX_CHAT_MESSAGES` or `MAX_MESSAGE_CHARS`)."""
    if isinstance(messages, ChatRequest):
        if not options:
            return messages
        return ChatRequest.model_validate({**messages.model_dump(), **options})
    if isinstance(messages, str):
        raise InvalidRequestError(
            "messages is a list of {role, content} messages, the last one the question; "
            "ask a single question with `query`"
        )
    return ChatRequest.model_validate({"messages": list(messages), **options})


def state_list(state: States) -> list[str]:
    """`files(state=...)` as a list: one state, several, or none (every file)."""
    return [state] if isinstance(state, str) else list(state or ())


class Followed(NamedTuple):
    """The live feed as one caller sees it: the last audit's drift counts (None before the
    first), then each document written (None after every quiet `wait_s`)."""

    drift: dict[str, int] | None
    outcomes: Iterator[DocOutcome | None]


@runtime_checkable
class IndexService(Protocol):
    """One index's questions, audit and blue/green commands. Close it (or use `with`)."""

    @property
    def mode(self) -> Mode: ...

    @property
    def url(self) -> str | None: ...

    def status(self) -> StatusReport: ...

    def query(self, question: Question, **options: Any) -> Answer: ...

    def stream(self, question: Question, **options: Any) -> Iterator[StreamEvent]: ...

    def chat(self, messages: Messages, **options: Any) -> Answer: ...

    def chat_stream(self, messages: Messages, **options: Any) -> Iterator[StreamEvent]: ...

    def retrieve(self, question: Question, **options: Any) -> Retrieval: ...

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
    ) -> VerifyReport: ...

    def files(
        self, *, state: States = None, paths: Sequence[str | Path] = ()
    ) -> list[FileRecord]: ...

    def file(self, doc_id: str) -> FileDetail: ...

    def fields(self) -> list[FieldInfo]: ...

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]: ...

    def snapshot(self) -> SnapshotInfo: ...

    def snapshots(self) -> list[SnapshotInfo]: ...

    def reindex_status(self) -> ReindexStatus: ...

    def reindex_start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus: ...

    def reindex_run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus: ...

    def reindex_promote(self, **options: Any) -> ReindexStatus: ...

    def reindex_rollback(self) -> ReindexStatus: ...

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus: ...

    def reindex_abort(self) -> ReindexStatus: ...

    def close(self) -> None: ...

    def __enter__(self) -> IndexService: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class ServedService(IndexService, Protocol):
    """An index a serving process holds open: `IndexService`, and what the HTTP routes (and
    any other face of the process) need beside it. Every route is one call on
    `scoped(caller's tenants)`."""

    def scoped(self, tenants: Tenants, principal: Principal | None = None) -> ServedService: ...

    async def query_async(
        self,
        request: QueryRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer: ...

    async def chat_async(
        self,
        request: ChatRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        offload: Offload,
    ) -> Answer: ...

    def verify(
        self,
        *,
        sample: int | None = None,
        paths: Sequence[str | Path] = (),
        repair: bool = False,
        allow_mass_delete: bool = False,
        pause: Callable[[], None] = ...,
    ) -> VerifyReport: ...

    def health(self) -> dict[str, Any]: ...

    def readiness(self) -> dict[str, Any]: ...

    def eval_reports(self) -> list[dict[str, Any]]: ...

    def follow(self, wait_s: float) -> Followed: ...

    def snapshot_file(self, snapshot_id: str) -> Path: ...
