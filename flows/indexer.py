"""The two batch steps of the sync flow: read+parse, then chunk → diff → embed → write.

Both are plain methods over lists, so they can be tested without bytewax; `flows.sync` calls
them once per bytewax batch (the parse step as a keyed `stateful_batch`, the write step as the
single sink partition), so embedding is batched across documents. Write order per batch:
new/changed points to the lexical index, then to the vector store (whose per-point file
fingerprint is the record of "this doc is done"), then the fingerprint of kept points, and
only then tombstones — lexical first, vectors last (docs/architecture.md, "Writes and
deletes"). A crash anywhere leaves a doc with mixed fingerprints or an old fingerprint, which
the next catch-up scan re-diffs, so every pass converges. During a blue/green reindex every
side gets the same changes, each embedded by its own model; a side that misses some after a
crash is repaired by the reindex backfill, which reconciles it against the live side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import xxhash
from opentelemetry import trace

from ragstream.connectors.fields import NO_META, Admitted, FieldCatalog
from ragstream.connectors.lexical import section_contexts
from ragstream.connectors.protocols import (
    LexicalIndex,
    Source,
    SourceReadError,
    SourceUnavailable,
    VectorStore,
)
from ragstream.connectors.sources import source_for
from ragstream.connectors.state import DeadLetterBook, RedactionBook
from ragstream.connectors.vector_stores import READER_FIELDS
from ragstream.core.errors import EmbedderDriftError, EndpointDownError
from ragstream.core.models import (
    Chunk,
    DeadLetter,
    DocOutcome,
    FileEvent,
    FileFingerprint,
    IndexedChunk,
    ParsedDocument,
    Redaction,
    VectorOrigin,
)
from ragstream.core.permissions import OFF_STAMP, Readers, UserDb, source_token
from ragstream.core.telemetry import span
from ragstream.operators.chunk import ChunkerConfig, chunk_document, embedding_text
from ragstream.operators.diff import DocDiff, diff_document
from ragstream.operators.embed import Embedder
from ragstream.operators.ocr import OcrCache, OcrOptions
from ragstream.operators.parse import ParseError, parse_bytes, parser_key
from ragstream.operators.remote_embed import TextsRejected
from ragstream.operators.secrets import redact_document

if TYPE_CHECKING:
    from ragstream.flows.sides import Side
    from ragstream.flows.situate import SituateStep


@dataclass(frozen=True)
class ParsedWork:
    """One event after the read/parse step: a document, a delete, or a dead letter."""

    event: FileEvent
    doc: ParsedDocument | None = None
    dead: DeadLetter | None = None
    redactions: tuple[str, ...] = ()  # kinds of secrets replaced before chunking


@dataclass
class _DocPlan:
    work: ParsedWork
    chunks: list[Chunk] = field(default_factory=list)
    diff: DocDiff | None = None
    stored: list[IndexedChunk] = field(default_factory=list)
    lexical_orphans: list[str] = field(default_factory=list)  # live in BM25 only (a crash)
    lexical_live: set[str] = field(default_factory=set)  # the doc's live ids in BM25
    chunker_key: str = ""  # the ChunkerConfig.key its chunks were cut with
    stamp: Readers = OFF_STAMP  # who may read the document now
    meta: Admitted = NO_META  # its metadata as the catalogue reads it (`connectors.fields`)


class Sides(Protocol):
    """What the indexer writes to (`flows.sides.IndexSides`): the live side, whose points the
    diff reads, and the other side of an open reindex, which gets the same changes."""

    @property
    def live(self) -> Side: ...
    @property
    def others(self) -> tuple[Side, ...]: ...


@dataclass(frozen=True)
class DocReader:
    """Step 1, read + parse: needs no store, so it runs on every bytewax worker and process
    (`-w`/`-p`) while only the store owner runs step 2 (`flows.sync`)."""

    max_file_bytes: int
    parse_timeout_s: float | None = None
    ocr: OcrOptions = field(default_factory=OcrOptions)  # `parse.*`: which pages OCR reads
    ocr_cache: OcrCache | None = None  # what OCR already read (`<state_dir>/ocr.sqlite3`)
    sources: Mapping[str, Source] = field(default_factory=dict)  # the configured, by name

    def parse_batch(self, events: Sequence[FileEvent]) -> list[ParsedWork]:
        out = []
        with span("ingest.parse", docs_in=len(events)) as sp:
            for event in _last_per_doc(events):
                out.append(self._parse_one(event))
            sp.set_attribute("dead_letters", sum(w.dead is not None for w in out))
        return out

    def _parse_one(self, event: FileEvent) -> ParsedWork:
        """Read the document through its source (the configured source the event names,
        `connectors.sources.source_for`), then parse its bytes. A delete, or a change of
        permissions only, reads nothing. A source that cannot be reached for now
        (`SourceUnavailable`) dead-letters the document unrecorded: the next sync reads it."""
        if event.kind in ("delete", "permissions"):
            return ParsedWork(event)
        fp = event.fingerprint
        if fp is None:
            return ParsedWork(
                event, dead=self._letter(event, "read", "file vanished before it could be read")
            )
        too_large = f"file too large: {{}} bytes > limit {self.max_file_bytes}"
        if fp.size > self.max_file_bytes:
            return ParsedWork(event, dead=self._letter(event, "read", too_large.format(fp.size)))
        source = source_for(self.sources, event.source, event.path, event.root)
        try:
            data = source.read(event)
        except SourceUnavailable as err:
            dead = self._letter(event, "read", err.reason).model_copy(update={"fingerprint": None})
            return ParsedWork(event, dead=dead)
        except SourceReadError as err:
            return ParsedWork(event, dead=self._letter(event, "read", err.reason))
        if len(data) > self.max_file_bytes:  # a git blob's size is known once it is read
            return ParsedWork(event, dead=self._letter(event, "read", too_large.format(len(data))))
        if not fp.digest:  # a folder's file: the digest of the bytes just read
            fp = fp.model_copy(update={"digest": xxhash.xxh3_128_hexdigest(data)})
        try:
            doc = parse_bytes(
                data,
                event.path,
                event.doc_id,
                event.source,
                fp,
                self.parse_timeout_s,
                ocr=self.ocr,
                ocr_cache=self.ocr_cache,
                source_fields=source.fields(event.path),
            )
        except ParseError as err:
            return ParsedWork(event, dead=self._letter(event, err.stage, err.reason))
        except Exception as err:  # a parser bug must not kill the flow: dead-letter it
            reason = f"unexpected {type(err).__name__}: {err}"
            return ParsedWork(event, dead=self._letter(event, "parse", reason))
        doc, kinds = redact_document(doc)
        return ParsedWork(event, doc=doc, redactions=kinds)

    def _letter(self, event: FileEvent, stage: str, reason: str) -> DeadLetter:
        return DeadLetter.model_validate(
            dict(
                doc_id=event.doc_id,
                path=event.path,
                stage=stage,
                reason=reason,
                at=time.time(),
                fingerprint=event.fingerprint,
                parser=parser_key(event.path, self.ocr),
            )
        )


def _reject(plans: Sequence[_DocPlan], rejected: dict[str, str]) -> None:
    """The documents holding a text the embedding endpoint refused become dead letters for
    this pass (stage "embed", the endpoint's reason); their indexed version stays, and the
    other documents of the batch are written. A refused text is never truncated."""
    at = time.time()
    for plan in plans:
        if plan.diff is None:
            continue
        reasons = [rejected[c.content_hash] for c in plan.chunks if c.content_hash in rejected]
        if reasons:
            event = plan.work.event
            reason = f"the embedding endpoint refused a chunk: {reasons[0]}"
            dead = DeadLetter(
                doc_id=event.doc_id, path=event.path, stage="embed", reason=reason, at=at
            )
            plan.work, plan.chunks, plan.diff = ParsedWork(event, dead=dead), [], None
            plan.lexical_orphans = []


@dataclass
class Indexer:
    sides: Sides
    lexical: LexicalIndex
    dead_letters: DeadLetterBook
    redactions: RedactionBook
    chunker: Callable[[Embedder], ChunkerConfig]  # of the live embedder
    tenants: dict[str, str]  # source name -> tenant
    max_file_bytes: int
    parse_timeout_s: float | None = None
    batch_size: int = 64
    # one writer at a time for a whole batch; `gate` keeps queries out while it writes only
    lock: AbstractContextManager[object] = field(default_factory=nullcontext)
    gate: AbstractContextManager[object] = field(default_factory=nullcontext)
    situate: SituateStep | None = None  # `chunk.situate`: LLM sentence into each context
    ocr: OcrOptions = field(default_factory=OcrOptions)
    ocr_cache: OcrCache | None = None
    mirrored: frozenset[str] = frozenset()  # sources whose file permissions are mirrored
    sources: Mapping[str, Source] = field(default_factory=dict)  # the configured, by name
    fields: FieldCatalog | None = None  # the metadata fields' types (None: none recorded)

    # ---- step 1: read + parse -------------------------------------------------------
    def parse_batch(self, events: Sequence[FileEvent]) -> list[ParsedWork]:
        reader = DocReader(
            self.max_file_bytes, self.parse_timeout_s, self.ocr, self.ocr_cache, self.sources
        )
        return reader.parse_batch(events)

    # ---- step 2: chunk → diff → embed → write ----------------------------------------
    def index_batch(self, works: Sequence[ParsedWork]) -> list[DocOutcome]:
        with self.lock:
            return self._index_batch(works)

    def _index_batch(self, works: Sequence[ParsedWork]) -> list[DocOutcome]:
        live = self.sides.live  # one live side for the whole batch
        latest = _last_work_per_doc(works)
        db = UserDb.system() if self.mirrored else UserDb()
        restamps = [w for w in latest if w.event.kind == "permissions"]
        plans = [_DocPlan(w) for w in latest if w.event.kind != "permissions"]
        docs = [p for p in plans if p.work.doc is not None]
        for plan in docs:
            plan.stamp = self._stamp(plan.work.event, db)
            if self.fields is not None and plan.work.doc is not None:
                plan.meta = self.fields.admit(plan.work.doc)
        chunker = self.chunker(live.embedder)
        with span("ingest.chunk", docs=len(docs)) as sp:
            for plan in docs:
                assert plan.work.doc is not None
                plan.chunks = chunk_document(plan.work.doc, chunker, live.embedder.count_tokens)
                plan.chunker_key = chunker.key
            sp.set_attribute("chunks_out", sum(len(p.chunks) for p in docs))
        with span("ingest.diff", docs=len(plans)) as sp:
            for plan in plans:
                if plan.work.dead is None:
                    doc_id = plan.work.event.doc_id
                    # a point tagged with another embedder (never written so; `verify` finds
                    # it) holds a vector of unknown origin: diffed as absent, so re-embedded
                    slug = live.embedder.version.slug
                    stored = live.vectors.live_chunks(doc_id)
                    plan.stored = [c for c in stored if c.embedder == slug]
                    plan.diff = diff_document(plan.chunks, plan.stored)
                    settled = {c.point_id for c in plan.chunks} | set(plan.diff.tombstone)
                    foreign = {c.point_id for c in stored if c.embedder != slug} - settled
                    if foreign:
                        tombstone = (*plan.diff.tombstone, *sorted(foreign))
                        plan.diff = replace(plan.diff, tombstone=tombstone)
                    plan.lexical_live = self.lexical.live_ids(doc_id)
                    plan.lexical_orphans = sorted(plan.lexical_live - settled)
            _diff_attributes(sp, plans)
        if self.situate is not None:
            self._situate(self.situate, plans, live.embedder)
        needed = _needed([p for p in plans if p.diff is not None])
        try:
            vectors, encoded, rejected = self._embed(live, needed)
        except (EndpointDownError, EmbedderDriftError) as unable:  # good input, no vector now
            return [DocOutcome(doc_id=w.event.doc_id, pending=str(unable)) for w in latest]
        if rejected:
            _reject(plans, rejected)
        encoded_by = {h: needed[h][0] for h in encoded}
        restamped, changed = self._restamps(live, restamps, db)
        if self.fields is not None and docs:  # each field's payload index before its values
            types = self.fields.types()
            for side in (live, *self.sides.others):
                side.vectors.index_fields(types)
        with self.gate:  # queries wait for the writes only, never for the embedding
            outcomes = self._write(live, plans, vectors, encoded_by)
            self._restamp(live, changed)
        outcomes += restamped
        self.dead_letters.save()
        self.redactions.save()
        return outcomes

    @staticmethod
    def _situate(step: SituateStep, plans: Sequence[_DocPlan], embedder: Embedder) -> None:
        """Header + LLM sentence into the context of every chunk of the batch
        (`flows.situate`). A document that cannot get all its sentences is dead-lettered for
        this pass, unfingerprinted so the next sync retries it: its indexed version stays."""
        docs = [p for p in plans if p.diff is not None and p.work.doc is not None]
        jobs = [(p.work.doc, p.chunks, p.stored) for p in docs if p.work.doc is not None]
        for plan, result in zip(docs, step.apply(jobs, embedder.count_tokens), strict=True):
            if isinstance(result, str):
                event = plan.work.event
                at = time.time()
                dead = DeadLetter(
                    doc_id=event.doc_id, path=event.path, stage="embed", reason=result, at=at
                )
                plan.work, plan.chunks, plan.diff = ParsedWork(event, dead=dead), [], None
                plan.lexical_orphans = []
            else:
                plan.chunks = result
                plan.diff = diff_document(result, plan.stored)  # same ids: only contexts differ

    def _embed(
        self, side: Side, needed: dict[str, tuple[str, str]]
    ) -> tuple[dict[str, list[float]], list[str], dict[str, str]]:
        """Vectors of `side` for every needed hash: reused from its store (any point, live or
        tombstoned), else encoded by its embedder. Returns hash -> vector, what was encoded,
        and hash -> reason for the texts a remote endpoint refused (no vector for them)."""
        model, where = side.embedder.version.name, side.collection
        rejected: dict[str, str] = {}
        with span("ingest.embed", chunks_in=len(needed), model=model, collection=where) as sp:
            vectors = side.vectors.vectors_for_hashes(needed) if needed else {}
            todo = [h for h in needed if h not in vectors]
            if todo:
                try:
                    matrix = side.embedder.encode_passages(
                        [needed[h][1] for h in todo], batch_size=self.batch_size
                    )
                except TextsRejected as refused:
                    matrix = refused.vectors
                    rejected = {todo[i]: why for i, why in refused.rejected.items()}
                for h, row in zip(todo, np.asarray(matrix), strict=True):
                    if h not in rejected:
                        vectors[h] = [float(x) for x in row]
                todo = [h for h in todo if h not in rejected]
            sp.set_attribute("reembedded", len(todo))
            sp.set_attribute("reused", len(needed) - len(todo) - len(rejected))
            sp.set_attribute("rejected", len(rejected))
        return vectors, todo, rejected

    def _stamp(self, event: FileEvent, db: UserDb) -> Readers:
        """Who may read the document of `event` now, as its source says (`OFF_STAMP`: its
        source mirrors no permissions)."""
        if event.source not in self.mirrored:
            return OFF_STAMP
        return source_for(self.sources, event.source, event.path, event.root).stamp(event.path, db)

    def _restamps(
        self, live: Side, works: Sequence[ParsedWork], db: UserDb
    ) -> tuple[list[DocOutcome], list[IndexedChunk]]:
        """A change of permissions only: each document's live chunks whose stamp differs,
        with the new one (nothing read from the document, nothing embedded)."""
        outcomes, changed = [], []
        at = time.time()
        for work in works:
            stamp = self._stamp(work.event, db)
            held = live.vectors.live_chunks(work.event.doc_id)
            stale = [stamped(c, stamp) for c in held if c.readers_fp != stamp.fingerprint]
            changed += stale
            outcomes.append(
                DocOutcome(doc_id=work.event.doc_id, chunks_restamped=len(stale), at=at)
            )
        return outcomes, changed

    def _restamp(self, live: Side, changed: Sequence[IndexedChunk]) -> None:
        """The new stamps written: a payload update in every store."""
        if not changed:
            return
        with span("ingest.restamp", chunks=len(changed)):
            if not self.lexical.shares_points:
                by_id = {c.point_id: c for c in changed}
                held_bm25 = [c for c in self.lexical.get(list(by_id)) if c.status == "live"]
                self.lexical.upsert([stamped(c, by_id[c.point_id]) for c in held_bm25])
                self.lexical.commit()
            for side in (live, *self.sides.others):
                side.vectors.set_readers(changed)

    def _record(
        self,
        chunk: Chunk,
        doc: ParsedDocument,
        chunker_key: str,
        lexical_context: str,
        at: float,
        stamp: Readers = OFF_STAMP,
        meta: Admitted = NO_META,
    ) -> IndexedChunk:
        return IndexedChunk(
            point_id=chunk.point_id,
            doc_id=chunk.doc_id,
            source=doc.source,
            path=doc.path,
            file_type=doc.file_type,
            title=doc.title,
            ordinal=chunk.ordinal,
            content_hash=chunk.content_hash,
            text=chunk.text,
            context=chunk.context,
            section_path=chunk.section_path,
            page=chunk.page,
            char_start=chunk.char_start,
            char_end=chunk.char_end,
            non_prose=chunk.non_prose,
            chunker=chunker_key,
            parser=doc.parser,
            lexical_context=lexical_context,
            embedder="",  # stamped by each store with its own embedder
            file_size=doc.fingerprint.size,
            file_mtime_ns=doc.fingerprint.mtime_ns,
            file_digest=doc.fingerprint.digest,
            file_commit=doc.fingerprint.commit,
            indexed_at=at,
            tenant=self.tenants.get(doc.source, ""),
            readers=(*stamp.principals, source_token(doc.source)),
            readers_fp=stamp.fingerprint,
            readers_reason=stamp.reason,
            origin=chunk.origin,
            bbox=chunk.bbox,
            ocr_confidence=chunk.confidence,
            pages=doc.pages,
            ocr_pages=len(doc.ocr_pages),
            meta=meta.meta,
            meta_origin=meta.origin,
            meta_notes=meta.notes,
        )

    def _write(
        self,
        live: Side,
        plans: Sequence[_DocPlan],
        vectors: dict[str, list[float]],
        encoded_by: dict[str, str],
    ) -> list[DocOutcome]:
        adds: list[IndexedChunk] = []
        moves: list[IndexedChunk] = []
        bm25_only: list[IndexedChunk] = []  # kept points whose section neighbours changed
        keep_fps: list[tuple[list[str], FileFingerprint]] = []
        tombstones: list[str] = []
        orphans: list[str] = []
        outcomes = []
        at = time.time()
        for plan in plans:
            outcome, doc_adds, doc_moves, doc_bm25 = self._plan_writes(plan, encoded_by, at)
            outcomes.append(outcome)
            adds += doc_adds
            moves += doc_moves
            if self.lexical.shares_points:
                moves += doc_bm25  # the sparse BM25 leg is rewritten with the point
            else:
                bm25_only += doc_bm25
            if plan.diff is None:
                continue
            tombstones += plan.diff.tombstone
            orphans += plan.lexical_orphans
            if plan.work.doc is not None:
                fp = plan.work.doc.fingerprint
                held = {c.point_id: c.fingerprint for c in plan.stored}
                stale = [c.point_id for c in plan.diff.keep if held[c.point_id] != fp]
                if stale:
                    keep_fps.append((stale, fp))
        changes = _Changes(adds, moves, keep_fps, tombstones, at)
        with span("ingest.write", upserts=len(adds), moves=len(moves), tombstones=len(tombstones)):
            if adds or moves or bm25_only:
                self.lexical.upsert(adds + moves + bm25_only)
                self.lexical.commit()
            _apply(live.vectors, changes, vectors)
            others = self.sides.others  # dual-write during a reindex, each with its own vectors
            needed = {c.content_hash: (c.doc_id, embedding_text(c.context, c.text)) for c in adds}
            needed = needed if others else {}
            for other in others:
                try:
                    other_vectors = self._embed(other, needed)[0]
                except (EndpointDownError, EmbedderDriftError) as unable:
                    # the new side's remote model cannot embed now: it lags the live side
                    # (the promote gate refuses until a backfill pass, `reindex run` or
                    # watch's next one, copies what it misses); the live side is written
                    skipped = {"collection": other.collection, "why": str(unable)}
                    trace.get_current_span().add_event("ingest.dual_write_skipped", skipped)
                    continue
                _apply(other.vectors, changes, other_vectors)
            if tombstones or orphans:  # last, in every store
                self.lexical.tombstone(tombstones + orphans, changes.at)
                self.lexical.commit()
                for side in (live, *others):
                    side.vectors.tombstone(tombstones, changes.at)
        return outcomes

    def _plan_writes(
        self, plan: _DocPlan, encoded_by: dict[str, str], at: float
    ) -> tuple[DocOutcome, list[IndexedChunk], list[IndexedChunk], list[IndexedChunk]]:
        """The doc's outcome, its adds, its moves (both stores), and the kept points whose
        BM25 text changed because a section neighbour did (lexical index only)."""
        event = plan.work.event
        if plan.work.dead is not None:
            self.dead_letters.put(plan.work.dead)
            return DocOutcome(doc_id=event.doc_id, dead_letter=plan.work.dead), [], [], []
        self.dead_letters.clear(event.doc_id)
        kinds = plan.work.redactions
        if kinds:
            self.redactions.put(Redaction(doc_id=event.doc_id, path=event.path, kinds=kinds))
        else:
            self.redactions.clear(event.doc_id)
        diff = plan.diff
        assert diff is not None
        doc = plan.work.doc
        if doc is None:  # delete
            deleted = DocOutcome(
                doc_id=event.doc_id,
                deleted=bool(diff.tombstone),
                chunks_tombstoned=len(diff.tombstone),
                at=at,
            )
            return deleted, [], [], []
        # the first add of a hash this doc needed first was encoded; every other add reused
        fresh = {
            c.point_id for c in diff.add if encoded_by.pop(c.content_hash, None) == event.doc_id
        }
        refresh_kept = any(_kept_is_stale(c, doc, plan) for c in plan.stored)
        restamped = len(diff.keep) if refresh_kept else 0
        outcome = _doc_outcome(plan, doc, diff, len(fresh), at, restamped)
        refresh = [*diff.move, *(diff.keep if refresh_kept else ())]
        new_ctx = dict(
            zip((c.point_id for c in plan.chunks), section_contexts(plan.chunks), strict=True)
        )
        bm25 = _bm25_stale(plan, diff, new_ctx, {c.point_id for c in refresh})

        def record(c: Chunk, origin: VectorOrigin = "kept") -> IndexedChunk:
            chunk = self._record(
                c, doc, plan.chunker_key, new_ctx[c.point_id], at, plan.stamp, plan.meta
            )
            return chunk.model_copy(update={"vector_origin": origin})

        return (
            outcome,
            [record(c, "embedded" if c.point_id in fresh else "reused") for c in diff.add],
            [record(c) for c in refresh],
            [record(c) for c in bm25],
        )


def _kept_is_stale(held: IndexedChunk, doc: ParsedDocument, plan: _DocPlan) -> bool:
    """Whether a doc's kept chunks need their payload refreshed though their text is the
    same: a retitled doc (its first heading edited: the title is on every point and in the
    BM25 text), a doc re-read under another parser key (an OCR setting changed: else the
    catch-up scan finds them stale again), a doc whose permissions changed with its content,
    and a doc whose metadata changed (front matter edited, the file touched)."""
    return (
        held.title != doc.title
        or held.parser != doc.parser
        or held.readers_fp != plan.stamp.fingerprint
        or (held.meta, held.meta_origin, held.meta_notes)
        != (plan.meta.meta, plan.meta.origin, plan.meta.notes)
    )


def _doc_outcome(
    plan: _DocPlan, doc: ParsedDocument, diff: DocDiff, embedded: int, at: float, restamped: int
) -> DocOutcome:
    """What indexing one parsed document did, `embedded` of its adds encoded here and
    `restamped` of its kept chunks given a new payload (title, metadata, stamp) alone."""
    return DocOutcome(
        doc_id=plan.work.event.doc_id,
        changed=not diff.unchanged or restamped > 0,
        chunks_restamped=restamped,
        chunks_live=len(plan.chunks),
        chunks_embedded=embedded,
        chunks_reused=len(diff.add) - embedded,
        chunks_moved=len(diff.move),
        chunks_tombstoned=len(diff.tombstone),
        redactions=plan.work.redactions,
        at=at,
        # save → searchable; a git version has no save time (its mtime slot holds a blob key)
        lag_s=None
        if diff.unchanged or doc.fingerprint.commit
        else round(at - doc.fingerprint.mtime_ns / 1e9, 3),
    )


def _bm25_stale(
    plan: _DocPlan, diff: DocDiff, new_ctx: dict[str, str], refreshed: set[str]
) -> list[Chunk]:
    """The kept chunks (not already refreshed) whose BM25 text changed because a section
    neighbour did, or that the BM25 leg lost."""
    old = sorted(plan.stored, key=lambda c: c.ordinal)
    old_ctx = dict(zip((c.point_id for c in old), section_contexts(old), strict=True))
    return [
        c
        for c in diff.keep
        if c.point_id not in refreshed
        and (
            old_ctx.get(c.point_id) != new_ctx[c.point_id]
            or c.point_id not in plan.lexical_live  # lost by the BM25 leg (verify: legs)
        )
    ]


@dataclass(frozen=True)
class _Changes:
    """One batch's writes, applied alike to every side."""

    adds: list[IndexedChunk]
    moves: list[IndexedChunk]
    keep_fps: list[tuple[list[str], FileFingerprint]]
    tombstones: list[str]
    at: float


def _apply(store: VectorStore, changes: _Changes, vectors: dict[str, list[float]]) -> None:
    """Adds, moves, then the fingerprint of kept points (the record of "this doc is done");
    tombstones are applied after every store got these (docs/architecture.md, "Writes and
    deletes")."""
    if changes.adds:
        store.upsert(changes.adds, [vectors[c.content_hash] for c in changes.adds])
    if changes.moves:
        store.set_positions(changes.moves)
    for ids, fp in changes.keep_fps:
        store.set_fingerprint(ids, fp, changes.at)


def _needed(plans: Sequence[_DocPlan]) -> dict[str, tuple[str, str]]:
    """content hash -> (doc that first needs it, embedded text) over every chunk a batch adds."""
    needed: dict[str, tuple[str, str]] = {}
    for plan in plans:
        assert plan.diff is not None
        for chunk in plan.diff.add:
            needed.setdefault(
                chunk.content_hash,
                (plan.work.event.doc_id, embedding_text(chunk.context, chunk.text)),
            )
    return needed


def _diff_attributes(sp: object, plans: Sequence[_DocPlan]) -> None:
    diffs = [p.diff for p in plans if p.diff is not None]
    for name in ("keep", "move", "add", "tombstone"):
        sp.set_attribute(name, sum(len(getattr(d, name)) for d in diffs))  # type: ignore[attr-defined]


def stamped(chunk: IndexedChunk, stamp: Readers | IndexedChunk) -> IndexedChunk:
    """`chunk` with another stamp: a `Readers` (its source's token added), or the stamp
    another copy of the chunk already took."""
    if isinstance(stamp, IndexedChunk):
        fields = (stamp.readers, stamp.readers_fp, stamp.readers_reason)
    else:
        token = source_token(chunk.source)
        fields = ((*stamp.principals, token), stamp.fingerprint, stamp.reason)
    return chunk.model_copy(update=dict(zip(READER_FIELDS, fields, strict=True)))


def _last_per_doc(events: Sequence[FileEvent]) -> list[FileEvent]:
    """Coalesce a batch: only the newest event per doc matters (order of first sight kept),
    except that a change of permissions never hides a change of content before it (an
    upsert stamps the document anew)."""
    return _newest(events, lambda e: e)


def _last_work_per_doc(works: Sequence[ParsedWork]) -> list[ParsedWork]:
    return _newest(works, lambda w: w.event)


T = TypeVar("T")


def _newest(items: Sequence[T], event_of: Callable[[T], FileEvent]) -> list[T]:
    latest: dict[str, T] = {}
    for item in items:
        event = event_of(item)
        held = latest.get(event.doc_id)
        if held is None or event.kind != "permissions" or event_of(held).kind == "permissions":
            latest[event.doc_id] = item
    return list(latest.values())
