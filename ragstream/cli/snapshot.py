"""`ragstream snapshot ...`: one file that holds a data dir whole, checked and restored;
`ragstream migrate`: a data dir taken to this ragstream's storage format; `ragstream
export` / `import`: an index as open records, moved without re-embedding.

`create` and `list` ask the index where `connect` finds it: while `watch --serve` or `serve`
holds the data dir, that process writes the snapshot (and keeps answering). `verify` and
`restore` read a file and need no running index.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from ragstream.cli.options import ApiKey, AsJson, DataDir, Url
from ragstream.cli.render import emit_json, err
from ragstream.core.snapshot import LegCounts, SnapshotInfo, SnapshotManifest

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
SnapshotFile = Annotated[Path, typer.Argument(help="a snapshot file (`snapshot list` shows them)")]


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _counted(counts: LegCounts | None, storage_format: int) -> str:
    if counts is None:
        return f"format {storage_format}, not counted (taken before a migration)"
    return f"{counts.chunks_live} chunks, {counts.lexical_live} in BM25"


def _line(info: SnapshotInfo) -> str:
    return (
        f"{info.id}  {_when(info.created_at)}  {info.size / 1e6:.1f} MB  {info.embedder}  "
        f"{_counted(info.counts, info.storage_format)}  {info.path}"
    )


@app.command()
def create(
    out: Annotated[Path | None, typer.Option(help="also copy the snapshot to this file")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Snapshot the data dir into its snapshots/ folder (a served one keeps answering)."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index:
        info = index.snapshot()
    if out is not None:
        if out.exists():
            raise typer.BadParameter(f"{out} exists", param_hint="--out")
        shutil.copyfile(info.path, out)
    emit_json(info) if as_json else print(_line(info))


@app.command(name="list")
def list_(
    data_dir: DataDir = None, as_json: AsJson = False, url: Url = None, api_key: ApiKey = None
) -> None:
    """The data dir's snapshots, newest first."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index:
        found = index.snapshots()
    if as_json:
        emit_json([i.model_dump(mode="json") for i in found])
        return
    for info in found:
        print(_line(info))
    if not found:
        err.print("no snapshots yet: `ragstream snapshot create`")


def _show(manifest: SnapshotManifest, what: str, as_json: bool) -> None:
    if as_json:
        emit_json(manifest)
        return
    c = manifest.counts
    counted = (
        f"{c.chunks_live} chunks live ({c.chunks_deleted} deleted), {c.lexical_live} in BM25"
        if c is not None
        else _counted(c, manifest.storage_format)
    )
    print(
        f"{what}: snapshot {manifest.id} of {_when(manifest.created_at)}, "
        f"{len(manifest.members)} members, {counted}, embedder {manifest.embedder}"
    )


@app.command()
def verify(file: SnapshotFile, data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Check a snapshot whole: every member's checksum, and the counts of both legs read
    back from its stores. Nothing is restored; exit 2 names the first fault."""
    from ragstream.core.settings import load_settings
    from ragstream.service import snapshots

    _show(snapshots.verify(load_settings(data_dir), file), "whole", as_json)


@app.command()
def restore(
    file: SnapshotFile,
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="the data dir to restore into (empty or new)")
    ],
    force: Annotated[
        bool, typer.Option(help="replace a non-empty data dir (kept aside until it succeeds)")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Restore a snapshot into a new data dir, checked before it takes that dir's place."""
    from ragstream.core.settings import load_settings
    from ragstream.service import snapshots

    settings = load_settings(data_dir)
    _show(snapshots.restore(settings, file, data_dir, force), "restored", as_json)


def migrate(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Take the data dir to this ragstream's storage format now (opening it does the same
    unless store.migrate = "ask"); a snapshot comes first when a step rewrites data."""
    from ragstream.core.settings import load_settings
    from ragstream.service import snapshots

    steps = snapshots.migrate(load_settings(data_dir))
    if as_json:
        emit_json(steps)
        return
    for step in steps:
        print(step)
    if not steps:
        err.print("the data dir is at the current storage format: nothing to migrate")


def export(
    fmt: Annotated[
        str, typer.Option("--format", help="jsonl (one JSON object a line) or parquet")
    ] = "jsonl",
    out: Annotated[
        Path | None, typer.Option(help="the file to write (JSON lines: stdout without it)")
    ] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Every live chunk as one open record (chunk id, doc, span, text, dense vector, BM25
    sparse weights, embedder tag, file version, payload): `import` rebuilds the index from
    it without embedding, on any machine."""
    from ragstream.core.settings import load_settings
    from ragstream.service import exports

    if as_json and out is None:
        raise typer.BadParameter(
            "--json prints the report: name the export file with --out (without it the "
            "records themselves are the JSON lines on stdout)",
            param_hint="--json",
        )
    report = exports.export(load_settings(data_dir), fmt, out)
    if as_json:
        emit_json(report)
        return
    err.print(f"exported {report.records} chunks of {report.embedder} as {report.format}")


def import_(
    file: Annotated[Path, typer.Argument(help="a file `ragstream export` wrote")],
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="the new data dir to build (empty or missing)")
    ],
    as_json: AsJson = False,
) -> None:
    """Build a new data dir from an export file, embedding nothing; a `sync` of the same
    folder afterwards reads only the files changed since the export."""
    from ragstream.core.settings import load_settings
    from ragstream.service import exports

    report = exports.import_records(load_settings(data_dir), file)
    if as_json:
        emit_json(report)
        return
    print(f"imported {report.records} chunks of {report.embedder} into {data_dir}")
