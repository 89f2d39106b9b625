"""The index audit (`verify`) and the per-file ledger (`files`, `file`), over stores a
process already holds or opened for the occasion; no model is loaded, an audit only reads.

    verify_stores(settings, vectors, lexical)     a served or local index that already
    files_of_stores(settings, vectors, lexical)   holds the stores
    verify(data_dir=..., repair=True)             opens them; repair runs a sync pass

Repair goes through the normal sync path: a `sync` pass whose catch-up scan also re-reads the
drifted documents whose fingerprints match (`run_sync(force=...)`), so the same write order,
dead-letter handling and mass-delete guard apply, then the audit runs again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ragstream.connectors.audit import audit, inventory, ledger
from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.state import SourcesBook, VerifyBook
from ragstream.core.errors import InvalidRequestError, NotFoundError
from ragstream.core.models import FILE_STATES, ChunkRecord, FileDetail, FileRecord, VerifyReport
from ragstream.core.settings import Settings, load_settings
from ragstream.core.telemetry import record_drift, span
from ragstream.flows.runtime import parser_keys_of
from ragstream.service.periodic import every

if TYPE_CHECKING:
    from ragstream.flows.runtime import Runtime

T = TypeVar("T")


def audited(settings: Settings, paths: Sequence[str | Path] = ()) -> Settings:
    """The settings whose sources are audited: PATH arguments, else the configured sources,
    else the folders the data dir was last synced from."""
    if paths:
        return settings.with_paths([str(p) for p in paths])
    if settings.sources:
        return settings
    return settings.model_copy(update={"sources": SourcesBook(settings.state_dir).load()})


def verify_stores(
    settings: Settings,
    vectors: VectorStore,
    lexical: LexicalIndex,
    sample: int | None = None,
    seed: int | None = None,
    pause: Callable[[], None] = lambda: None,
) -> VerifyReport:
    """Audit open stores; the report is kept for `status` and exported as metrics. `pause`
    runs between the pages it reads (`inventory`)."""
    with span("verify", sample=sample or 0) as sp:
        inv = inventory(settings, vectors, lexical, sample, seed, pause)
        report, _ = audit(inv, vectors.embedder.slug, parser=parser_keys_of(settings))
        for kind, count in report.counts().items():
            sp.set_attribute(f"drift.{kind}", count)
    VerifyBook(settings.state_dir).save(report)
    record_drift(report.counts())
    return report


def files_of_stores(
    settings: Settings,
    vectors: VectorStore,
    lexical: LexicalIndex,
    states: Iterable[str] | None = None,
    tenants: tuple[str, ...] | None = None,
    readers: tuple[str, ...] | None = None,
) -> list[FileRecord]:
    """The per-file ledger; with `tenants` (an API key's) only those tenants' sources, and
    with `readers` (`Settings.readers_of` a principal) only the files of a source that
    mirrors permissions which the principal may read (indexed, and stamped so)."""
    chosen = list(states or ())
    unknown = sorted(set(chosen) - set(FILE_STATES))
    if unknown:
        raise InvalidRequestError(f"unknown state(s) {unknown}; one of {list(FILE_STATES)}")
    own = settings.sources_of(tenants)
    if own is not None:
        mine = [s for s in settings.sources if s.name in own]
        settings = settings.model_copy(update={"sources": mine})
    inv = inventory(settings, vectors, lexical)
    _, drift = audit(inv, vectors.embedder.slug, parser=parser_keys_of(settings))
    records = ledger(inv, drift, chosen or None)
    if readers is not None:
        mirrored = settings.mirrored()
        readable = vectors.readable_docs(readers)
        records = [r for r in records if r.source not in mirrored or r.doc_id in readable]
    return records if own is None else [r for r in records if r.source in own]


def file_detail(
    settings: Settings,
    vectors: VectorStore,
    lexical: LexicalIndex,
    doc_id: str,
    tenants: tuple[str, ...] | None = None,
    readers: tuple[str, ...] | None = None,
) -> FileDetail:
    """One file's ledger record and its live chunks in reading order, each with its hash,
    how its vector came to be at the file's last change, and whether BM25 holds it too."""
    record = next(
        (
            r
            for r in files_of_stores(settings, vectors, lexical, None, tenants, readers)
            if r.doc_id == doc_id
        ),
        None,
    )
    if record is None:
        raise NotFoundError(f"no file {doc_id!r} in the ledger; `ragstream files` lists them")
    in_bm25 = lexical.live_ids(doc_id)
    chunks = [
        ChunkRecord(
            point_id=c.point_id,
            ordinal=c.ordinal,
            content_hash=c.content_hash,
            section_path=c.section_path,
            page=c.page,
            char_start=c.char_start,
            char_end=c.char_end,
            text=c.text,
            vector_origin=c.vector_origin,
            in_bm25=c.point_id in in_bm25,
            indexed_at=c.indexed_at,
            origin=c.origin,
            ocr_confidence=c.ocr_confidence,
            readers=c.readers,
            readers_reason=c.readers_reason,
        )
        for c in sorted(vectors.live_chunks(doc_id), key=lambda c: (c.ordinal, c.point_id))
    ]
    return FileDetail(record=record, chunks=chunks)


def _over_stores(settings: Settings, fn: Callable[[VectorStore, LexicalIndex], T]) -> T:
    from ragstream.service.stores import open_stores

    with open_stores(settings) as (vectors, lexical):
        return fn(vectors, lexical)


def verify(
    paths: Sequence[str | Path] = (),
    *,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
    sample: int | None = None,
    repair: bool = False,
    allow_mass_delete: bool = False,
) -> VerifyReport:
    """Audit the index against its folders; with `repair`, re-queue the drifted documents
    through a sync pass and audit again (the returned report is the one after, with
    `repaired` holding the one before)."""
    s = audited(settings or load_settings(data_dir), paths)
    report = _over_stores(s, lambda v, lx: verify_stores(s, v, lx, sample))
    if not repair or report.ok:
        return report
    from ragstream.flows.sync import run_sync

    if not s.sources:
        raise InvalidRequestError("nothing to repair from: pass PATH or configure `sources`")
    run_sync(s, allow_mass_delete=allow_mass_delete, force=frozenset(report.drifted))
    after = _over_stores(s, lambda v, lx: verify_stores(s, v, lx, sample))
    return after.model_copy(update={"repaired": report})


def files(
    paths: Sequence[str | Path] = (),
    *,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
    states: Iterable[str] | None = None,
) -> list[FileRecord]:
    s = audited(settings or load_settings(data_dir), paths)
    return _over_stores(s, lambda v, lx: files_of_stores(s, v, lx, states))


def file(
    doc_id: str, *, settings: Settings | None = None, data_dir: str | Path | None = None
) -> FileDetail:
    s = audited(settings or load_settings(data_dir))
    return _over_stores(s, lambda v, lx: file_detail(s, v, lx, doc_id))


def scheduled_verify(rt: Runtime, settings: Settings) -> AbstractContextManager[None]:
    """`watch`'s audit: every `verify.every_s`, `verify.sample` random documents (0: all),
    between index batches (under the runtime's lock). Its counts reach `status` and the
    `ragstream.index.drift` gauge; a failing audit is logged and never stops the watch."""
    sample = settings.verify.sample or None

    def audit_once() -> None:
        with rt.lock.read():
            verify_stores(audited(settings), rt.vectors, rt.lexical, sample)

    return every(settings.verify.every_s, "verify", audit_once, join_s=60)
