"""The index audit: compare every source with both stores, per document.

`ragstream verify` and the per-file ledger (`ragstream files`) read the same inventory: what
each source lists (a folder: a stat per file, whose bytes are hashed only when size or mtime
moved, to tell a touched file from a changed one; a git tree: blob ids, no blob read), the
live points of the vector store, the live point ids of the lexical index, and the
dead-letter and redaction books. Nothing is parsed and no model is loaded. Classification is a
pure function of one document's view (`classify`), so each drift class is tested on its own
and the full and the sampled audit cannot disagree.

Why a "duplicate" is a point whose id is not derived: a point id is a function of (doc,
content hash, occurrence) (core.ids.point_id), so a doc holding a hash n times owns exactly
the ids of occurrences 0..n-1. Any other live point with that hash is a copy nobody wrote
through the sync path.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import xxhash

from ragstream.connectors.protocols import (
    LexicalIndex,
    ParserKeys,
    Source,
    SourceReadError,
    VectorStore,
    parsed_elsewise,
)
from ragstream.connectors.sources import path_filter_of, sources_of
from ragstream.connectors.state import DeadLetterBook, RedactionBook
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import point_id, source_of
from ragstream.core.models import (
    DRIFT_KINDS,
    DeadLetter,
    DriftClass,
    DriftExample,
    DriftKind,
    FileEvent,
    FileFingerprint,
    FileRecord,
    FileState,
    IndexedChunk,
    Redaction,
    VerifyReport,
)
from ragstream.core.settings import Settings

EXAMPLES = 5  # per drift class in a report


@dataclass(frozen=True)
class DiskFile:
    """One document as its source lists it now (a file on disk, a blob in a git tree)."""

    origin: Source
    path: str  # its locator
    fingerprint: FileFingerprint | None  # None: vanished between the walk and the stat
    excluded: str | None  # why the source does not index it, None when it does

    @property
    def source(self) -> str:
        return self.origin.name


@dataclass
class DocView:
    """Everything the audit knows about one document."""

    doc_id: str
    disk: DiskFile | None = None
    points: list[IndexedChunk] = field(default_factory=list)  # live, vector store
    lexical: set[str] = field(default_factory=set)  # live point ids, lexical index
    dead: DeadLetter | None = None
    redaction: Redaction | None = None


# --- pure classification ----------------------------------------------------------------------


def duplicates(doc_id: str, points: Sequence[IndexedChunk]) -> list[str]:
    """Live point ids no sync could have written: beyond the derived ids of their hash."""
    per_hash = Counter(p.content_hash for p in points)
    derived = {point_id(doc_id, h, i) for h, n in per_hash.items() for i in range(n)}
    return sorted(p.point_id for p in points if p.point_id not in derived)


def same_version(held: set[FileFingerprint], disk: FileFingerprint, digest: str | None) -> bool:
    """Whether the index holds the file's current version: one recorded version, with its
    version token (`size:mtime`, a blob id, an ETag), or (touched) equal in bytes. `digest`
    is the disk file's, when read."""
    if len(held) != 1:
        return False  # a write interrupted between versions: the next pass re-diffs it
    (version,) = held
    if version.token == disk.token:
        return True
    return bool(version.digest) and version.digest == digest


def classify(
    view: DocView,
    live_embedder: str,
    chunker: str,
    digest: str | None,
    parser: ParserKeys | None = None,
) -> dict[DriftKind, str]:
    """The drift classes of one document, each with a one-line detail (empty: no drift).
    With `parser` (the current settings' parser keys), a file read under OCR settings that
    would read it otherwise now is stale, or a retry due if it is dead-lettered."""
    out: dict[DriftKind, str] = {}
    disk = view.disk
    present = disk is not None and disk.fingerprint is not None and disk.excluded is None
    live_ids = {p.point_id for p in view.points}
    if not present and (live_ids or view.lexical):
        why = "file excluded by the source's patterns" if disk is not None else "file gone"
        out["orphan"] = f"{why}; {len(live_ids)} chunks live"
    if present and disk is not None and disk.fingerprint is not None:
        fp = disk.fingerprint
        if view.dead is not None:
            dead, dead_fp = view.dead, view.dead.fingerprint
            if dead_fp is None or dead_fp.token != fp.token:
                out["retry_due"] = f"dead letter ({dead.reason}) but the file changed since"
            elif parsed_elsewise(dead.parser, dead.path, parser):
                out["retry_due"] = f"dead letter ({dead.reason}) read under other OCR settings"
            # else the dead letter is the record: the last good version (if any) stays live
        elif not live_ids:
            out["missing"] = "indexable file with no live chunk"
        else:
            out |= _stale(view.points, fp, digest, chunker, parser)
    elif view.dead is not None:
        out["retry_due"] = f"dead letter ({view.dead.reason}) but the file is gone"
    if live_ids != view.lexical:
        only_vec, only_lex = len(live_ids - view.lexical), len(view.lexical - live_ids)
        out["leg_mismatch"] = f"{only_vec} point(s) only in vectors, {only_lex} only in BM25"
    foreign = sorted({p.embedder for p in view.points if p.embedder != live_embedder})
    if foreign:
        out["foreign_embedder"] = f"points tagged {', '.join(foreign)} (live: {live_embedder})"
    dups = duplicates(view.doc_id, view.points)
    if dups:
        out["duplicate"] = f"{len(dups)} point(s) not derived from (doc, hash, occurrence)"
    return out


