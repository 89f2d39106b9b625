"""How the CLI shows results to a person (rich tables and lines) and to a program (`--json`:
exactly one JSON document on stdout); progress and notices go to stderr."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ragstream.core.models import (
    FILE_STATES,
    DocOutcome,
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexProgress,
    ReindexStatus,
    StatusReport,
    SyncReport,
    VerifyReport,
)

if TYPE_CHECKING:
    from ragstream.core.answers import Answer, Retrieval

out = Console()
err = Console(stderr=True)


def emit_json(value: BaseModel | list[Any] | dict[str, Any]) -> None:
    """One JSON document on stdout."""
    if isinstance(value, BaseModel):
        print(value.model_dump_json())
    else:
        print(json.dumps(value, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def at(seconds: float | None) -> str:
    return dt.datetime.fromtimestamp(seconds).isoformat(timespec="seconds") if seconds else "-"


# ---- sync --------------------------------------------------------------------------------
def progress_line(outcome: DocOutcome) -> None:
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


def print_sync(report: SyncReport) -> None:
    table = Table(title="sync", show_header=False)
    for key, value in report.model_dump(exclude={"dead_letters", "guard", "pending"}).items():
        table.add_row(key, str(value))
    table.add_row("dead_letters", str(len(report.dead_letters)))
    out.print(table)


# ---- status ------------------------------------------------------------------------------
def print_status(report: StatusReport) -> None:
    table = Table(title="ragstream status", show_header=False)
    table.add_row("docs", str(report.docs))
    table.add_row("chunks live / deleted", f"{report.chunks_live} / {report.chunks_deleted}")
    table.add_row("lexical live", str(report.lexical_live))
    emb = report.embedder
    table.add_row("embedder", f"{emb.name} ({emb.dimension}d, {emb.fingerprint})" if emb else "-")
    table.add_row("collection", report.collection or "-")
    table.add_row("reranker", report.reranker)
    if (ep := report.embedding_endpoint) is not None:
        cost = f"{ep.requests} requests, {ep.tokens_sent} tokens"
        table.add_row("embedding endpoint", f"{ep.state}: {ep.model} at {ep.base_url} ({cost})")
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


# ---- answers -----------------------------------------------------------------------------
def timings_line(timings: dict[str, float]) -> str:
    parts = [f"{name.removeprefix('retrieve.')} {ms:.0f}" for name, ms in timings.items()]
    return "timings (ms): " + " · ".join(parts) if parts else ""


def print_answer(answer: Answer) -> None:
    if answer.refusal is not None:
        r = answer.refusal
        best = f", best score {r.best_score:.2f}" if r.best_score is not None else ""
        out.print(f"[yellow]no answer[/] ({r.reason}{best}): {escape(r.detail)}")
    else:
        out.print(escape(answer.text))
    if (line := effective_line(answer)) is not None:
        out.print(f"[dim]{escape(line)}[/]")
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
    verdict = answer.answerability
    if verdict is not None:  # which path decided, in which language (`core.language`)
        answered += f" · read as {verdict.language} ({verdict.decided_by})"
    out.print(
        f"[dim]grounding {answer.grounding:.0%}{answered} · embedder {answer.embedder} · "
        f"reranker {answer.reranker} · generator {answer.generator} · trace {answer.trace_id}[/]"
    )
    out.print(f"[dim]{timings_line(answer.timings_ms)}[/]")


def effective_line(answer: Answer) -> str | None:
    """A conversation's answer: what retrieval ran where it differs from the question as
    asked (the leg named when only one differs), and how many of the oldest messages were
    left out; None when there is nothing to say."""
    eq, conv, parts = answer.effective_query, answer.conversation, []
    if eq is not None:
        legs = {"BM25": eq.sparse, "dense": eq.dense}
        changed = {leg: text for leg, text in legs.items() if text != answer.query}
        if len(changed) == 2 and eq.sparse == eq.dense:
            parts.append(f"effective query: {eq.dense}")
        else:
            parts += [f"effective query ({leg}): {text}" for leg, text in changed.items()]
    if conv is not None and conv.dropped_messages:
        parts.append(f"{conv.dropped_messages} oldest messages left out")
    return " · ".join(parts) or None


def print_retrieval(found: Retrieval) -> None:
    for r in found.results:
        legs = " ".join(
            f"{leg} #{rank} ({r.scores.get(leg, 0.0):.3f})" for leg, rank in sorted(r.ranks.items())
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
    out.print(f"[dim]{timings_line(found.timings_ms)} · trace {found.trace_id}[/]")


def print_log(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        when = at(e["time"])
        outcome = f"refused: {e['refusal']}" if e["refusal"] else f"grounding {e['grounding']:.0%}"
        out.print(
            f"{when} [{e['trace_id'][:8]}] {e['query']!r} → {len(e['retrieved'])} "
            f"chunks, {len(e['cited'])} cited, {outcome}"
        )


# ---- audit -------------------------------------------------------------------------------
def print_verify(report: VerifyReport) -> None:
    if report.repaired is not None:
        _print_drift(report.repaired, "before repair")
    _print_drift(report, "after repair" if report.repaired is not None else "verify")


def _print_drift(report: VerifyReport, title: str) -> None:
    scope = "sampled" if report.sampled else "all"
    table = Table(
        "drift",
        "docs",
        "examples",
        title=f"{title}: {report.docs_checked} docs ({scope}), {report.chunks_checked} chunks, "
        f"{report.files_on_disk} files on disk",
    )
    for kind, found in report.drift.items():
        shown = "\n".join(f"{e.doc_id}: {e.detail}" for e in found.examples)
        table.add_row(kind, str(found.count), escape(shown))
    out.print(table)
    out.print("[green]no drift[/]" if report.ok else f"[red]{len(report.drifted)} drifted docs[/]")


def print_files(records: list[FileRecord]) -> None:
    table = Table("state", "file", "chunks", "pages", "embedder", "indexed at", "reason")
    for r in records:
        pages = "-" if r.pages is None else str(r.pages)
        pages += f" ({r.ocr_pages} OCR)" if r.ocr_pages else ""
        table.add_row(
            r.state,
            escape(r.doc_id),
            str(r.chunks),
            pages,
            r.embedder,
            at(r.indexed_at),
            escape(r.reason),
        )
    out.print(table)
    counts = {s: sum(r.state == s for r in records) for s in FILE_STATES}
    out.print(", ".join(f"{s} {n}" for s, n in counts.items() if n) or "no files")


def print_file(detail: FileDetail) -> None:
    print_files([detail.record])
    table = Table("#", "hash", "vector", "bm25", "section", "chars", "text")
    for c in detail.chunks:
        table.add_row(
            str(c.ordinal),
            c.content_hash[:12],
            c.vector_origin or "-",
            "yes" if c.in_bm25 else "[red]no[/]",
            escape(" > ".join(c.section_path)),
            f"{c.char_start}-{c.char_end}",
            escape(" ".join(c.text.split())[:60]),
        )
    out.print(table)


def print_fields(catalogue: list[FieldInfo]) -> None:
    table = Table("name", "type", "docs", "examples", "origins")
    for f in catalogue:
        origins = ", ".join(f"{o or '-'} {n}" for o, n in sorted(f.origins.items()))
        table.add_row(escape(f.name), f.type, str(f.docs), escape(", ".join(f.examples)), origins)
    out.print(table)
    out.print(f"{len(catalogue)} fields" if catalogue else "no metadata fields")


# ---- reindex -----------------------------------------------------------------------------
def print_reindex(status: ReindexStatus) -> None:
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


BAR_COLUMNS = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"))


@contextmanager
def backfill_bar(enabled: bool) -> Iterator[Callable[[ReindexProgress], None] | None]:
    """A progress bar of a backfill on stderr, or None when disabled (`--json`)."""
    if not enabled:
        yield None
        return
    columns = (TextColumn("backfill"), *BAR_COLUMNS, TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("backfill", total=None)

        def update(p: ReindexProgress) -> None:
            bar.update(task, total=p.total or None, completed=p.done)

        yield update


# ---- settings ----------------------------------------------------------------------------
def print_settings(rows: Sequence[tuple[str, str, str]]) -> None:
    table = Table("setting", "value", "from")
    for name, value, source in rows:
        table.add_row(name, escape(value), source)
    out.print(table)
