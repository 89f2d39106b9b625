"""Proving the index equals its folders: `verify`, `files`, `file`; and what its documents
carry: `fields`, the catalogue of metadata fields a `--where` filter may name.

Each reads the folders last synced into the data dir unless PATHs are given. While a `serve`
or `watch --serve` holds the data dir they ask it (`GET /v1/verify`, `GET /v1/files`,
`GET /v1/fields`); `--repair` and PATHs need the data dir itself (a repair runs a sync
pass), so they ask the holder to stop.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ragstream.cli.options import (
    AllowMass,
    ApiKey,
    AsJson,
    AsUser,
    DataDir,
    Url,
    principal_option,
)
from ragstream.cli.render import emit_json, print_fields, print_file, print_files, print_verify
from ragstream.core.errors import EXIT_DRIFT
from ragstream.core.models import FILE_STATES

AuditPaths = Annotated[
    list[str] | None,
    typer.Argument(help="sources to audit (default: the ones last synced into the data dir)"),
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
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Audit disk ↔ vectors ↔ BM25: stale, orphan, missing, leg_mismatch, foreign_embedder,
    duplicate, retry_due. Exit 0 when there is no drift, 12 when there is."""
    from ragstream.service.connect import connect

    with connect(data_dir, url=url, api_key=api_key) as index:
        report = index.verify(
            sample=sample, paths=paths or (), repair=repair, allow_mass_delete=allow_mass_delete
        )
    emit_json(report) if as_json else print_verify(report)
    if not report.ok:
        raise typer.Exit(EXIT_DRIFT)


def files(
    paths: AuditPaths = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help=f"only files in this state: {'|'.join(FILE_STATES)}"),
    ] = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """The per-file ledger: state, chunks, embedder, file version, indexed-at, reason."""
    from ragstream.service.connect import connect

    principal = principal_option(as_user)
    with connect(data_dir, url=url, api_key=api_key, principal=principal) as index:
        records = index.files(state=state, paths=paths or ())
    emit_json(records) if as_json else print_files(records)


def fields(
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """The metadata fields the documents carry (what `--where` may name): each field's
    type, how many documents carry it, example values and where it was read."""
    from ragstream.service.connect import connect

    principal = principal_option(as_user)
    with connect(data_dir, url=url, api_key=api_key, principal=principal) as index:
        catalogue = index.fields()
    emit_json(catalogue) if as_json else print_fields(catalogue)


def file(
    doc_id: Annotated[str, typer.Argument(help="a document id as `files` lists it")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """One file: its ledger record and live chunks in order, with content hashes and whether
    each vector was embedded, reused or kept at the file's last change."""
    from ragstream.service.connect import connect

    principal = principal_option(as_user)
    with connect(data_dir, url=url, api_key=api_key, principal=principal) as index:
        detail = index.file(doc_id)
    emit_json(detail) if as_json else print_file(detail)
