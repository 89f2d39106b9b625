"""`ragstream reindex ...`: blue/green reindex on an embedder upgrade.

Each command opens the data dir itself when no other process holds it, and otherwise sends
the command to the endpoint that process recorded (`watch --serve` or `serve`). Exit codes
as every command's: 4 the command was refused (nothing changed), 5 the data dir is held by
a process that serves no endpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragstream.cli.options import ApiKey, AsJson, DataDir, Url
from ragstream.cli.render import backfill_bar, emit_json, print_reindex
from ragstream.core.errors import EXIT_REFUSED, DataDirBusyError
from ragstream.core.models import ReindexStatus

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def show(status: ReindexStatus, as_json: bool) -> None:
    emit_json(status) if as_json else print_reindex(status)


@app.command()
def start(
    embedder: Annotated[
        str,
        typer.Option(
            help="preset (minilm-l6, minilm-l3, static, multilingual-e5-small), a path, "
            "or openai:<model>"
        ),
    ],
    wait: Annotated[bool, typer.Option(help="block until the backfill is complete")] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Create the new embedder's collection beside the live one and backfill it."""
    from ragstream.service.connect import connect

    with (
        connect(data_dir, url=url, api_key=api_key) as index,
        backfill_bar(wait and not as_json) as bar,
    ):
        status = index.reindex_start(embedder, wait=wait, on_progress=bar)
    show(status, as_json)


@app.command()
def run(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Continue (or repair) the backfill until the new side is complete."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index, backfill_bar(not as_json) as bar:
        status = index.reindex_run(on_progress=bar)
    show(status, as_json)


@app.command()
def status(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Counts per side, lag, ETA, embedder versions and the last gate result."""
    from ragstream.core.settings import load_settings
    from ragstream.service.connect import connect
    from ragstream.service.reindex import recorded_status

    try:
        with connect(data_dir, url=url, api_key=api_key) as index:
            result = index.reindex_status()
    except DataDirBusyError:
        note = "the data dir is held by a process with no endpoint: counts from its record"
        result = recorded_status(load_settings(data_dir), note)
    show(result, as_json)


@app.command()
def promote(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    eval_dataset: Annotated[
        Path | None, typer.Option(help="BEIR dataset indexed in this data dir: eval gate")
    ] = None,
    eval_split: Annotated[str, typer.Option(help="qrels split of the eval gate")] = "test",
    eval_margin: Annotated[
        float | None,
        typer.Option(
            help="max nDCG@10 drop allowed (default from settings); negative: the gain "
            "required (a tuned embedder is promoted only when better)"
        ),
    ] = None,
    eval_limit_queries: Annotated[int | None, typer.Option(help="first N judged queries")] = None,
) -> None:
    """Gate (coverage, optional eval), then atomically point queries at the new side."""
    from ragstream.service.connect import connect

    options = {
        "eval_dataset": str(eval_dataset) if eval_dataset else None,
        "eval_split": eval_split,
        "eval_margin": eval_margin,
        "eval_limit_queries": eval_limit_queries,
    }
    with connect(data_dir, url=url, api_key=api_key) as index:
        status = index.reindex_promote(**options)
    show(status, as_json)


@app.command()
def rollback(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Point queries back at the old side (kept current by dual-write)."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index:
        status = index.reindex_rollback()
    show(status, as_json)


@app.command()
def cleanup(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    yes: Annotated[bool, typer.Option("--yes", help="confirm without asking")] = False,
) -> None:
    """Drop the retired side after a promote (asks for confirmation)."""
    from ragstream.service.connect import connect

    if not yes and not typer.confirm("Drop the retired collection for good?"):
        raise typer.Exit(EXIT_REFUSED)
    with connect(data_dir, url=url, api_key=api_key) as index:
        status = index.reindex_cleanup(confirm=True)
    show(status, as_json)


@app.command()
def abort(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Close a reindex that was not promoted (or was rolled back) and drop the new side."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index:
        status = index.reindex_abort()
    show(status, as_json)
