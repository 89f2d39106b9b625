"""`ragstream reindex ...`: blue/green reindex on an embedder upgrade (DESIGN §5).

Each command goes through a `Client`: it opens the data dir itself when no other process
holds it, and otherwise sends the command to the endpoint that process recorded (`watch
--serve` or `serve`). Exit codes: 0 ok, 4 the command was refused (the reason is printed;
nothing changed), 5 the data dir is held by a process that serves no endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ragstream.core.models import ReindexProgress, ReindexStatus

if TYPE_CHECKING:
    from ragstream.client import Client

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
err = Console(stderr=True)
out = Console()
EXIT_REFUSED = 4
EXIT_BUSY = 5

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="index data directory")]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Url = Annotated[str | None, typer.Option(help="a running server instead of the data dir")]
ApiKey = Annotated[str | None, typer.Option("--api-key", help="admin API key (with --url)")]


@contextmanager
def _client(data_dir: Path | None, url: str | None, api_key: str | None) -> Iterator[Client]:
    from ragstream.client import Client, DataDirBusy
    from ragstream.flows.reindex import ReindexError

    try:
        with Client(data_dir, url=url, api_key=api_key) as client:
            yield client
    except ReindexError as exc:
        err.print(f"[bold red]refused:[/] {exc}")
        raise typer.Exit(EXIT_REFUSED) from exc
    except DataDirBusy as exc:
        err.print(f"[bold red]busy:[/] {exc}")
        raise typer.Exit(EXIT_BUSY) from exc


def _show(status: ReindexStatus, as_json: bool) -> None:
    if as_json:
        print(status.model_dump_json())
        return
    emb = status.embedder
    out.print(f"queries use [bold]{emb.name if emb else '-'}[/] ({status.collection or '-'})")
    if status.record is None:
        out.print("no reindex open")
    else:
        r = status.record
        p = r.progress
        out.print(f"reindex {r.old.collection} -> {r.new.collection}: [bold]{r.phase}[/]")
        eta = f", ETA {p.eta_s:.0f}s" if p.eta_s is not None and r.phase == "backfilling" else ""
        out.print(f"backfill {p.done}/{p.total} ({p.embedded} embedded, {p.rate}/s{eta})")
        if r.gate is not None:
            out.print(f"last gate: {'passed' if r.gate.passed else 'refused'}: {r.gate.reason}")
    if status.sides:
        table = Table("collection", "embedder", "live", "deleted", "serving")
        for s in status.sides:
            cells = (s.collection, s.embedder.name, str(s.live), str(s.deleted), str(s.serving))
            table.add_row(*cells)
        out.print(table)
    if status.lag is not None:
        out.print(f"lag: {status.lag} live chunk(s) not yet on the other side")
    if status.message:
        out.print(status.message)


@contextmanager
def _bar(enabled: bool) -> Iterator[Callable[[ReindexProgress], None] | None]:
    if not enabled:
        yield None
        return
    columns = (
        TextColumn("backfill"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("backfill", total=None)

        def update(p: ReindexProgress) -> None:
            bar.update(task, total=p.total or None, completed=p.done)

        yield update


def _wait_remote(client: Client, on_progress: Callable[[ReindexProgress], None] | None) -> None:
    """Over HTTP the serving process backfills; poll its status until the pass is done."""
    while True:
        status = client.reindex_status()
        record = status.record
        if record is None or record.phase != "backfilling":
            return
        if on_progress is not None:
            on_progress(record.progress)
        time.sleep(1.0)


@app.command()
def start(
    embedder: Annotated[str, typer.Option(help="preset (minilm-l6, minilm-l3, static) or path")],
    wait: Annotated[bool, typer.Option(help="block until the backfill is complete")] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Create the new embedder's collection beside the live one and backfill it."""
    with _client(data_dir, url, api_key) as client, _bar(wait and not as_json) as bar:
        status = client.reindex_start(embedder, wait=wait, on_progress=bar)
        if wait and client.mode == "http":
            _wait_remote(client, bar)
            status = client.reindex_status()
    _show(status, as_json)


@app.command()
def run(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Continue (or repair) the backfill here until the new side is complete."""
    with _client(data_dir, None, None) as client, _bar(not as_json) as bar:
        status = client.reindex_run(on_progress=bar)
    _show(status, as_json)


@app.command()
def status(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Counts per side, lag, ETA, embedder versions and the last gate result."""
    from ragstream import api
    from ragstream.reindex import recorded_status

    try:
        with _client(data_dir, url, api_key) as client:
            result = client.reindex_status()
    except typer.Exit as exc:
        if exc.exit_code != EXIT_BUSY:
            raise
        note = "the data dir is held by a process with no endpoint: counts from its record"
        result = recorded_status(api.load_settings(data_dir), note)
    _show(result, as_json)


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
    options = {
        "eval_dataset": str(eval_dataset) if eval_dataset else None,
        "eval_split": eval_split,
        "eval_margin": eval_margin,
        "eval_limit_queries": eval_limit_queries,
    }
    with _client(data_dir, url, api_key) as client:
        status = client.reindex_promote(**options)
    _show(status, as_json)


@app.command()
def rollback(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Point queries back at the old side (kept current by dual-write)."""
    with _client(data_dir, url, api_key) as client:
        status = client.reindex_rollback()
    _show(status, as_json)


@app.command()
def cleanup(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    yes: Annotated[bool, typer.Option("--yes", help="confirm without asking")] = False,
) -> None:
    """Drop the retired side after a promote (asks for confirmation)."""
    if not yes and not typer.confirm("Drop the retired collection for good?"):
        raise typer.Exit(EXIT_REFUSED)
    with _client(data_dir, url, api_key) as client:
        status = client.reindex_cleanup(confirm=True)
    _show(status, as_json)


@app.command()
def abort(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Close a reindex that was not promoted (or was rolled back) and drop the new side."""
    with _client(data_dir, url, api_key) as client:
        status = client.reindex_abort()
    _show(status, as_json)
