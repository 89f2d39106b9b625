"""Keeping the index: `sync`, `watch`, `status`, `gc`, `rebuild-lexical`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import MofNCompleteColumn, Progress

from ragstream.cli.options import (
    AllowMass,
    ApiKey,
    AsJson,
    DataDir,
    Paths,
    Url,
    Workers,
    stop_on_sigterm,
)
from ragstream.cli.render import emit_json, err, print_status, print_sync, progress_line
from ragstream.core.errors import EXIT_GUARD, ModelUnavailableError
from ragstream.core.models import DocOutcome, SyncReport


def finish(report: SyncReport, as_json: bool) -> None:
    """The pass's totals; exit 3 when the mass-delete guard held deletions back."""
    if as_json:
        emit_json(report)
    else:
        print_sync(report)
    if report.guard is not None:
        err.print(f"[bold red]mass-delete guard:[/] {report.guard.reason}")
        raise typer.Exit(EXIT_GUARD)
    if report.docs_pending:  # good files not written now: the model endpoint's fault
        err.print(f"[bold red]{report.docs_pending} file(s) pending:[/] {report.pending_reason}")
        raise typer.Exit(ModelUnavailableError.exit_code)


def sync(
    paths: Paths,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    allow_mass_delete: AllowMass = False,
    workers: Workers = 1,
) -> None:
    """Catch up once (index == folders), then exit."""
    from ragstream.connectors.source_input import ScanSummary
    from ragstream.service import ingest

    if as_json:
        report = ingest.sync(
            paths, data_dir=data_dir, allow_mass_delete=allow_mass_delete, workers=workers
        )
        finish(report, True)
        return
    columns = (*Progress.get_default_columns(), MofNCompleteColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("scanning", total=None)

        def scanned(summary: ScanSummary) -> None:
            total = (progress.tasks[0].total or 0) + summary.events
            progress.update(task, total=total, description="indexing")

        def done(outcome: DocOutcome) -> None:
            progress.advance(task)
            progress_line(outcome)

        report = ingest.sync(
            paths,
            data_dir=data_dir,
            allow_mass_delete=allow_mass_delete,
            on_outcome=done,
            on_scan=scanned,
            workers=workers,
        )
    finish(report, False)


def watch(
    paths: Paths,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    allow_mass_delete: AllowMass = False,
    serve: Annotated[
        bool, typer.Option("--serve", help="also answer queries over HTTP from this process")
    ] = False,
    host: Annotated[str | None, typer.Option(help="with --serve: bind address")] = None,
    port: Annotated[int | None, typer.Option(help="with --serve: port (0 = any free)")] = None,
    workers: Workers = 1,
) -> None:
    """Catch up, then follow every change until Ctrl-C (optionally serving queries).
    With --json, one DocOutcome per line as documents change (JSON Lines), then the totals."""
    from ragstream import api

    def emit(outcome: DocOutcome) -> None:
        if as_json:
            print(outcome.model_dump_json(), flush=True)
        else:
            progress_line(outcome)

    stop_on_sigterm()
    settings = api.load_settings(data_dir)
    address = None
    if serve:
        address = (host or settings.server.host, settings.server.port if port is None else port)
    err.print(f"watching {', '.join(map(str, paths))} (Ctrl-C to stop)")
    try:
        report = api.watch(
            paths,
            settings=settings,
            allow_mass_delete=allow_mass_delete,
            on_outcome=emit,
            serve=address,
            on_serving=lambda url: err.print(f"serving queries at {url} (web console: {url}/)"),
            workers=workers,
        )
    except KeyboardInterrupt:
        err.print("stopped")
        return
    finish(report, as_json)


def status(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """Docs, live/deleted chunks, embedder version, last sync, dead letters (loads no model)."""
    from ragstream.service import connect

    with connect.connect(data_dir, url=url, api_key=api_key) as index:
        report = index.status()
    if as_json:
        emit_json(report)
        return
    print_status(report)


def gc(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    retention: Annotated[
        float | None, typer.Option(help="seconds a tombstone is kept (default from settings)")
    ] = None,
) -> None:
    """Hard-delete tombstones older than the retention window (never live points)."""
    from ragstream.service import ingest

    purged = ingest.gc(retention_s=retention, data_dir=data_dir)
    print(json.dumps(purged) if as_json else f"purged {purged}")


def optimize(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Build the live collection's HNSW graph (minutes per 100k chunks; run it while
    nothing serves the data dir): searches, filtered ones most, then walk the graph."""
    from ragstream.service import ingest

    done = ingest.optimize(data_dir=data_dir)
    if as_json:
        print(json.dumps(done))
    else:
        print(
            f"optimized {done['collection']}: {done['live_points']} points in {done['seconds']} s"
        )


def rebuild_lexical(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Rebuild the BM25 index from the live chunks in the vector store (no re-parse)."""
    from ragstream.service import ingest

    count = ingest.rebuild_lexical(data_dir=data_dir)
    print(json.dumps({"chunks_indexed": count}) if as_json else f"indexed {count} chunks")
