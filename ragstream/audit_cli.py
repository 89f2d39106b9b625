"""`ragstream verify` and `ragstream files`: prove the index equals its folders.

Both read the folders last synced into the data dir unless PATHs are given. While a `serve`
or `watch --serve` holds the data dir they ask it (`GET /v1/verify`, `GET /v1/files`);
`--repair` needs the data dir itself (it runs a sync pass), so it asks the holder to stop.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ragstream.cli_options import AllowMass, AsJson, DataDir
from ragstream.core.errors import EXIT_DRIFT, DataDirBusyError
from ragstream.core.models import FILE_STATES, FileRecord, VerifyReport

out = Console()
AuditPaths = Annotated[
    list[Path] | None,
    typer.Argument(help="folders to audit (default: the ones last synced into the data dir)"),
]


def verify(
    paths: AuditPaths = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    repair: Annotated[
        bool, typer.Option("--repair", help="re-queue the drifted documents, then verify again")
    ] = False,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="audit N random documents only")
    ] = None,
    allow_mass_delete: AllowMass = False,
) -> None:
    """Audit disk ↔ vectors ↔ BM25: stale, orphan, missing, leg_mismatch, foreign_embedder,
    duplicate, retry_due. Exit 0 when there is no drift, 12 when there is."""
    from ragstream import audit
    from ragstream.client import Client, recorded_endpoint
    from ragstream.core.settings import load_settings

    url = recorded_endpoint(load_settings(data_dir))
    if url is not None:
        if repair:
            raise DataDirBusyError(
                f"the data dir is held by the process serving {url}; stop it, then run "
                "`ragstream verify --repair` (or restart it: its catch-up scan repairs stale, "
                "orphan and missing documents)"
            )
        with Client(url=url) as client:
            report = client.verify(sample=sample)
    else:
        report = audit.verify(
            paths or (),
            data_dir=data_dir,
            sample=sample,
            repair=repair,
            allow_mass_delete=allow_mass_delete,
        )
    if as_json:
        print(report.model_dump_json())
    else:
        if report.repaired is not None:
            _print_report(report.repaired, "before repair")
        _print_report(report, "after repair" if report.repaired is not None else "verify")
    if not report.ok:
        raise typer.Exit(EXIT_DRIFT)


def _print_report(report: VerifyReport, title: str) -> None:
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


def files(
    paths: AuditPaths = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help=f"only files in this state: {'|'.join(FILE_STATES)}"),
    ] = None,
) -> None:
    """The per-file ledger: state, chunks, embedder, file version, indexed-at, reason."""
    import json

    from ragstream import audit
    from ragstream.client import Client, recorded_endpoint
    from ragstream.core.settings import load_settings

    url = recorded_endpoint(load_settings(data_dir))
    if url is not None:
        with Client(url=url) as client:
            records = client.files(state=state)
    else:
        records = audit.files(paths or (), data_dir=data_dir, states=state)
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records]))
        return
    _print_files(records)


def file(
    doc_id: Annotated[str, typer.Argument(help="a document id as `files` lists it")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """One file: its ledger record and live chunks in order, with content hashes and whether
    each vector was embedded, reused or kept at the file's last change."""
    from ragstream import audit
    from ragstream.client import Client, recorded_endpoint
    from ragstream.core.settings import load_settings

    url = recorded_endpoint(load_settings(data_dir))
    if url is not None:
        with Client(url=url) as client:
            detail = client.file(doc_id)
    else:
        detail = audit.file(doc_id, data_dir=data_dir)
    if as_json:
        print(detail.model_dump_json())
        return
    _print_files([detail.record])
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


def _print_files(records: list[FileRecord]) -> None:
    table = Table("state", "file", "chunks", "embedder", "indexed at", "reason")
    for r in records:
        at = r.indexed_at
        table.add_row(
            r.state,
            escape(r.doc_id),
            str(r.chunks),
            r.embedder,
            dt.datetime.fromtimestamp(at).isoformat(timespec="seconds") if at else "-",
            escape(r.reason),
        )
    out.print(table)
    counts = {s: sum(r.state == s for r in records) for s in FILE_STATES}
    out.print(", ".join(f"{s} {n}" for s, n in counts.items() if n) or "no files")
