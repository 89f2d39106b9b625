"""Asking the index: `query`, `ask` (one question, or with `--chat` a conversation in the
terminal), `serve` (the HTTP API and the web console) and `log` (the retrieval log)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ragstream.cli.options import (
    ApiKey,
    AsJson,
    AsUser,
    DataDir,
    Filters,
    K,
    PreferRecent,
    RecentField,
    Url,
    Where,
    principal_option,
    stop_on_sigterm,
)
from ragstream.cli.render import (
    emit_json,
    err,
    out,
    print_answer,
    print_log,
    print_retrieval,
)
from ragstream.core.errors import (
    InvalidRequestError,
    NotReadyError,
    OverloadedError,
    ServerTimeoutError,
)

if TYPE_CHECKING:
    from ragstream.core.answers import Answer, ChatMessage, QueryFilters, RecencyPreference
    from ragstream.service.base import IndexService

# errors of one question in a conversation: printed, and the next question is asked
PASSING = (InvalidRequestError, OverloadedError, ServerTimeoutError, NotReadyError)
CHAT_HELP = (
    "a conversation in the terminal: each line is a question answered with the history "
    "before it; /reset starts over, /quit or Ctrl-D ends"
)

FILTER_KEYS = {
    "path": "path_prefix",
    "path_prefix": "path_prefix",
    "type": "file_types",
    "file_type": "file_types",
    "file_types": "file_types",
    "doc": "doc_ids",
    "doc_id": "doc_ids",
    "doc_ids": "doc_ids",
}


def recent(half_life: str | None, field: str) -> RecencyPreference | None:
    """`--prefer-recent HALF_LIFE` (and `--recent-field`) as the request's preference."""
    from pydantic import ValidationError

    from ragstream.core.answers import RecencyPreference

    if half_life is None:
        return None
    try:
        return RecencyPreference(half_life=half_life, field=field)
    except ValidationError:
        raise InvalidRequestError(
            f"--prefer-recent {half_life!r}: a half-life such as 30d, 12h or 1y"
        ) from None


def parse_filters(pairs: list[str]) -> QueryFilters:
    """`--filter KEY=VALUE` pairs as store-side filters: path (a doc id prefix,
    `source:dir/`), type (a file type; repeat or comma-separate), doc (a doc id)."""
    from ragstream.core.answers import QueryFilters

    path: str | None = None
    types: list[str] = []
    docs: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        field = FILTER_KEYS.get(key.strip().lower())
        if not sep or field is None or not value:
            raise InvalidRequestError(
                f"--filter {pair!r}: expected KEY=VALUE with KEY one of path, type, doc"
            )
        if field == "path_prefix":
            path = value
        elif field == "file_types":
            types.extend(t.strip().lstrip(".") for t in value.split(",") if t.strip())
        else:
            docs.append(value)
    return QueryFilters(path_prefix=path, file_types=types or None, doc_ids=docs or None)