def _stale(
    points: Sequence[IndexedChunk],
    fp: FileFingerprint,
    digest: str | None,
    chunker: str,
    parser: ParserKeys | None,
) -> dict[DriftKind, str]:
    """A present file's live points that do not hold what a sync would write now: another
    version of the file, another chunker configuration, other OCR settings."""
    held = {p.fingerprint for p in points}
    if not same_version(held, fp, digest):
        return {"stale": f"source holds {_version(fp)}; index holds {_versions(held)}"}
    if chunker and {p.chunker for p in points if p.chunker} - {chunker}:
        return {"stale": "chunks cut by another chunker configuration"}
    if any(parsed_elsewise(p.parser, p.path, parser) for p in points):
        return {"stale": "file parsed under other OCR settings"}
    return {}


def needs_digest(view: DocView) -> bool:
    """Hash the bytes only when the version token moved and the index recorded a digest."""
    disk = view.disk
    if disk is None or disk.fingerprint is None or not view.points:
        return False
    fp = disk.fingerprint
    held = {p.fingerprint for p in view.points}
    return len(held) == 1 and any(h.token != fp.token and h.digest for h in held)


def file_state(view: DocView, drift: dict[DriftKind, str]) -> tuple[FileState, str]:
    """The ledger's state of one file and the reason when it is not plainly indexed."""
    disk = view.disk
    if disk is not None and disk.excluded is not None and not view.points:
        return "excluded", disk.excluded
    if "orphan" in drift:
        return "orphan", drift["orphan"]
    if view.dead is not None:
        return "dead", f"{view.dead.stage}: {view.dead.reason}"
    if "missing" in drift:
        return "missing", drift["missing"]
    if "stale" in drift:
        return "stale", drift["stale"]
    redacted = (
        "secrets redacted: " + ", ".join(view.redaction.kinds) if view.redaction is not None else ""
    )
    unread = next((p.readers_reason for p in view.points if p.readers_reason), "")
    if unread:  # the stamp fell back to the owner (core.permissions): its stored reason
        owner_only = f"permissions unreadable, readable by its owner only: {unread}"
        return "owner-only", "; ".join(r for r in (owner_only, redacted) if r)
    if redacted:
        return "redacted", redacted
    return "indexed", ""


# --- gathering the views ----------------------------------------------------------------------


@dataclass
class Inventory:
    views: dict[str, DocView]
    files_on_disk: int
    chunks: int
    sampled: bool


def _disk_files(settings: Settings) -> Iterator[tuple[str, DiskFile]]:
    """What every source lists now (a folder that is not mounted here, a repository that is
    not there, is an error: it must not read as "all orphans")."""
    pf = path_filter_of(settings)
    for source in sources_of(settings):
        try:
            source.check()
        except InvalidRequestError as err:
            raise InvalidRequestError(
                f"{err}; the audit runs where the sources are (folders mounted)"
            ) from None
        for entry in source.entries():
            disk = DiskFile(source, entry.locator, entry.fingerprint, pf.why_not(entry.rel))
            yield entry.doc_id, disk


def inventory(
    settings: Settings,
    vectors: VectorStore,
    lexical: LexicalIndex,
    sample: int | None = None,
    seed: int | None = None,
    pause: Callable[[], None] = lambda: None,
) -> Inventory:
    """Every document's view (full: one scan of each store), or `sample` random documents
    looked up one at a time (cheap: for the schedule in `watch`). `pause` is called between
    pages (or documents): a server hands one that waits while queries run."""
    views: dict[str, DocView] = {}
    files = 0
    for did, disk in _disk_files(settings):
        views[did] = DocView(did, disk=disk)
        files += 1
    dead = {d.doc_id: d for d in DeadLetterBook(settings.state_dir).all()}
    redacted = {r.doc_id: r for r in RedactionBook(settings.state_dir).all()}
    chunks = 0
    if sample is None:
        for page in vectors.live_pages():
            for chunk in page:
                views.setdefault(chunk.doc_id, DocView(chunk.doc_id)).points.append(chunk)
                chunks += 1
            pause()
        for did, ids in lexical.live_doc_ids().items():
            views.setdefault(did, DocView(did)).lexical = ids
    else:
        known = set(vectors.live_doc_fingerprints()) | set(views) | set(dead)
        picked = sorted(known)
        picked = random.Random(seed).sample(picked, min(sample, len(picked)))
        views = {did: views.get(did) or DocView(did) for did in picked}
        for did, view in views.items():
            view.points = vectors.live_chunks(did)
            view.lexical = lexical.live_ids(did)
            chunks += len(view.points)
            pause()
        for did in dead:
            views.setdefault(did, DocView(did))
    for did, view in views.items():
        view.dead, view.redaction = dead.get(did), redacted.get(did)
    return Inventory(views, files, chunks, sample is not None)


