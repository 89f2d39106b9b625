"""The two batch steps of the sync flow: read+parse, then chunk → diff → embed → write.

Both are plain methods over lists, so they can be tested without bytewax and are wired
into the dataflow with `flat_map_batch` (one call per bytewax batch, batching embedding
across documents). Write order per batch (DESIGN §3): new/changed points to the lexical
index, then to the vector store (whose per-point file fingerprint is the record of "this
doc is done"), then the fingerprint of kept points, and only then tombstones — lexical
first, vectors last. A crash anywhere leaves a doc with mixed fingerprints or an old
fingerprint, which the next catch-up scan re-diffs, so every pass converges.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from connectors.fs import link_problem
from connectors.protocols import LexicalIndex, VectorStore
from connectors.state import DeadLetterBook, RedactionBook
from core.models import (
    Chunk,
    DeadLetter,
    DocOutcome,
    FileEvent,
    IndexedChunk,
    ParsedDocument,
    Redaction,
)
from core.telemetry import span
from operators.chunk import ChunkerConfig, chunk_document
from operators.diff import DocDiff, diff_document
from operators.embed import Embedder
from operators.parse import ParseError, parse_file
from operators.secrets import redact_document


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


@dataclass
class Indexer:
    embedder: Embedder
    vectors: VectorStore
    lexical: LexicalIndex
    dead_letters: DeadLetterBook
    redactions: RedactionBook
    chunker: ChunkerConfig
    tenants: dict[str, str]  # source name -> tenant
    max_file_bytes: int
    parse_timeout_s: float | None = None
    batch_size: int = 64
    lock: AbstractContextManager[object] = field(default_factory=nullcontext)

    # ---- step 1: read + parse -------------------------------------------------------
    def parse_batch(self, events: Sequence[FileEvent]) -> list[ParsedWork]:
        out = []
        with span("ingest.parse", docs_in=len(events)) as sp:
            for event in _last_per_doc(events):
                out.append(self._parse_one(event))
            sp.set_attribute("dead_letters", sum(w.dead is not None for w in out))
        return out

    def _parse_one(self, event: FileEvent) -> ParsedWork:
        if event.kind == "delete":
            return ParsedWork(event)
        fp = event.fingerprint
        problem = link_problem(Path(event.path), Path(event.root))
        if problem is not None:
            return ParsedWork(event, dead=self._letter(event, "read", problem))
        if fp is not None and fp.size > self.max_file_bytes:
            reason = f"file too large: {fp.size} bytes > limit {self.max_file_bytes}"
            return ParsedWork(event, dead=self._letter(event, "read", reason))
        if fp is None:
            return ParsedWork(
                event, dead=self._letter(event, "read", "file vanished before it could be read")
            )
        try:
            doc = parse_file(Path(event.path), event.doc_id, event.source, fp, self.parse_timeout_s)
        except ParseError as err:
            return ParsedWork(event, dead=self._letter(event, err.stage, err.reason))
        except Exception as err:  # a parser bug must not kill the flow: dead-letter it
            reason = f"unexpected {type(err).__name__}: {err}"
            return ParsedWork(event, dead=self._letter(event, "parse", reason))
        doc, kinds = redact_document(doc)
        return ParsedWork(event, doc=doc, redactions=kinds)

    @staticmethod
    def _letter(event: FileEvent, stage: str, reason: str) -> DeadLetter:
        return DeadLetter.model_validate(
            dict(
                doc_id=event.doc_id,
                path=event.path,
                stage=stage,
                reason=reason,
                at=time.time(),
                fingerprint=event.fingerprint,
            )
        )

    # ---- step 2: chunk → diff → embed → write ----------------------------------------
    def index_batch(self, works: Sequence[ParsedWork]) -> list[DocOutcome]:
        with self.lock:
            return self._index_batch(works)

    def _index_batch(self, works: Sequence[ParsedWork]) -> list[DocOutcome]:
        plans = [_DocPlan(w) for w in _last_work_per_doc(works)]
        docs = [p for p in plans if p.work.doc is not None]
        with span("ingest.chunk", docs=len(docs)) as sp:
            for plan in docs:
                assert plan.work.doc is not None
                plan.chunks = chunk_document(
                    plan.work.doc, self.chunker, self.embedder.count_tokens
                )
            sp.set_attribute("chunks_out", sum(len(p.chunks) for p in docs))
        with span("ingest.diff", docs=len(plans)) as sp:
            for plan in plans:
                if plan.work.dead is None:
                    plan.stored = self.vectors.live_chunks(plan.work.event.doc_id)
                    plan.diff = diff_document(plan.chunks, plan.stored)
            _diff_attributes(sp, plans)
        vectors, encoded_by = self._embed([p for p in plans if p.diff is not None])
        outcomes = self._write(plans, vectors, encoded_by)
        self.dead_letters.save()
        self.redactions.save()
        return outcomes

    def _embed(self, plans: Sequence[_DocPlan]) -> tuple[dict[str, list[float]], dict[str, str]]:
        """Vectors for every added chunk: reused from the store by content hash, else encoded.

        Returns hash -> vector and hash -> doc_id that caused the encode (for the report).
        """
        needed: dict[str, tuple[str, str]] = {}
        for plan in plans:
            assert plan.diff is not None
            for chunk in plan.diff.add:
                needed.setdefault(chunk.content_hash, (plan.work.event.doc_id, chunk.text))
        with span("ingest.embed", chunks_in=len(needed), model=self.embedder.version.name) as sp:
            vectors = self.vectors.vectors_for_hashes(needed) if needed else {}
            todo = [h for h in needed if h not in vectors]
            if todo:
                matrix = self.embedder.encode_passages(
                    [needed[h][1] for h in todo], batch_size=self.batch_size
                )
                for h, row in zip(todo, np.asarray(matrix), strict=True):
                    vectors[h] = [float(x) for x in row]
            sp.set_attribute("reembedded", len(todo))
            sp.set_attribute("reused", len(needed) - len(todo))
        return vectors, {h: needed[h][0] for h in todo}

    def _record(self, chunk: Chunk, doc: ParsedDocument) -> IndexedChunk:
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
            section_path=chunk.section_path,
            page=chunk.page,
            char_start=chunk.char_start,
            char_end=chunk.char_end,
            embedder=self.embedder.version.slug,
            file_size=doc.fingerprint.size,
            file_mtime_ns=doc.fingerprint.mtime_ns,
            tenant=self.tenants.get(doc.source, ""),
        )

    def _write(
        self, plans: Sequence[_DocPlan], vectors: dict[str, list[float]], encoded_by: dict[str, str]
    ) -> list[DocOutcome]:
        adds: list[IndexedChunk] = []
        moves: list[IndexedChunk] = []
        keep_fps: list[tuple[list[str], int, int]] = []
        tombstones: list[str] = []
        outcomes = []
        for plan in plans:
            outcome, doc_adds, doc_moves = self._plan_writes(plan, encoded_by)
            outcomes.append(outcome)
            adds += doc_adds
            moves += doc_moves
            if plan.diff is None:
                continue
            tombstones += plan.diff.tombstone
            if plan.work.doc is not None:
                fp = plan.work.doc.fingerprint
                held = {c.point_id: c.fingerprint for c in plan.stored}
                stale = [c.point_id for c in plan.diff.keep if held[c.point_id] != fp]
                if stale:
                    keep_fps.append((stale, fp.size, fp.mtime_ns))
        with span("ingest.write", upserts=len(adds), moves=len(moves), tombstones=len(tombstones)):
            if adds or moves:
                self.lexical.upsert(adds + moves)
                self.lexical.commit()
                if adds:
                    self.vectors.upsert(adds, [vectors[c.content_hash] for c in adds])
                if moves:
                    self.vectors.set_positions(moves)
            for ids, size, mtime in keep_fps:
                self.vectors.set_fingerprint(ids, size, mtime)
            if tombstones:
                now = time.time()
                self.lexical.tombstone(tombstones, now)
                self.lexical.commit()
                self.vectors.tombstone(tombstones, now)
        return outcomes

    def _plan_writes(
        self, plan: _DocPlan, encoded_by: dict[str, str]
    ) -> tuple[DocOutcome, list[IndexedChunk], list[IndexedChunk]]:
        event = plan.work.event
        if plan.work.dead is not None:
            self.dead_letters.put(plan.work.dead)
            return DocOutcome(doc_id=event.doc_id, dead_letter=plan.work.dead), [], []
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
            return (
                DocOutcome(
                    doc_id=event.doc_id,
                    deleted=bool(diff.tombstone),
                    chunks_tombstoned=len(diff.tombstone),
                ),
                [],
                [],
            )
        embedded = sum(1 for c in diff.add if encoded_by.pop(c.content_hash, None) == event.doc_id)
        outcome = DocOutcome(
            doc_id=event.doc_id,
            changed=not diff.unchanged,
            chunks_live=len(plan.chunks),
            chunks_embedded=embedded,
            chunks_reused=len(diff.add) - embedded,
            chunks_moved=len(diff.move),
            chunks_tombstoned=len(diff.tombstone),
            redactions=kinds,
        )
        return (
            outcome,
            [self._record(c, doc) for c in diff.add],
            [self._record(c, doc) for c in diff.move],
        )


def _diff_attributes(sp: object, plans: Sequence[_DocPlan]) -> None:
    diffs = [p.diff for p in plans if p.diff is not None]
    for name in ("keep", "move", "add", "tombstone"):
        sp.set_attribute(name, sum(len(getattr(d, name)) for d in diffs))  # type: ignore[attr-defined]


def _last_per_doc(events: Sequence[FileEvent]) -> list[FileEvent]:
    """Coalesce a batch: only the newest event per doc matters (order of first sight kept)."""
    latest = {e.doc_id: e for e in events}
    return list(latest.values())


def _last_work_per_doc(works: Sequence[ParsedWork]) -> list[ParsedWork]:
    latest = {w.event.doc_id: w for w in works}
    return list(latest.values())
