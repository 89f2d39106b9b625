"""`ragstream` command line: sync, watch, status, gc. Every command takes --data-dir/--json.

Exit codes: 0 ok, 2 usage error, 3 the mass-delete guard held deletions back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Annotated

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress
from rich.table import Table

from ragstream.core.models import DocOutcome, StatusReport, SyncReport
from ragstream.reindex_cli import app as reindex_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
app.add_typer(reindex_app, name="reindex", help="blue/green reindex on an embedder upgrade")
err = Console(stderr=True)
out = Console()
EXIT_GUARD = 3

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="index data directory")]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Paths = Annotated[list[Path], typer.Argument(help="folders to keep in sync")]
AllowMass = Annotated[
    bool, typer.Option("--allow-mass-delete", help="proceed even if most docs vanished")
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


def _progress_line(outcome: DocOutcome) -> None:
    if outcome.dead_letter is not None:
        d = outcome.dead_letter
        err.print(f"[red]dead letter[/] {d.path} [{d.stage}] {d.reason}")
    elif outcome.deleted:
        err.print(f"[yellow]deleted[/] {outcome.doc_id} ({outcome.chunks_tombstoned} tombstoned)")
    elif outcome.changed:
        err.print(
            f"[green]indexed[/] {outcome.doc_id}: {outcome.chunks_live} chunks "
            f"({outcome.chunks_embedded} embedded, {outcome.chunks_reused} reused, "
            f"{outcome.chunks_moved} moved, {outcome.chunks_tombstoned} tombstoned)"
        )


def _finish(report: SyncReport, as_json: bool) -> None:
    if as_json:
        print(report.model_dump_json())
    else:
        table = Table(title="sync", show_header=False)
        for key, value in report.model_dump(exclude={"dead_letters", "guard"}).items():
            table.add_row(key, str(value))
        table.add_row("dead_letters", str(len(report.dead_letters)))
        out.print(table)
    if report.guard is not None:
        err.print(f"[bold red]mass-delete guard:[/] {report.guard.reason}")
        raise typer.Exit(EXIT_GUARD)


@app.command()
def sync(
    paths: Paths,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    allow_mass_delete: AllowMass = False,
    workers: Workers = 1,
) -> None:
    """Catch up once (index == folders), then exit."""
    from ragstream import api
    from ragstream.connectors.fs import ScanSummary

    if as_json:
        report = api.sync(
            paths, data_dir=data_dir, allow_mass_delete=allow_mass_delete, workers=workers
        )
        _finish(report, True)
        return
    columns = (*Progress.get_default_columns(), MofNCompleteColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("scanning", total=None)

        def scanned(summary: ScanSummary) -> None:
            total = (progress.tasks[0].total or 0) + summary.events
            progress.update(task, total=total, description="indexing")

        def done(outcome: DocOutcome) -> None:
            progress.advance(task)
            _progress_line(outcome)

        report = api.sync(
            paths,
            data_dir=data_dir,
            allow_mass_delete=allow_mass_delete,
            on_outcome=done,
            on_scan=scanned,
            workers=workers,
        )
    _finish(report, False)


@app.command()
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
    """Catch up, then follow every change until Ctrl-C (optionally serving queries)."""
    from ragstream import api

    def emit(outcome: DocOutcome) -> None:
        if as_json:
            print(outcome.model_dump_json(), flush=True)
        else:
            _progress_line(outcome)

    settings = api.load_settings(data_dir)
    address = None
    if serve:
        address = (host or settings.server_host, settings.server_port if port is None else port)
    err.print(f"watching {', '.join(map(str, paths))} (Ctrl-C to stop)")
    try:
        report = api.watch(
            paths,
            settings=settings,
            allow_mass_delete=allow_mass_delete,
            on_outcome=emit,
            serve=address,
            on_serving=lambda url: err.print(f"serving queries at {url}"),
            workers=workers,
        )
    except KeyboardInterrupt:
        err.print("stopped")
        return
    _finish(report, as_json)


@app.command()
def status(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Docs, live/deleted chunks, embedder version, last sync, dead letters."""
    from ragstream import api

    report = api.status(data_dir=data_dir)
    if as_json:
        print(report.model_dump_json())
        return
    _print_status(report)


def _print_status(report: StatusReport) -> None:
    table = Table(title="ragstream status", show_header=False)
    table.add_row("docs", str(report.docs))
    table.add_row("chunks live / deleted", f"{report.chunks_live} / {report.chunks_deleted}")
    table.add_row("lexical live", str(report.lexical_live))
    emb = report.embedder
    table.add_row("embedder", f"{emb.name} ({emb.dimension}d, {emb.fingerprint})" if emb else "-")
    table.add_row("collection", report.collection or "-")
    table.add_row("reranker", report.reranker)
    last = report.last_sync
    table.add_row("last sync", dt.datetime.fromtimestamp(last).isoformat() if last else "never")
    table.add_row("dead letters", str(len(report.dead_letters)))
    rx = report.reindex
    pair = f"{rx.old.collection} -> {rx.new.collection}: {rx.phase}" if rx else "-"
    table.add_row("reindex", pair)
    out.print(table)
    for d in report.dead_letters:
        out.print(f"  [red]{d.path}[/] [{d.stage}] {d.reason}")
    for r in report.redactions:
        out.print(f"  [yellow]secrets redacted[/] {r.path}: {', '.join(r.kinds)}")


@app.command()
def gc(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    retention: Annotated[
        float | None, typer.Option(help="seconds a tombstone is kept (default from settings)")
    ] = None,
) -> None:
    """Hard-delete tombstones older than the retention window (never live points)."""
    from ragstream import api

    purged = api.gc(retention_s=retention, data_dir=data_dir)
    print(json.dumps(purged) if as_json else f"purged {purged}")


