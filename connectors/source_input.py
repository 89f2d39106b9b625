"""The bytewax input of the sync flow: every source's catch-up scan, then its changes.

The catch-up scan (`plan_catch_up`) is what makes a restart converge: every listed document
whose fingerprint is not exactly what the index recorded for its doc is re-read; every
indexed doc no longer listed is deleted — unless that would delete more than a set fraction
of a source's documents (a folder unmounted, a ref that suddenly lists nothing), in which
case the mass-delete guard holds them back. While watching, a folder's touched paths are
debounced and turned into events by the folder; a git source touches `""` when its ref
moved, and its whole tree is planned again the same way as the catch-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from ragstream.connectors.fs import (
    FolderSource,
    PathFilter,
    _Debouncer,
    fingerprint_of,
)
from ragstream.connectors.protocols import STALE_FINGERPRINT, Source, SourceEntry
from ragstream.core.ids import partition_of
from ragstream.core.models import FileEvent, FileFingerprint, GuardReport
from ragstream.core.permissions import UserDb

KnownDocs = Mapping[str, set[str]]  # doc_id -> the version tokens the index holds
KnownStamps = Mapping[str, set[str]]  # doc_id -> permission stamps (fingerprints) it holds
RELIST = ""  # the locator a source touches to be listed again as a whole
T = TypeVar("T")


class PendingRetries:
    """Documents the writer could not index for now (the embedding endpoint is down), handed
    back to the watching source: each is listed again once its wait is over, and the wait
    doubles for a document that stays pending (`first_s` up to `max_s`). Thread-safe: the
    writer adds, the source partition takes what is due."""

    def __init__(self, first_s: float = 2.0, max_s: float = 60.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}
        self._tries: dict[str, int] = {}

    def add(self, doc_id: str, now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        with self._lock:
            tries = self._tries.get(doc_id, 0)
            self._tries[doc_id] = tries + 1
            self._due[doc_id] = at + min(self.max_s, self.first_s * 2.0**tries)

    def done(self, doc_id: str) -> None:
        """The document was written (or dead-lettered): its back-off starts over."""
        with self._lock:
            self._tries.pop(doc_id, None)
            self._due.pop(doc_id, None)

    def take_due(self, now: float | None = None) -> set[str]:
        at = time.monotonic() if now is None else now
        with self._lock:
            due = {d for d, when in self._due.items() if when <= at}
            for d in due:
                del self._due[d]
            return due


@dataclass(frozen=True)
class ScanSummary:
    """What one source's catch-up scan found: documents seen, events planned, the guard."""

    source: str
    files_seen: int
    events: int
    guard: GuardReport | None


ScanHandler = Callable[[ScanSummary], None]


def plan_catch_up(
    source: Source,
    found: Sequence[SourceEntry],
    known: KnownDocs,
    max_delete_fraction: float,
    min_docs_for_guard: int,
    allow_mass_delete: bool,
    stamps: KnownStamps | None = None,
    stamp: Callable[[SourceEntry], str] | None = None,
) -> tuple[list[FileEvent], GuardReport | None]:
    """Events that make the index equal the source (pure, given the listing and the index).
    With `stamps` (where sources mirror permissions), an unchanged document whose permission
    stamp (`stamp`, its fingerprint now) is not the one the index holds gets a
    "permissions" event: re-stamped, not re-read."""
    events: list[FileEvent] = []
    present = set()
    for entry in found:
        did, fp = entry.doc_id, entry.fingerprint
        present.add(did)
        if fp is None or known.get(did) != {fp.token}:
            events.append(_event(source, did, entry.locator, "upsert", fp))
        elif stamps is not None and stamp is not None and stamps.get(did) != {stamp(entry)}:
            events.append(_event(source, did, entry.locator, "permissions", fp))
    prefix = f"{source.name}:"
    indexed = [d for d in known if d.startswith(prefix)]
    gone = sorted(d for d in indexed if d not in present)
    if (
        gone
        and not allow_mass_delete
        and len(indexed) >= min_docs_for_guard
        and (len(gone) > max_delete_fraction * len(indexed))
    ):
        reason = (
            f"{len(gone)} of {len(indexed)} documents of source {source.name!r} vanished "
            f"(> {max_delete_fraction:.0%}); is {source.root} unmounted (or its ref emptied)? "
            "nothing was deleted; rerun with --allow-mass-delete to proceed"
        )
        guard = GuardReport(
            source=source.name,
            would_delete=len(gone),
            docs_indexed=len(indexed),
            max_fraction=max_delete_fraction,
            reason=reason,
        )
        return events, guard
    for did in gone:
        events.append(_event(source, did, source.locator(did[len(prefix) :]), "delete", None))
    return events, None


def _one(held: set[T]) -> T | None:
    """The one value a document's points agree on, else None."""
    return next(iter(held)) if len(held) == 1 else None


