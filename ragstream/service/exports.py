"""An index in an open format: `export` writes every live chunk of a data dir as a record
(its text, dense vector, BM25 sparse weights, embedder and file version, whole payload) and
`import_records` builds a new data dir from such a file without embedding anything.

Export reads the stores without a model, a page of live points at a time (their vectors by
content hash). Import writes into a staging dir beside the target and renames it into place
only once every record is written and counted, so a bad file leaves nothing behind. The BM25
leg is rebuilt from each chunk's text by the same function that wrote it, and must come out
as the record's weights: a record whose weights differ (another analyzer) is refused.

The file layer is `connectors.export_files`; the records are `core.export`."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

from ragstream.connectors.data_format import holds_an_index
from ragstream.connectors.export_files import file_format, read_records, write_records
from ragstream.connectors.fields import FieldCatalog
from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.sparse import bm25_vector
from ragstream.connectors.stores import configured_live, open_configured, open_lexical_index
from ragstream.core.errors import DataDirBusyError, InvalidRequestError
from ragstream.core.export import ExportRecord, ExportReport
from ragstream.core.models import EmbedderVersion
from ragstream.core.settings import Settings
from ragstream.flows.runtime import mark_lexical
from ragstream.query.retrieve import no_index
from ragstream.service.connect import recorded_endpoint
from ragstream.service.stores import open_live

BATCH = 256


def export(settings: Settings, fmt: str, out: Path | None) -> ExportReport:
    """Every live chunk of the data dir as `fmt` (jsonl, parquet) to `out` (JSON lines to
    stdout when None). A data dir a live `serve` / `watch --serve` holds is refused with what
    to do instead (the stores are that process's)."""
    served = recorded_endpoint(settings)
    if served is not None:
        raise DataDirBusyError(
            f"{settings.data_dir} is served at {served}, which holds its stores: stop it and "
            "export, or take a snapshot (`ragstream snapshot create`), restore it into another "
            "dir (`ragstream snapshot restore FILE --data-dir NEW`) and export that"
        )
    with open_live(settings) as live:
        if live is None:
            raise no_index(settings)
        collection, vectors, lexical = live
        sparse_leg = settings.lexical == "sparse"
        n = write_records(_records(vectors, lexical, sparse_leg), fmt, out)
        return ExportReport(
            records=n,
            format=fmt,
            path=str(out) if out else None,
            embedder=vectors.embedder.slug,
            collection=collection,
        )


def _records(
    vectors: VectorStore, lexical: LexicalIndex, sparse_leg: bool
) -> Iterator[ExportRecord]:
    for page in vectors.live_pages():
        if not sparse_leg:  # the BM25 text's neighbours live in the separate lexical index
            held = {c.point_id: c.lexical_context for c in lexical.get([c.point_id for c in page])}
            page = [
                c.model_copy(update={"lexical_context": held.get(c.point_id, "")}) for c in page
            ]
        dense = vectors.vectors_for_hashes(c.content_hash for c in page)
        for chunk in page:
            if chunk.content_hash not in dense:
                raise RuntimeError(f"no vector for {chunk.point_id} ({chunk.content_hash})")
            yield ExportRecord.of(
                chunk, dense[chunk.content_hash], bm25_vector(chunk), vectors.embedder
            )


def import_records(settings: Settings, file: Path) -> ExportReport:
    """A new data dir (`settings.data_dir`, missing or empty) holding the records of `file`
    as its live index; refused for a data dir that already holds one."""
    target = settings.data_dir
    on_server = settings.store.qdrant_url is not None  # the vectors are not in the dir
    if holds_an_index(target) or (on_server and configured_live(settings) is not None):
        raise InvalidRequestError(f"{target} already holds an index: import into a new data dir")
    if target.exists() and any(target.iterdir()):
        raise InvalidRequestError(f"{target} is not empty: import into a new data dir")
    staging = target.parent / f".{target.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        report = _write(settings.model_copy(update={"data_dir": staging}), file)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if target.exists():
        target.rmdir()
    staging.rename(target)
    return report


def _write(settings: Settings, file: Path) -> ExportReport:
    records = read_records(file)
    first = next(records, None)
    if first is None:
        raise InvalidRequestError(f"{file} holds no records")
    embedder = first.embedder_version
    kind = mark_lexical(settings)
    vectors = open_configured(settings, embedder)
    try:
        opened = open_lexical_index(kind, settings.lexical_dir, lambda: vectors)
        with closing(opened) as lexical:
            ids: set[str] = set()
            fields = FieldCatalog(settings.state_dir)  # the imported fields' types
            batch = [first]
            for record in records:
                batch.append(record)
                if len(batch) >= BATCH:
                    _upsert(batch, embedder, vectors, lexical, ids, fields)
                    batch = []
            _upsert(batch, embedder, vectors, lexical, ids, fields)
            vectors.flush()
            lexical.commit()
            held = vectors.count("live")
        if held != len(ids):
            raise InvalidRequestError(f"{file}: {len(ids)} chunks read, {held} written")
    finally:
        vectors.close()
    return ExportReport(
        records=len(ids),
        format=file_format(file),
        path=str(file),
        embedder=embedder.slug,
        collection=vectors.collection,
    )


def _upsert(
    batch: list[ExportRecord],
    embedder: EmbedderVersion,
    vectors: VectorStore,
    lexical: LexicalIndex,
    ids: set[str],
    fields: FieldCatalog,
) -> None:
    chunks = []
    for record in batch:
        if record.embedder_version != embedder:
            raise InvalidRequestError(
                f"chunk {record.chunk_id}: embedder {record.embedder}, but the file began with "
                f"{embedder.slug}: one export holds one embedder's vectors"
            )
        chunk = record.chunk()
        if not _same_weights(bm25_vector(chunk), record):
            raise InvalidRequestError(
                f"chunk {record.chunk_id}: its sparse weights are not this ragstream's BM25 of "
                "its text (another analyzer?): the BM25 leg would not be the exported one"
            )
        chunks.append(chunk)
        ids.add(record.chunk_id)
    if chunks:
        fields.learn(chunks)
        vectors.index_fields(fields.types())
        vectors.upsert(chunks, [r.dense for r in batch])
        lexical.upsert(chunks)


def _same_weights(computed: tuple[list[int], list[float]], record: ExportRecord) -> bool:
    indices, values = computed
    if indices != record.sparse.indices:
        return False
    return all(
        math.isclose(a, b, rel_tol=1e-5) for a, b in zip(values, record.sparse.values, strict=True)
    )
