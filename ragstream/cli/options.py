"""The options and arguments the CLI's commands share (typer annotations; where one reads an
environment variable, `--help` shows it), and `stop_on_sigterm` for the long-running ones."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ragstream.core.permissions import Principal

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="RAGSTREAM_DATA_DIR", help="index data directory"),
]
AsJson = Annotated[
    bool,
    typer.Option(
        "--json", help="print JSON on stdout (watch: one line per change, then the totals)"
    ),
]
# text, not Path: each kind of source parses its own form (core.source_config), and a Path
# would fold the `//` of a URI
Paths = Annotated[
    list[str],
    typer.Argument(
        help="folders, git+file:///repo@ref repositories or s3://bucket/prefix to keep in sync"
    ),
]
AllowMass = Annotated[
    bool,
    typer.Option(
        "--allow-mass-delete",
        help="delete even past the mass-delete guard (sync.mass_delete_fraction of a source)",
    ),
]
Workers = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        envvar="RAGSTREAM_WORKERS",
        help="bytewax worker threads (parsing is shared; one writes)",
    ),
]
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="RAGSTREAM_URL",
        help="a running `serve` / `watch --serve` (default: the data dir, or the endpoint "
        "the process holding it recorded)",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", envvar="RAGSTREAM_API_KEY", help="API key for --url"),
]
Filters = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        help="KEY=VALUE, repeatable: path=SOURCE:DIR/ (doc id prefix), type=md, doc=DOC_ID",
    ),
]
Where = Annotated[
    str | None,
    typer.Option(
        "--where",
        help="a metadata filter: 'tags = finance and date >= 2024-01-01 and not draft' "
        "(=, !=, in (...), not in (...), < <= > >=, exists, and, or, not, parentheses, "
        "relative dates such as -30d); `ragstream fields` lists the fields",
    ),
]
PreferRecent = Annotated[
    str | None,
    typer.Option(
        "--prefer-recent",
        metavar="HALF_LIFE",
        help="prefer recent documents: a score halves every HALF_LIFE of age (30d, 12h, 1y); "
        "off by default",
    ),
]
RecentField = Annotated[
    str,
    typer.Option("--recent-field", help="the datetime field --prefer-recent reads a date from"),
]
K = Annotated[int, typer.Option("--k", help="chunks after rerank")]
AsUser = Annotated[
    str | None,
    typer.Option(
        "--as-user",
        metavar="NAME",
        help="read as this user (a name or uid) with the groups the system gives them, as "
        "`id NAME` lists them, where sources mirror file permissions (default: only files "
        "everyone may read); over HTTP, honoured by a server that trusts X-Ragstream-User",
    ),
]


def principal_option(as_user: str | None) -> Principal | None:
    """`--as-user NAME` as the principal a question reads as (None when not given)."""
    from ragstream.core.permissions import principal_of

    return principal_of(as_user) if as_user is not None else None


def stop_on_sigterm() -> None:
    """SIGTERM (a container stop, a service manager) stops a long-running command the way
    Ctrl-C does: `watch` stops its flow, a served API drains (see `ragstream.http.server`)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
