"""One protocol per store, and one for a source of documents; every implementation is driven
by the same congruence (contract) tests.

A source (`Source`: a folder, connectors/fs.py; a git repository at a ref, connectors/git.py)
lists what is there with a fingerprint each, opens one document's bytes for the parse step,
says which version of a document is there now (the audit, an answer's freshness), and may
follow changes.

Both stores soft-delete: a tombstoned point keeps its text/vector with `status="deleted"`
and `deleted_at`, and every search filters it out *inside* the store. `gc` hard-deletes
tombstones older than a retention window, never a live point.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from ragstream.core.filters import Where
from ragstream.core.metadata import FieldType, RawValue
from ragstream.core.models import EmbedderVersion, FileEvent, FileFingerprint, IndexedChunk
from ragstream.core.permissions import Readers, UserDb

# what a point cut by another chunker config reports as its file fingerprint: matches no file
STALE_FINGERPRINT = "stale"  # a version token no document has: the scan re-reads it
# a file's path -> every parser key under which it reads now as it did then
# (`operators.parse.parser_keys` of the current settings)
ParserKeys = Callable[[str], Collection[str]]


def parsed_elsewise(held: str, path: str, parser: ParserKeys | None) -> bool:
    """Whether a file recorded under parser key `held` would read otherwise now. An empty
    key (recorded before keys were) and no `parser` (not checked) are never stale."""
    return bool(parser is not None and held and held not in parser(path))


class SearchFilter(BaseModel):
    """Store-side filter over live points; the rest narrows further. Every store builds its
    conditions from `status_condition` and the allow-lists below."""

    model_config = ConfigDict(frozen=True)

    doc_ids: tuple[str, ...] | None = None
    tenants: tuple[str, ...] | None = None
    # a chunk matches when its `readers` hold one of these (`Settings.readers_of`)
    readers: tuple[str, ...] | None = None
    path_prefix: str | None = None  # matched on doc_id prefix (`source:dir/`)
    file_types: tuple[str, ...] | None = None
    where: Where | None = None  # a user's filter, checked against the catalogue of fields

    def status_condition(self, status: str = "live") -> str | None:
        """The status a matching point must have; None when the filter already implies it.
        A tombstone clears its point's `readers` (every store, `tombstone`), so a `readers`
        allow-list matches live points only: a search filtered by readers sends that one
        condition, not two (the BM25 leg checks each condition on every candidate;
        docs/guide/permissions.md, "Cost")."""
        return None if status == "live" and self.readers is not None else status


class Hit(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk: IndexedChunk
    score: float


class VectorStore(Protocol):
    """A vector collection for one embedder version."""

    collection: str  # its name, `<index>__<embedder slug>`
    embedder: EmbedderVersion

    def upsert(self, chunks: Sequence[IndexedChunk], vectors: Sequence[Sequence[float]]) -> None:
        """Idempotent write by point id (payload + vector)."""

    def set_fingerprint(
        self, point_ids: Sequence[str], fingerprint: FileFingerprint, indexed_at: float
    ) -> None:
        """Record the file version that the kept points now belong to (no vector change)."""

    def set_positions(self, chunks: Sequence[IndexedChunk]) -> None:
        """Payload-only update for moved/retitled chunks (no re-embed): ordinal, span,
        section, and the doc-level title and file fingerprint."""

    def tombstone(self, point_ids: Sequence[str], deleted_at: float) -> None:
        """Soft delete: status="deleted", deleted_at; the point keeps its vector until GC."""

    def set_readers(self, chunks: Sequence[IndexedChunk]) -> None:
        """Payload-only update of who may read each chunk (`readers`, its fingerprint and
        reason): a permission change re-reads and re-embeds nothing."""

    def live_doc_readers(self) -> dict[str, set[str]]:
        """doc_id -> the readers fingerprints over its live points (catch-up scan)."""

    def readable_docs(self, readers: Sequence[str], doc_id: str | None = None) -> set[str]:
        """The doc ids (of `doc_id` alone, when given) with a live point whose `readers`
        hold one of `readers`."""

    def live_docs(self, flt: SearchFilter) -> set[str]:
        """The doc ids with a live point matching the filter (in the store, as a search)."""

    def gc(self, older_than: float) -> int:
        """Hard-delete tombstones with deleted_at < older_than; returns how many."""

    def optimize(self) -> None:
        """Build the engine's search structures over what it holds (Edge: HNSW)."""

    def live_chunks(self, doc_id: str) -> list[IndexedChunk]:
        """Every live point of one document (the diff's view of 'what the index holds')."""

    def live_doc_fingerprints(
        self, chunker: str = "", parser: ParserKeys | None = None
    ) -> dict[str, set[str]]:
        """doc_id -> the version tokens of its live points (`FileFingerprint.token`: what
        the catch-up scan compares).

        With `chunker`, a point cut by another chunker config counts as `STALE_FINGERPRINT`,
        which no file matches, so a settings change re-reads the documents it affects; with
        `parser`, so does a point whose file was parsed under a key no longer among its
        `parser(path)` (an OCR setting changed)."""

    def live_payloads(self, flt: SearchFilter, keys: Sequence[str]) -> Iterator[dict[str, Any]]:
        """The `keys` of every live point matching the filter (a scroll, in pages)."""

    def index_fields(self, fields: Mapping[str, FieldType]) -> None:
        """A payload index of the right kind on each metadata field that lacks one."""

    def live_pages(self, size: int = ...) -> Iterator[list[IndexedChunk]]:
        """Every live point, a page at a time (a blue/green backfill reads the old side so)."""

    def live_doc_points(self) -> dict[str, set[str]]:
        """doc_id -> the ids of its live points (the audit's cheap view of what is held)."""

    def vectors_for_hashes(self, hashes: Iterable[str]) -> dict[str, list[float]]:
        """Content hash -> vector from any point (live or tombstoned) of this collection."""

    def get(self, point_ids: Sequence[str]) -> list[IndexedChunk]:
        """Points by id in any status (exact point lookup)."""

    def search(self, vector: Sequence[float], limit: int, flt: SearchFilter) -> list[Hit]:
        """Dense top-`limit` over live points matching the filter."""

    def search_text(self, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        """BM25 top-`limit` over live points matching the filter, from the points' `bm25`
        sparse vectors (only a store opened with `sparse=True` has them)."""

    def term_doc_freqs(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(points, analyzed term -> points holding it, capped): the sparse leg's IDF input."""

    def count(self, status: str, flt: SearchFilter | None = None) -> int:
        """Points of `status` (matching the filter's allow-lists, when given: a store-side
        count through the payload indexes, no point read)."""

    def flush(self) -> None:
        """Persist pending writes at a batch boundary (not needed for crash safety)."""

    def close(self) -> None: ...


class LexicalIndex(Protocol):
    """A persistent BM25 index over chunk text, independent of the embedder."""

    # True when the BM25 leg lives in the vector store's own points (`sparse`): its writes
    # go with the vector store's, and a query searches the side it pinned
    shares_points: bool

    def upsert(self, chunks: Sequence[IndexedChunk]) -> None:
        """Idempotent write by point id; visible to search after `commit`."""

    def tombstone(self, point_ids: Sequence[str], deleted_at: float) -> None: ...

    def live_doc_ids(self) -> dict[str, set[str]]:
        """doc_id -> its committed live point ids, over the whole index (`verify`)."""

    def live_ids(self, doc_id: str) -> set[str]:
        """Point ids of one document's live chunks here, staged writes included. The vector
        store is the diff's truth, but a crash between the lexical and the vector write can
        leave points live only here; the indexer tombstones those on the next pass."""

    def gc(self, older_than: float) -> int: ...

    def commit(self) -> None:
        """Make all writes since the last commit durable and searchable (one per batch)."""

    def get(self, point_ids: Sequence[str]) -> list[IndexedChunk]: ...

    def search(self, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        """BM25 top-`limit` over live chunks matching the filter."""

    def doc_freqs(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(chunks indexed, analyzed term -> chunks containing it): the IDF statistics that
        weigh how much of a question the evidence covers."""

    def count(self, status: str, flt: SearchFilter | None = None) -> int:
        """Chunks of `status` (matching the filter's allow-lists, when given)."""

    def close(self) -> None: ...


class SourceReadError(Exception):
    """A document the source cannot hand over (gone, unreadable, a corrupt object): the parse
    step dead-letters it with `reason`, at stage "read"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self) -> tuple[type[SourceReadError], tuple[str]]:
        return SourceReadError, (self.reason,)  # survives pickling between workers


class SourceUnavailable(SourceReadError):
    """The source cannot be reached for now (a store that refuses connections or times out):
    the document is not recorded as read, so the next sync reads it again."""

    def __reduce__(self) -> tuple[type[SourceReadError], tuple[str]]:
        return SourceUnavailable, (self.reason,)


@dataclass
class SourceEntry:
    """One document a source lists: its id, its locator (what the parse step opens and a
    citation names), its path relative to the root (what the include/exclude patterns
    match) and, on first use, its fingerprint (None: it vanished since it was listed). A
    folder stats only the files a caller asks about; a git tree entry already knows its."""

    doc_id: str
    locator: str
    rel: str
    stat: Callable[[], FileFingerprint | None]

    @cached_property
    def fingerprint(self) -> FileFingerprint | None:
        return self.stat()

    @classmethod
    def listed(cls, doc_id: str, locator: str, rel: str, fp: FileFingerprint) -> SourceEntry:
        """An entry whose fingerprint came with the listing (a git tree, an object store)."""
        return cls(doc_id, locator, rel, partial(_given, fp))


def _given(fp: FileFingerprint) -> FileFingerprint:
    return fp


# a watching source reports a changed locator (a folder: a path; `""`: re-list everything),
# `completed` when the change is known to be whole (the writer closed the file)
Touch = Callable[[str, bool], None]


def poll_for_changes(
    thread_name: str, poll_s: float, read: Callable[[], object | None], touch: Touch
) -> Callable[[], None]:
    """Watch a source that cannot push changes: every `poll_s`, `read` what says its version
    (a git ref's commit, an S3 listing); when that moved, touch `""` (re-list it as a whole).
    A read of None (the source not there for now) is skipped: the next poll sees again.
    Returns the function that stops the polling thread."""
    stop = threading.Event()
    seen = [read()]

    def loop() -> None:
        while not stop.wait(poll_s):
            now = read()
            if now is not None and now != seen[0]:
                seen[0] = now
                touch("", True)

    thread = threading.Thread(target=loop, name=thread_name, daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=5)

    return halt


class Source(Protocol):
    """Where documents come from: listed with fingerprints, opened one at a time."""

    name: str  # prefixes every doc_id
    root: str  # the folder, or the repository (`FileEvent.root`)

    def check(self) -> None:
        """Raise `InvalidRequestError` when the source itself is not there: an unmounted
        folder, a path that is no repository, an unknown ref."""

    def entries(self) -> Iterator[SourceEntry]:
        """Every document there, wanted by the patterns or not (the ledger shows excluded
        ones), in a stable order; `check`ed first: a source that is not there is an error,
        never an empty listing that would read as "every document was deleted"."""

    def locator(self, rel: str) -> str:
        """The locator of the document at `rel` (a delete event names it)."""

    def read(self, event: FileEvent) -> bytes:
        """The document's bytes, exactly the listed version; `SourceReadError` if not."""

    def version(self, locator: str) -> FileFingerprint | None:
        """The version of the document there now, None when it is gone; `OSError` when the
        source cannot be seen from here (freshness then says "unknown")."""

    def watch(self, touch: Touch) -> Callable[[], None]:
        """Start reporting changes to `touch`; returns the function that stops it."""

    def fields(self, locator: str) -> dict[str, RawValue]:
        """What the source says of the document beyond its bytes (a git source: its last
        commit's time and author; an object store: the object's user metadata), which joins
        the document's metadata as the "source" reading; {} when it says nothing."""

    def stamp(self, locator: str, db: UserDb) -> Readers:
        """Who may read the document now (`OFF_STAMP` where the source mirrors no
        permissions: only a folder with `permissions = "posix"` does)."""

    def changed(self, locator: str, known: Mapping[str, str | None]) -> Iterator[FileEvent]:
        """The events of one touched locator, given the version token the index holds per doc
        (a source that only ever touches `""`, re-list everything, yields none here)."""