def _event(source: Source, did: str, loc: str, kind: str, fp: FileFingerprint | None) -> FileEvent:
    return FileEvent.model_validate(
        dict(source=source.name, root=source.root, path=loc, doc_id=did, kind=kind, fingerprint=fp)
    )


@dataclass(frozen=True)
class SourceFeedConfig:
    sources: tuple[Source, ...]
    path_filter: PathFilter
    watch: bool
    debounce_s: float = 0.3
    settle_s: float = 0.05
    batch_size: int = 32
    max_delete_fraction: float = 0.5
    min_docs_for_guard: int = 10
    allow_mass_delete: bool = False
    partition: tuple[int, int] = (0, 1)  # (index, count): own only these documents' events
    # documents the writer left pending, listed again when due (watch only)
    retries: PendingRetries | None = field(default=None, compare=False)

    def owns(self, doc: str) -> bool:
        index, count = self.partition
        return partition_of(doc, count) == index


class SourcePartition(StatefulSourcePartition[FileEvent, None]):
    """The one partition that owns the watchers and the catch-up scan: however many bytewax
    workers or processes run the flow, sources are listed and watched once, by the store
    owner.

    State lives in the stores (they are the truth), so `snapshot` is None: a resumed flow
    (bytewax recovery) or a restart re-runs the catch-up scan, which re-derives from
    fingerprints exactly what the index is missing — including events that were queued or
    still debouncing when the process stopped. A snapshot could only repeat that, staler.
    """

    def __init__(
        self,
        cfg: SourceFeedConfig,
        known: Callable[[], KnownDocs],
        on_scan: ScanHandler,
        stamps: Callable[[], KnownStamps] | None = None,
        listings: Mapping[int, Future[list[SourceEntry]]] | None = None,
    ) -> None:
        self._cfg, self._known_fn, self._on_scan = cfg, known, on_scan
        self._listings = dict(listings or {})  # source index -> its listing, begun earlier
        self._stamps_fn = stamps  # None: no source mirrors permissions
        self._queue: list[FileEvent] = []
        self._known: dict[str, str | None] = {}
        self._stamps: dict[str, str | None] = {}  # doc_id -> the one stamp the index holds
        self._planned = False
        self._debouncer = _Debouncer(cfg.debounce_s, cfg.settle_s)
        self._stops: list[Callable[[], None]] = []
        if cfg.watch:
            for i, source in enumerate(cfg.sources):
                self._stops.append(source.watch(self._toucher(i)))

    def _toucher(self, index: int) -> Callable[[str, bool], None]:
        def touch(locator: str, completed: bool) -> None:
            self._debouncer.touch(f"{index}\0{locator}", completed=completed)

        return touch

    def _plan(self) -> None:
        owns = self._cfg.owns  # another partition's documents are another replica's business
        known = {d: fps for d, fps in self._known_fn().items() if owns(d)}
        stamps = None
        if self._stamps_fn is not None:
            stamps = {d: held for d, held in self._stamps_fn().items() if owns(d)}
            self._stamps = {d: _one(held) for d, held in stamps.items()}
        for i, source in enumerate(self._cfg.sources):
            listed = self._listings.pop(i, None)
            entries = listed.result() if listed is not None else None
            self._queue.extend(self._plan_source(source, known, stamps, entries))
        for did, fps in known.items():
            self._known[did] = _one(fps)
        for event in self._queue:
            if event.kind != "permissions":
                self._remember(event)
        self._planned = True

    def _plan_source(
        self,
        source: Source,
        known: KnownDocs,
        stamps: KnownStamps | None = None,
        entries: Iterable[SourceEntry] | None = None,
    ) -> list[FileEvent]:
        """The events that bring the index to `entries` (default: the source listed now)."""
        wanted, owns = self._cfg.path_filter.wanted, self._cfg.owns
        listed = source.entries() if entries is None else entries
        found = [e for e in listed if wanted(e.rel) and owns(e.doc_id)]
        db = UserDb.system() if stamps is not None else UserDb()
        events, guard = plan_catch_up(
            source,
            found,
            known,
            self._cfg.max_delete_fraction,
            self._cfg.min_docs_for_guard,
            self._cfg.allow_mass_delete,
            stamps,
            lambda entry: source.stamp(entry.locator, db).fingerprint,
        )
        self._on_scan(ScanSummary(source.name, len(found), len(events), guard))
        return events

    def _remember(self, event: FileEvent, stamp: str | None = None) -> None:
        self._stamps[event.doc_id] = stamp  # an upsert is stamped anew when it is written
        if event.kind == "delete":
            self._known.pop(event.doc_id, None)
            self._stamps.pop(event.doc_id, None)
        else:
            fp = event.fingerprint
            self._known[event.doc_id] = fp.token if fp else None

    def _events_for(self, raw: str) -> Iterator[FileEvent]:
        index, _, loc = raw.partition("\0")
        source = self._cfg.sources[int(index)]
        if loc != RELIST:
            changed = list(source.changed(loc, self._known))
            yield from changed
            if self._stamps_fn is not None and isinstance(source, FolderSource):
                yield from self._restamps(source, loc, {e.doc_id for e in changed})
            return
        yield from self._plan_source(source, self._known_now())

    def _known_now(self) -> KnownDocs:
        """What this partition believes the index holds (a stale mark where it does not know)."""
        return {d: {k} if k else {STALE_FINGERPRINT} for d, k in self._known.items()}

    def _retry_due(self) -> None:
        """Pending documents whose wait is over: forgotten, then their sources touched to be
        listed again (`RELIST`), so each is read and offered to the writer anew."""
        retries = self._cfg.retries
        due = retries.take_due() if retries is not None else set()
        for did in due:
            if did in self._known:
                self._known[did] = None
        for i, source in enumerate(self._cfg.sources):
            if any(d.startswith(f"{source.name}:") for d in due):
                self._toucher(i)(RELIST, True)

    def _restamps(self, source: FolderSource, loc: str, changed: set[str]) -> Iterator[FileEvent]:
        """The "permissions" events of the documents at or under a touched path (a file's
        or a folder's permissions changed) whose stamp is not the one the index holds."""
        db = UserDb.system()
        for did in source.doc_ids_at(loc, self._known):
            if did in changed:
                continue
            locator = source.locator(did.partition(":")[2])
            now = source.stamp(locator, db).fingerprint
            if self._stamps.get(did) != now:
                yield _event(source, did, locator, "permissions", fingerprint_of(Path(locator)))
                self._stamps[did] = now

    def next_batch(self) -> list[FileEvent]:
        if not self._planned:
            self._plan()
        if not self._queue and self._stops:
            self._retry_due()
            for raw in self._debouncer.ready():
                for event in filter(lambda e: self._cfg.owns(e.doc_id), self._events_for(raw)):
                    if event.kind == "permissions":
                        self._queue.append(event)  # its new stamp is remembered already
                        continue
                    self._remember(event)
                    self._queue.append(event)
        if self._queue:
            batch, self._queue = (
                self._queue[: self._cfg.batch_size],
                self._queue[self._cfg.batch_size :],
            )
            return batch
        if not self._cfg.watch:
            raise StopIteration
        return []

    def next_awake(self) -> datetime | None:
        if self._queue or not self._cfg.watch:
            return None
        return datetime.now(UTC) + timedelta(milliseconds=50)

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        stops, self._stops = self._stops, []  # idempotent: bytewax or our owner
        for stop in stops:
            stop()


