"""ragstream: keep a retrieval index in sync with folders; answer with verified citations.

Index: sync, watch, status, verify, files, file, gc, rebuild-lexical, reindex.
Ask: query, serve, log.
Measure: eval, tune. Settings: config. Every command takes --data-dir; most take --json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import MofNCompleteColumn, Progress
from rich.table import Table

from ragstream.audit_cli import file, files, verify
from ragstream.cli_options import AllowMass, AsJson, DataDir, Paths, Workers
from ragstream.core.errors import EXIT_GUARD, InvalidRequestError, RagstreamError
from ragstream.core.models import DocOutcome, StatusReport, SyncReport
from ragstream.reindex_cli import app as reindex_app
from ragstream.tune_cli import tune

if TYPE_CHECKING:
    from ragstream.core.answers import Answer, QueryFilters, Retrieval

EPILOG = (
    "Exit codes: 0 ok, 1 server-side failure, 2 usage, 3 mass-delete guard held, "
    "4 refused, 5 data dir busy, 6 no index yet, 7 model unavailable, 8 server unreachable, "
    "9 bad API key, 10 invalid setting, 11 server not ready, 12 verify found drift. "
    "--debug (or RAGSTREAM_DEBUG=1) shows the traceback. Settings come from RAGSTREAM_* "
    "variables over ragstream.toml: "
    "`ragstream config` prints each effective value and where it came from, "
    "`ragstream config --env` lists every variable."
)
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, epilog=EPILOG)
app.add_typer(reindex_app, name="reindex", help="blue/green reindex on an embedder upgrade")
app.command()(verify)
app.command()(files)
app.command()(file)
app.command()(tune)
err = Console(stderr=True)
out = Console()


@app.callback()
def _options(
    debug: Annotated[
        bool, typer.Option("--debug", help="on an error, show the traceback (any position)")
    ] = False,
) -> None:
    """(`main` acts on --debug before the command line is parsed.)"""


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
            on_serving=lambda url: err.print(f"serving queries at {url} (web console: {url}/)"),
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
    from ragstream.client import Client, recorded_endpoint
    from ragstream.core.settings import load_settings

    url = recorded_endpoint(load_settings(data_dir))
    if url is not None:  # a running `serve` / `watch --serve` holds the stores: ask it
        with Client(url=url) as client:
            report = client.status()
    else:
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
    if report.drift is not None:
        drifted = {k: n for k, n in report.drift.items() if n}
        shown = ", ".join(f"{k} {n}" for k, n in drifted.items()) or "none"
        table.add_row("drift (last verify)", shown)
    out.print(table)
    for w in report.warnings:
        out.print(f"  [yellow]warning:[/] {escape(w)}")
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


@app.command()
def query(
    question: Annotated[str, typer.Argument(help="the question")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
    k: Annotated[int, typer.Option("--k", help="chunks after rerank")] = 8,
    no_generate: Annotated[
        bool,
        typer.Option("--no-generate", help="ranked candidates only (path, chunk id, text, ranks)"),
    ] = False,
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="KEY=VALUE, repeatable: path=SOURCE:DIR/ (doc id prefix), type=md, doc=DOC_ID",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(envvar="RAGSTREAM_URL", help="a running `serve` / `watch --serve`"),
    ] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RAGSTREAM_API_KEY")] = None,
) -> None:
    """Answer a question from the index, with verified citations (or a refusal)."""
    from ragstream.client import Client

    flt = parse_filters(filters or [])
    with Client(data_dir, url=url, api_key=api_key) as client:
        if no_generate:
            found = client.retrieve(question, k=k, filters=flt)
            print(found.model_dump_json()) if as_json else _print_retrieval(found)
            return
        answer = client.query(question, k=k, filters=flt)
    print(answer.model_dump_json()) if as_json else _print_answer(answer)


def _timings_line(timings: dict[str, float]) -> str:
    parts = [f"{name.removeprefix('retrieve.')} {ms:.0f}" for name, ms in timings.items()]
    return "timings (ms): " + " · ".join(parts) if parts else ""


def _print_answer(answer: Answer) -> None:
    if answer.refusal is not None:
        r = answer.refusal
        best = f", best score {r.best_score:.2f}" if r.best_score is not None else ""
        out.print(f"[yellow]no answer[/] ({r.reason}{best}): {escape(r.detail)}")
    else:
        out.print(escape(answer.text))
    if answer.citations:
        out.print("\nsources:")
    for n, c in enumerate(answer.citations, 1):
        where = " › ".join(c.section_path) or "-"
        page = f" p.{c.page}" if c.page else ""
        out.print(
            f"  {n}. [{c.cid}] {escape(c.path)}{page} ({escape(where)}) "
            f"chars {c.char_start}-{c.char_end}"
        )
    answered = f" · answered {answer.answered:.2f}" if answer.answered is not None else ""
    out.print(
        f"[dim]grounding {answer.grounding:.0%}{answered} · embedder {answer.embedder} · "
        f"reranker {answer.reranker} · generator {answer.generator} · trace {answer.trace_id}[/]"
    )
    out.print(f"[dim]{_timings_line(answer.timings_ms)}[/]")


def _print_retrieval(found: Retrieval) -> None:
    for r in found.results:
        legs = " ".join(
            f"{leg} #{rank} ({found_score:.3f})"
            for leg, rank in sorted(r.ranks.items())
            for found_score in [r.scores.get(leg, 0.0)]
        )
        rerank = f" rerank {r.rerank_score:.3f}" if r.rerank_score is not None else ""
        out.print(
            f"{r.rank}. [bold]{escape(r.path)}[/] [dim]{r.point_id}[/]\n"
            f"   score {r.score:.4f}{rerank} · {legs or '-'}"
        )
        text = " ".join(r.text.split())
        out.print(f"   {escape(text[:300])}{'…' if len(text) > 300 else ''}")
    if found.refusal is not None:
        out.print(f"[yellow]the gate would refuse:[/] {escape(found.refusal.detail)}")
    out.print(f"[dim]{_timings_line(found.timings_ms)} · trace {found.trace_id}[/]")


@app.command()
def serve(
    data_dir: DataDir = None,
    host: Annotated[str | None, typer.Option(help="bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8765; 0 = any free)")] = None,
) -> None:
    """Serve the HTTP API (/v1/query, /v1/retrieve, /docs, ...) from this data dir."""
    import threading

    from ragstream import api
    from ragstream.server import Serving

    settings = api.load_settings(data_dir)
    bind_host = host or settings.server_host
    bind_port = settings.server_port if port is None else port
    state = Serving(settings)

    def announce(url: str) -> None:
        err.print(
            f"serving {settings.data_dir} at {url} (web console: {url}/, API docs: {url}/docs; "
            "Ctrl-C to stop)"
        )
        print(json.dumps({"url": url}), flush=True)

    with (
        api.serving(state, bind_host, bind_port, on_serving=announce),
        api.open_engine(settings) as (engine, maintainer),  # /v1/ready turns true after this
    ):
        state.maintainer, state.engine = maintainer, engine
        err.print("ready")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            err.print("stopped")


@app.command(name="eval")
def eval_(
    dataset_dir: Annotated[
        Path,
        typer.Argument(
            help="a BEIR-format dataset folder, or a SQuAD 2.0-format JSON file (or the folder "
            "holding it and its split.json)"
        ),
    ],
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="data dir the corpus is indexed into (reused)")
    ],
    split: Annotated[
        str,
        typer.Option(help="BEIR: qrels/<split>.tsv; SQuAD: the split.json entry (articles)"),
    ] = "test",
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
            "on the answers. A SQuAD-format set takes answers (every question: answered / "
            "refused per kind and check, gold answer in the answer and its first sentence, "
            "gold paragraph cited, each signal's AUC and refusal curve) or abstain (the "
            "unanswerable questions only)"
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
    rows: Annotated[
        str,
        typer.Option(
            help="answers mode: which rows: assembly (order, parent expansion), "
            "answerability (one row per answerability signal), or all"
        ),
    ] = "all",
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="retrieval mode: also write the figures as PNG files into this folder "
            "(ndcg.png: nDCG@10 per configuration; latency.png: each stage's latency)",
        ),
    ] = None,
) -> None:
    """Index a BEIR or SQuAD 2.0-format dataset through the real ingest, then evaluate it.

    retrieval (default): the ablation table and the "which stage broke?" failure counts,
    saved to DATA_DIR/eval/SPLIT.json; gold / abstain / answers: answer-level checks, saved to
    DATA_DIR/eval/SPLIT.MODE.json. Per-query details go to DATA_DIR/eval/SPLIT.MODE.details.json.
    Reruns embed nothing.
    """
    from ragstream.eval.answer_ablation import ROW_SETS
    from ragstream.eval.evaluation import (
        DEFAULT_DEPTH,
        DEFAULT_K,
        MODES,
        evaluate_dataset,
        markdown_report,
    )

    if mode not in MODES:
        raise typer.BadParameter(f"expected one of {', '.join(MODES)}", param_hint="--mode")
    if rows not in ROW_SETS:
        raise typer.BadParameter(f"expected one of {', '.join(ROW_SETS)}", param_hint="--rows")
    if plot is not None and mode != "retrieval":
        raise typer.BadParameter("plots are drawn from --mode retrieval", param_hint="--plot")
    from ragstream.eval.squad import squad_file

    if squad_file(dataset_dir) is not None and mode not in ("answers", "abstain"):
        raise typer.BadParameter(
            "a SQuAD-format set is evaluated with --mode answers or --mode abstain",
            param_hint="--mode",
        )
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
        row_set=rows,
    )
    written = []
    if plot is not None:
        from ragstream.eval.plots import write_plots

        written = write_plots(report, plot)
    if as_json:
        print(report.to_json())
        return
    out.print(f"{report.dataset} {split}: {report.queries} queries, depth {report.depth}/leg\n")
    print(markdown_report(report))
    for path in written:
        err.print(f"wrote {path}")


@app.command()
def config(
    as_json: AsJson = False,
    env: Annotated[bool, typer.Option("--env", help="list every RAGSTREAM_* variable")] = False,
    data_dir: DataDir = None,
) -> None:
    """The effective settings and where each value came from (env, file, default)."""
    from ragstream import api
    from ragstream.core.settings import env_var_help, settings_report

    if env:
        print(env_var_help())
        return
    rows = settings_report(api.load_settings(data_dir))
    if as_json:
        print(json.dumps([{"name": n, "value": v, "source": src} for n, v, src in rows]))
        return
    table = Table("setting", "value", "from")
    for name, value, source in rows:
        table.add_row(name, escape(value), source)
    out.print(table)


def main(argv: list[str] | None = None) -> None:
    """The console script: user errors are one line on stderr and a documented exit code;
    `--debug` (anywhere) or RAGSTREAM_DEBUG=1 shows the traceback instead."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("RAGSTREAM_DEBUG", "") in ("1", "true")
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="ragstream")
    except RagstreamError as exc:
        if debug:
            traceback.print_exc()
        print(f"ragstream: error: {_one_line(exc)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"ragstream: internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(run again with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    main()
