"""What an index answers, wherever it lives: the `IndexService` protocol that the local
implementation (stores opened in this process) and the remote one (a running `serve` or
`watch --serve`, over HTTP) both satisfy, and the types their methods share."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ragstream.core.answers import Answer, QueryRequest, Retrieval
from ragstream.core.models import (
    FileDetail,
    FileRecord,
    ReindexProgress,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)

StreamEvent = str | Answer  # a text delta, then the verified Answer last
ProgressHandler = Callable[[ReindexProgress], None]
Question = str | QueryRequest
States = str | Sequence[str] | None
Mode = Literal["embedded", "http"]


def query_request(question: Question, options: dict[str, Any]) -> QueryRequest:
    """A question and keyword options (`k`, `filters`, ...) as one `QueryRequest`."""
    if isinstance(question, QueryRequest):
        return question.model_copy(update=options) if options else question
    return QueryRequest(query=question, **options)


def state_list(state: States) -> list[str]:
    """`files(state=...)` as a list: one state, several, or none (every file)."""
    return [state] if isinstance(state, str) else list(state or ())


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

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]: ...

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
