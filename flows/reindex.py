"""Blue/green reindex on an embedder upgrade: build beside, dual-write, gate, swap.

See docs/architecture.md, "Blue/green reindex".

    start     open the new embedder's collection next to the live one; record the pair
    backfill  make the other side hold exactly the live side's live chunks, page by page,
              from the stored chunk text (no re-parsing); resumable by construction: a point
              the other side already holds with the same payload is skipped, and a vector
              for a content hash it already has is reused, so a restart re-embeds nothing
    promote   gate (coverage, optional eval margin), then one atomic pointer/alias swap
    rollback  swap back; both sides keep receiving every write until cleanup or abort
    cleanup   drop the retired side (after a promote); abort drops the new one (before)

Every step runs in the process that owns the stores. Store reads and writes happen under
`IndexSides.lock`, so a backfill page's writes, an index batch, a swap and a query served from
the same process never interleave; a page is *encoded* outside the lock (ingest and queries go
on meanwhile) and written as the live side holds it at write time, so nothing an index batch
tombstoned in between is resurrected.
The record in `<state_dir>/reindex.json` is rewritten atomically after every step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ragstream.core.errors import RefusedError
from ragstream.core.models import (
    GateResult,
    IndexedChunk,
    ReindexProgress,
    ReindexRecord,
    ReindexSide,
)
from ragstream.core.telemetry import span
from ragstream.flows.sides import IndexSides, Side
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import open_embedder

# live chunks per backfill step: one encode call (sorted by length inside it), one write and
# one progress report; a backfill killed mid-page embeds that page again when it resumes
PAGE = 256
SAVE_EVERY_S = 2.0  # how often backfill progress is written to reindex.json


class ReindexError(RefusedError):
    """A reindex command that does not apply in the current state (and changed nothing)."""


ProgressHandler = Callable[[ReindexProgress], None]
EvalScore = Callable[[Side], float]  # nDCG@10 of a side on an eval dataset


def _side(side: Side) -> ReindexSide:
    return ReindexSide(collection=side.collection, embedder=side.embedder.version, spec=side.spec)


def _record(sides: IndexSides) -> ReindexRecord:
    if sides.record is None:
        raise ReindexError("no reindex is open; start one with `reindex start --embedder NAME`")
    return sides.record


def start(sides: IndexSides, spec: str) -> ReindexRecord:
    """Open the collection of embedder `spec` beside the live one and record the pair."""
    with sides.lock, span("reindex.start", embedder=spec) as sp:
        if sides.record is not None:
            r = sides.record
            raise ReindexError(
                f"a reindex is already open ({r.old.collection} -> {r.new.collection}, "
                f"{r.phase}); promote and cleanup, or abort it first"
            )
        live = sides.live
        if open_embedder(spec, sides.settings).version == live.embedder.version:
            raise ReindexError(f"{spec!r} is the embedder the live collection already uses")
        new = sides.open_side(spec)
        record = ReindexRecord(
            old=_side(live),
            new=_side(new),
            phase="backfilling",
            started_at=time.time(),
            progress=ReindexProgress(total=live.vectors.count("live"), updated_at=time.time()),
        )
        sides.set_record(record)
        sp.set_attribute("collection", new.collection)
        return record


def _comparable(chunk: IndexedChunk) -> IndexedChunk:
    """A point as both sides should hold it: everything but the embedder stamp."""
    return chunk.model_copy(update={"embedder": ""})


@dataclass
class _Pass:
    """Counters of one backfill pass (progress is cumulative over restarts for `embedded`)."""

    base: ReindexProgress
    started: float
    total: int
    done: int = 0
    embedded: int = 0
    reused: int = 0
    saved: float = 0.0

    def progress(self) -> ReindexProgress:
        elapsed = max(time.time() - self.started, 1e-9)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        return ReindexProgress(
            done=self.done,
            total=self.total,
            embedded=self.base.embedded + self.embedded,
            pass_embedded=self.embedded,
            reused=self.base.reused + self.reused,
            rate=round(rate, 2),
            eta_s=round(left / rate, 1) if rate > 0 else None,
            updated_at=time.time(),
        )


@dataclass
class _PagePlan:
    """What one page needs on `dst`: the points to (re)write and a vector per content hash."""

    todo: list[IndexedChunk]
    texts: dict[str, str]  # content hash -> embedded text, for every hash of `todo`
    vectors: dict[str, list[float]]  # reused from `dst` so far; encoded ones are added

    @property
    def missing(self) -> list[str]:
        return [h for h in self.texts if h not in self.vectors]


def _plan_page(page: list[IndexedChunk], dst: Side) -> _PagePlan:
    """Points of `page` that `dst` lacks or holds differently, and the vectors it already has."""
    have = {c.point_id: _comparable(c) for c in dst.vectors.get([c.point_id for c in page])}
    todo = [c for c in page if have.get(c.point_id) != _comparable(c)]
    texts = {c.content_hash: embedding_text(c.context, c.text) for c in todo}
    return _PagePlan(todo, texts, dst.vectors.vectors_for_hashes(texts) if texts else {})


def _encode(plan: _PagePlan, dst: Side, batch_size: int) -> int:
    """Encode what `dst` has no vector for (outside the lock: ingest and queries go on)."""
    missing = plan.missing
    if missing:
        texts = [plan.texts[h] for h in missing]
        matrix = dst.embedder.encode_passages(texts, batch_size=batch_size)
        for h, row in zip(missing, np.asarray(matrix), strict=True):
            plan.vectors[h] = [float(x) for x in row]
    return len(missing)


def _write_page(plan: _PagePlan, src: Side, dst: Side) -> None:
    """Write the planned points as `src` holds them *now* (under the lock): one tombstoned or
    changed by an index batch while the page was being encoded is not resurrected."""
    fresh = {c.point_id: c for c in src.vectors.get([c.point_id for c in plan.todo])}
    write = [
        fresh[c.point_id]
        for c in plan.todo
        if c.point_id in fresh and fresh[c.point_id].status == "live"
    ]
    if write:
        dst.vectors.upsert(write, [plan.vectors[c.content_hash] for c in write])


def backfill(
    sides: IndexSides,
    *,
    batch_size: int = 64,
    on_progress: ProgressHandler | None = None,
    stop: threading.Event | None = None,
) -> ReindexRecord:
    """One reconcile pass from the live side to the other side (see module docstring).

    Returns the record; its phase becomes `ready` when a pass completes while backfilling.
    Stops early (resumable) when `stop` is set.
    """
    with sides.lock:
        record = _record(sides)
        live, others = sides.live, sides.others
    (dst,) = others
    src = live
    with span("reindex.backfill", src=src.collection, dst=dst.collection) as sp:
        run = _Pass(base=record.progress, started=time.time(), total=src.vectors.count("live"))
        seen: set[str] = set()
        pages = src.vectors.live_pages(PAGE)
        while True:
            if stop is not None and stop.is_set():
                _report(sides, run, on_progress, force=True)
                sp.set_attribute("stopped", True)
                return _record(sides)
            with sides.lock:
                page = next(pages, None)
                if page is None:
                    break
                plan = _plan_page(page, dst)
            embedded = _encode(plan, dst, batch_size)
            with sides.lock:
                _write_page(plan, src, dst)
            seen.update(c.point_id for c in page)
            run.done += len(page)
            run.embedded += embedded
            run.reused += len(page) - embedded
            _report(sides, run, on_progress)
        stale = _retire_stale(sides, src, dst, seen)
        sp.set_attribute("embedded", run.embedded)
        sp.set_attribute("stale_tombstoned", stale)
        with sides.lock:
            current = _record(sides)
            phase = "ready" if current.phase == "backfilling" else current.phase
            done = current.model_copy(update={"phase": phase, "progress": run.progress()})
            sides.set_record(done)
        if on_progress is not None:
            on_progress(done.progress)
        return done


def _report(
    sides: IndexSides, run: _Pass, on_progress: ProgressHandler | None, force: bool = False
) -> None:
    progress = run.progress()
    if on_progress is not None:
        on_progress(progress)
    if force or progress.updated_at - run.saved >= SAVE_EVERY_S:
        run.saved = progress.updated_at
        with sides.lock:
            sides.set_record(_record(sides).model_copy(update={"progress": progress}))


def _retire_stale(sides: IndexSides, src: Side, dst: Side, seen: set[str]) -> int:
    """Tombstone points live on `dst` but not on `src`. A point not seen in the pass may have
    been dual-written after the scan passed its id, so it is re-checked on `src` first."""
    stale = 0
    for page in dst.vectors.live_pages(PAGE):
        candidates = [c.point_id for c in page if c.point_id not in seen]
        if not candidates:
            continue
        with sides.lock:
            alive = {c.point_id for c in src.vectors.get(candidates) if c.status == "live"}
            gone = [i for i in candidates if i not in alive]
            if gone:
                dst.vectors.tombstone(gone, time.time())
                stale += len(gone)
    return stale


def coverage(src: Side, dst: Side) -> tuple[int, int]:
    """(missing, stale): live points of `src` that `dst` lacks or holds differently, and live
    points of `dst` that `src` does not hold live. Read-only; callers hold the lock."""
    want = {c.point_id: _comparable(c) for page in src.vectors.live_pages() for c in page}
    stale = 0
    for page in dst.vectors.live_pages():
        for c in page:
            if want.get(c.point_id) == _comparable(c):
                del want[c.point_id]
            elif c.point_id not in want:
                stale += 1
    return len(want), stale


def promote(
    sides: IndexSides, *, eval_score: EvalScore | None = None, eval_margin: float = 0.01
) -> ReindexRecord:
    """Gate, then point queries at the new side. A refused promote changes nothing but the
    gate result in the record (so `status` shows why)."""
    with sides.lock, span("reindex.promote") as sp:
        record = _record(sides)
        if sides.live.collection == record.new.collection:
            raise ReindexError(f"{record.new.collection} is already live")
        old, new = sides.live, sides.side(record.new.collection)
        missing, stale = coverage(old, new)
        gate: dict[str, object] = {"missing": missing, "stale": stale, "at": time.time()}
        reasons = []
        if missing or stale:
            reasons.append(
                f"coverage: the new side lacks {missing} live chunk(s) of the old side and "
                f"holds {stale} it should not; let the backfill finish (`reindex run`)"
            )
        elif eval_score is not None:
            before, after = eval_score(old), eval_score(new)
            gate |= {"eval_metric": "ndcg@10", "eval_old": before, "eval_new": after}
            gate["eval_margin"] = eval_margin
            if after < before - eval_margin:
                reasons.append(
                    f"eval: nDCG@10 {after:.4f} on the new side is below the old side's "
                    f"{before:.4f} by more than {eval_margin}"
                    if eval_margin >= 0  # a negative margin is a gain the new side must show
                    else f"eval: nDCG@10 {after:.4f} on the new side does not beat the old "
                    f"side's {before:.4f} by {-eval_margin}"
                )
        result = GateResult.model_validate(
            {**gate, "passed": not reasons, "reason": "; ".join(reasons) or "ok"}
        )
        sp.set_attribute("gate_passed", result.passed)
        if reasons:
            sides.set_record(record.model_copy(update={"gate": result}))
            raise ReindexError(f"promote refused, live side untouched: {result.reason}")
        sides.point_live(new.collection)
        done = record.model_copy(
            update={"phase": "promoted", "promoted_at": time.time(), "gate": result}
        )
        sides.set_record(done)
        return done


def rollback(sides: IndexSides) -> ReindexRecord:
    """Point queries back at the old side (kept current by dual-write since the promote)."""
    with sides.lock, span("reindex.rollback"):
        record = _record(sides)
        if record.phase != "promoted":
            raise ReindexError(f"nothing to roll back: the reindex is {record.phase}")
        sides.point_live(record.old.collection)
        done = record.model_copy(update={"phase": "rolled_back"})
        sides.set_record(done)
        return done


def finish(sides: IndexSides, drop: Callable[[str], None], *, retire: str) -> ReindexRecord:
    """Close the reindex and drop one side: `retire="old"` (cleanup, after a promote) or
    `"new"` (abort, while the old side serves). `drop` removes a closed collection."""
    with sides.lock, span("reindex.finish", retire=retire):
        record = _record(sides)
        promoted = record.phase == "promoted"
        if retire == "old" and not promoted:
            raise ReindexError(
                f"cleanup drops the retired side after a promote; the reindex is {record.phase}"
            )
        if retire == "new" and promoted:
            raise ReindexError("the new side is live: roll back first, then abort")
        victim = record.old if retire == "old" else record.new
        sides.set_record(None)
        sides.close_side(victim.collection)
        drop(victim.collection)
        return record


class BackgroundBackfill:
    """Backfill passes in a daemon thread of a long-running process (`watch`): one when the
    process starts with a reindex open (finishing or repairing what a crash left), and one
    after each `kick()` (a reindex started through this process's endpoint)."""

    def __init__(self, sides: IndexSides, batch_size: int = 64) -> None:
        self._sides, self._batch = sides, batch_size
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reindex-backfill", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> BackgroundBackfill:
        self._thread.start()
        if self._sides.record is not None:
            self.kick()
        return self

    def kick(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set() or self._sides.record is None:
                continue
            try:
                backfill(self._sides, batch_size=self._batch, stop=self._stop)
            except BaseException as err:  # keep the flow alive; status shows the record
                self.error = err

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60)