def query(
    question: Annotated[str, typer.Argument(help="the question")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
    k: K = 8,
    no_generate: Annotated[
        bool,
        typer.Option("--no-generate", help="ranked candidates only (path, chunk id, text, ranks)"),
    ] = False,
    filters: Filters = None,
    where: Where = None,
    prefer_recent: PreferRecent = None,
    recent_field: RecentField = "mtime",
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """Answer a question from the index, with verified citations (or a refusal)."""
    from ragstream.core.filters import parse_where
    from ragstream.service.connect import connect

    flt = parse_filters(filters or [])
    metadata = parse_where(where) if where is not None else None  # a bad filter: exit 2 now
    options = dict(
        k=k, filters=flt, filter=metadata, prefer_recent=recent(prefer_recent, recent_field)
    )
    principal = principal_option(as_user)
    with connect(data_dir, url=url, api_key=api_key, principal=principal) as index:
        if no_generate:
            found = index.retrieve(question, **options)
            emit_json(found) if as_json else print_retrieval(found)
            return
        answer = index.query(question, **options)
    emit_json(answer) if as_json else print_answer(answer)


def ask(
    question: Annotated[
        str | None, typer.Argument(help="the question (with --chat: the first one)")
    ] = None,
    chat: Annotated[bool, typer.Option("--chat", help=CHAT_HELP)] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    k: K = 8,
    filters: Filters = None,
    where: Where = None,
    prefer_recent: PreferRecent = None,
    recent_field: RecentField = "mtime",
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """Ask the index a question (as `query` does); with --chat, hold a conversation: follow-up
    questions are answered with the history kept (--json: one Answer per line)."""
    from ragstream.service.connect import connect

    if not chat:
        if question is None:
            raise InvalidRequestError("give a QUESTION, or --chat for a conversation")
        query(
            question,
            data_dir,
            as_json,
            k,
            filters=filters,
            where=where,
            prefer_recent=prefer_recent,
            recent_field=recent_field,
            url=url,
            api_key=api_key,
            as_user=as_user,
        )
        return
    from ragstream.core.filters import parse_where

    flt = parse_filters(filters or [])
    metadata = parse_where(where) if where is not None else None
    principal = principal_option(as_user)
    with connect(data_dir, url=url, api_key=api_key, principal=principal) as index:
        try:
            preference = recent(prefer_recent, recent_field)
            lines = questions(question)
            converse(
                index, lines, as_json, k=k, filters=flt, filter=metadata, prefer_recent=preference
            )
        except KeyboardInterrupt:  # Ctrl-C while an answer is on its way: end, as Ctrl-D
            err.print()


def questions(first: str | None) -> Iterator[str]:
    """The lines the person types (after `first`, when given), until Ctrl-D or Ctrl-C; the
    prompt shows only at a terminal."""
    import sys

    if first is not None:
        yield first
    prompt = "you> " if sys.stdin.isatty() else ""
    if prompt:
        err.print("[dim]ask a question; /reset starts over, /quit or Ctrl-D ends[/]")
    while True:
        try:
            yield input(prompt)
        except (EOFError, KeyboardInterrupt):
            return


def converse(index: IndexService, lines: Iterator[str], as_json: bool, **options: Any) -> None:
    """The chat loop: each question asked with the conversation before it, each answer
    printed as it comes (with its citations, and the effective query when the history
    changed what retrieval ran). An error of this question (a bad message, the server busy
    or timing out) is printed and the conversation goes on; any other ends it."""
    from pydantic import ValidationError

    from ragstream.core.answers import MAX_CHAT_MESSAGES, ChatMessage

    history: list[ChatMessage] = []
    for line in lines:
        text = line.strip()
        if text == "/quit":
            return
        if text == "/reset":
            history.clear()
            err.print("[dim]new conversation[/]")
            continue
        if not text:
            continue
        try:
            asked = ChatMessage(role="user", content=text)
            answer = index.chat([*history, asked], **options)
        except (*PASSING, ValidationError) as exc:
            err.print(f"[red]error:[/] {escape(' '.join(str(exc).split()))}")
            continue
        history = [*history, asked, *reply_of(answer)][-(MAX_CHAT_MESSAGES - 1) :]
        if as_json:
            emit_json(answer)
        else:
            print_answer(answer)
            out.print()  # a blank line between the turns


def reply_of(answer: Answer) -> list[ChatMessage]:
    """The answer as the assistant's turn of the history: its text without the `[S1]`
    markers; none for a refusal (the question alone stays in the history)."""
    import re

    from ragstream.core.answers import MAX_MESSAGE_CHARS, ChatMessage

    text = re.sub(r"\s*\[S\d+\]", "", answer.text).strip()[:MAX_MESSAGE_CHARS]
    return [ChatMessage(role="assistant", content=text)] if text else []


def serve(
    data_dir: DataDir = None,
    host: Annotated[str | None, typer.Option(help="bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8765; 0 = any free)")] = None,
) -> None:
    """Serve the HTTP API (/v1/query, /v1/retrieve, /docs, ...) from this data dir.
    Prints {"url": ...} on stdout once it listens; notices go to stderr."""
    import threading

    from ragstream.api import serve as serve_http
    from ragstream.core.settings import load_settings

    stop_on_sigterm()
    settings = load_settings(data_dir)

    def announce(url: str) -> None:
        err.print(
            f"serving {settings.data_dir} at {url} (web console: {url}/, API docs: {url}/docs; "
            "Ctrl-C to stop)"
        )
        print(json.dumps({"url": url}), flush=True)

    with serve_http(settings, host=host, port=port, on_serving=announce):
        err.print("ready")  # the index is open: /v1/ready says so
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            err.print("stopped")


def log(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    limit: Annotated[int, typer.Option(help="newest N entries (0 = all kept)")] = 20,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Read the append-only retrieval log: who asked what, what came back, the trace id."""
    from ragstream.service.connect import connect
    from ragstream.service.ingest import query_log

    if url is None:  # the log is a file: read it here, whoever holds the stores
        entries = query_log(limit=limit or None, data_dir=data_dir)
    else:
        with connect(data_dir, url=url, api_key=api_key) as index:
            entries = index.log(limit=limit or None)
    emit_json(entries) if as_json else print_log(entries)