def _digest(view: DocView) -> str | None:
    """The digest of the bytes the source holds now, when `needs_digest` (a folder's file
    whose mtime moved; a git blob's digest is its id, which its scan key already holds)."""
    disk = view.disk
    if not needs_digest(view) or disk is None or disk.fingerprint is None:
        return None
    if disk.fingerprint.digest:
        return disk.fingerprint.digest
    event = FileEvent(
        source=disk.source,
        root=disk.origin.root,
        path=disk.path,
        doc_id=view.doc_id,
        kind="upsert",
        fingerprint=disk.fingerprint,
    )
    try:
        return xxhash.xxh3_128_hexdigest(disk.origin.read(event))
    except SourceReadError:
        return None


def audit(
    inv: Inventory, live_embedder: str, chunker: str = "", parser: ParserKeys | None = None
) -> tuple[VerifyReport, dict[str, dict[DriftKind, str]]]:
    """The report over an inventory, and each drifted doc's classes (the ledger reuses them)."""
    started = time.monotonic()
    found: dict[str, dict[DriftKind, str]] = {}
    for did, view in sorted(inv.views.items()):
        drift = classify(view, live_embedder, chunker, _digest(view), parser)
        if drift:
            found[did] = drift
    classes: dict[DriftKind, DriftClass] = {}
    for kind in DRIFT_KINDS:
        docs = [(did, d[kind]) for did, d in found.items() if kind in d]
        examples = tuple(DriftExample(doc_id=did, detail=why) for did, why in docs[:EXAMPLES])
        classes[kind] = DriftClass(count=len(docs), examples=examples)
    report = VerifyReport(
        ok=not found,
        drift=classes,
        drifted=sorted(found),
        docs_checked=len(inv.views),
        files_on_disk=inv.files_on_disk,
        chunks_checked=inv.chunks,
        sampled=inv.sampled,
        embedder=live_embedder,
        seconds=round(time.monotonic() - started, 3),
        at=time.time(),
    )
    return report, found


def ledger(
    inv: Inventory, drift: dict[str, dict[DriftKind, str]], states: Iterable[str] | None = None
) -> list[FileRecord]:
    """One record per file on disk and per document still live without one."""
    wanted = set(states) if states else None
    out = []
    for did, view in sorted(inv.views.items()):
        if view.disk is None and not view.points and view.dead is None:
            continue  # only in BM25: a leg mismatch `verify` reports, not a file
        state, reason = file_state(view, drift.get(did, {}))
        if wanted is not None and state not in wanted:
            continue
        out.append(_record(view, state, reason))
    return out


def _record(view: DocView, state: FileState, reason: str) -> FileRecord:
    disk, points = view.disk, view.points
    held = {p.fingerprint for p in points}
    stamped = [p.indexed_at for p in points if p.indexed_at]
    path = str(disk.path) if disk is not None else (points[0].path if points else "")
    if not path and view.dead is not None:
        path = view.dead.path
    return FileRecord(
        doc_id=view.doc_id,
        source=disk.source if disk is not None else source_of(view.doc_id),
        path=path,
        state=state,
        chunks=len(points),
        embedder=",".join(sorted({p.embedder for p in points})),
        fingerprint=next(iter(held)) if len(held) == 1 else None,
        indexed_at=max(stamped) if stamped else None,
        reason=reason,
        pages=max((p.pages for p in points if p.pages is not None), default=None),
        ocr_pages=max((p.ocr_pages for p in points), default=0),
    )


def _version(fp: FileFingerprint) -> str:
    """A version as a person reads it: `12 B @<mtime>` for a file, the token otherwise."""
    return f"{fp.size} B @{fp.mtime_ns}" if fp.token == f"{fp.size}:{fp.mtime_ns}" else fp.token


def _versions(held: set[FileFingerprint]) -> str:
    shown = sorted(_version(h) for h in held)
    return "; ".join(shown) if len(shown) == 1 else f"{len(shown)} versions ({'; '.join(shown)})"