@app.command(name="rebuild-lexical")
def rebuild_lexical(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Rebuild the BM25 index from the live chunks in the vector store (no re-parse)."""
    from ragstream import api

    count = api.rebuild_lexical(data_dir=data_dir)
    print(json.dumps({"chunks_indexed": count}) if as_json else f"indexed {count} chunks")


@app.command(name="log")
def log_(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    limit: Annotated[int, typer.Option(help="newest N entries (0 = all kept)")] = 20,
) -> None:
    """Read the append-only retrieval log: who asked what, what came back, the trace id."""
    from ragstream import api

    entries = api.query_log(limit=limit or None, data_dir=data_dir)
    if as_json:
        print(json.dumps(entries))
        return
    for e in entries:
        when = dt.datetime.fromtimestamp(e["time"]).isoformat(timespec="seconds")
        outcome = f"refused: {e['refusal']}" if e["refusal"] else f"grounding {e['grounding']:.0%}"
        out.print(
            f"{when} [{e['trace_id'][:8]}] {e['query']!r} → {len(e['retrieved'])} "
            f"chunks, {len(e['cited'])} cited, {outcome}"
        )


@app.command()
def query(
    question: Annotated[str, typer.Argument(help="the question")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
    k: Annotated[int, typer.Option(help="chunks after rerank")] = 8,
    url: Annotated[str | None, typer.Option(help="a running `ragstream serve`")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RAGSTREAM_API_KEY")] = None,
) -> None:
    """Answer a question from the index, with verified citations (or a refusal)."""
    from ragstream.client import Client

    with Client(data_dir, url=url, api_key=api_key) as client:
        answer = client.query(question, k=k)
    if as_json:
        print(answer.model_dump_json())
        return
    if answer.refusal is not None:
        out.print(f"[yellow]no answer[/] ({answer.refusal.reason}): {answer.refusal.detail}")
    else:
        out.print(answer.text)
        out.print(
            f"[dim]grounding {answer.grounding:.0%} · reranker {answer.reranker} · "
            f"trace {answer.trace_id}[/]"
        )
    for c in answer.citations:
        where = " › ".join(c.section_path) or "-"
        page = f" p.{c.page}" if c.page else ""
        out.print(f"  [{c.cid}] {c.path}{page} ({where}) chars {c.char_start}-{c.char_end}")


@app.command()
def serve(
    data_dir: DataDir = None,
    host: Annotated[str | None, typer.Option(help="bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8765; 0 = any free)")] = None,
) -> None:
    """Serve queries over HTTP (POST /v1/query) from this data dir."""
    import threading

    from ragstream import api
    from ragstream.query.engine import QueryEngine

    settings = api.load_settings(data_dir)
    bind_host = host or settings.server_host
    bind_port = settings.server_port if port is None else port

    def announce(url: str) -> None:
        err.print(f"serving {settings.data_dir} at {url} (Ctrl-C to stop)")
        print(json.dumps({"url": url}), flush=True)

    with (
        QueryEngine.open(settings) as engine,
        api.serving(engine, bind_host, bind_port, on_serving=announce),
    ):
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            err.print("stopped")


@app.command(name="eval")
def eval_(
    dataset_dir: Annotated[Path, typer.Argument(help="a BEIR-format dataset folder")],
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="data dir the corpus is indexed into (reused)")
    ],
    split: Annotated[str, typer.Option(help="qrels split: qrels/<split>.tsv")] = "test",
    as_json: AsJson = False,
    limit_queries: Annotated[
        int | None, typer.Option("--limit-queries", help="only the first N judged queries")
    ] = None,
    depth: Annotated[int | None, typer.Option(help="chunks retrieved per leg")] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="retrieval: ablation rows + failure report; gold: answer from the gold "
            "passages; abstain: questions with no answer in the index must be refused; "
            "answers: context-assembly ablation (document order, parent expansion) scored "
            "on the answers"
        ),
    ] = "retrieval",
    answers: Annotated[
        bool,
        typer.Option(
            "--answers",
            help="retrieval mode: also run the answer path per query to classify refused / "
            "unsupported answers (slower)",
        ),
    ] = False,
    k: Annotated[int | None, typer.Option("--k", help="chunks an answer is built from")] = None,
) -> None:
    """Index a BEIR dataset through the real ingest, then evaluate it.

    retrieval (default): the ablation table and the "which stage broke?" failure counts,
    saved to DATA_DIR/eval/SPLIT.json; gold / abstain / answers: answer-level checks, saved to
    DATA_DIR/eval/SPLIT.MODE.json. Per-query details go to DATA_DIR/eval/SPLIT.MODE.details.json.
    Reruns embed nothing.
    """
    from ragstream.eval.evaluation import (
        DEFAULT_DEPTH,
        DEFAULT_K,
        MODES,
        evaluate_dataset,
        markdown_report,
    )

    if mode not in MODES:
        raise typer.BadParameter(f"expected one of {', '.join(MODES)}", param_hint="--mode")
    if not as_json:
        err.print(f"indexing {dataset_dir} into {data_dir} (incremental), then evaluating")
    report = evaluate_dataset(
        dataset_dir,
        data_dir,
        split,
        limit_queries=limit_queries,
        depth=depth or DEFAULT_DEPTH,
        mode=mode,  # checked against MODES above
        answers=answers,
        k=k or DEFAULT_K,
    )
    if as_json:
        print(report.to_json())
        return
    out.print(f"{report.dataset} {split}: {report.queries} queries, depth {report.depth}/leg\n")
    print(markdown_report(report))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