class SourceFeed(FixedPartitionedSource[FileEvent, None]):
    """bytewax input over every source: a single partition (named `folders`).

    `owns` says whether this process owns the data dir: only the owner lists the partition
    (the scan needs the stores' fingerprints), so bytewax builds it on one of the owner's
    workers and never in another process of a `-p` cluster.
    """

    PART = "folders"  # the name recovery snapshots were taken under

    def __init__(
        self,
        cfg: SourceFeedConfig,
        known: Callable[[], KnownDocs],
        on_scan: ScanHandler = lambda summary: None,
        owns: Callable[[], bool] = lambda: True,
        stamps: Callable[[], KnownStamps] | None = None,
    ) -> None:
        self._cfg, self._known, self._on_scan, self._owns = cfg, known, on_scan, owns
        self._stamps = stamps  # the index's permission stamps; None: nothing mirrored
        self._built: list[SourcePartition] = []
        self._listings: dict[int, Future[list[SourceEntry]]] = {}

    def start_listing(self) -> None:
        """Begin listing every source now, each on a thread of its own, so that a store's
        round trips overlap the stores opening and the flow starting; the catch-up scan then
        plans from these listings. A one-shot pass only: a watching pass lists after its
        watchers start, so no change falls between the two."""
        if self._cfg.watch or not self._owns():
            return
        for i, source in enumerate(self._cfg.sources):
            self._listings[i] = _listed_on_a_thread(source)

    def list_parts(self) -> list[str]:
        return [self.PART] if self._owns() else []

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> SourcePartition:
        listings, self._listings = self._listings, {}
        part = SourcePartition(self._cfg, self._known, self._on_scan, self._stamps, listings)
        self._built.append(part)
        return part

    def close(self) -> None:
        """Stop the watchers: bytewax closes partitions only when input ends, not on Ctrl-C."""
        for part in self._built:
            part.close()
        self._built.clear()


def _listed_on_a_thread(source: Source) -> Future[list[SourceEntry]]:
    """`source.entries()` read on a daemon thread (a store that hangs never holds the
    process at exit); its error, if any, is raised where the result is taken."""
    listed: Future[list[SourceEntry]] = Future()

    def run() -> None:
        try:
            listed.set_result(list(source.entries()))
        except BaseException as err:  # handed over whole: the planner raises it
            listed.set_exception(err)

    threading.Thread(target=run, name=f"ragstream-list-{source.name}", daemon=True).start()
    return listed
