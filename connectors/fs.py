"""Folder source: a catch-up scan reconciled with the index, then live watchdog events.

The scan is what makes a restart converge: every file whose (size, mtime) is not exactly
what the index recorded for its doc is re-read; every indexed doc whose file is gone is
deleted — unless that would delete more than a set fraction of a source's documents (the
folder was probably unmounted), in which case the mass-delete guard holds them back.
Live events are debounced per path: a file saved in bursts, or written as temp + rename,
is read once after it has been quiet for `debounce_s`.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path

import xxhash
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from ragstream.core.ids import doc_id as make_doc_id
from ragstream.core.ids import partition_of
from ragstream.core.models import FileEvent, FileFingerprint, GuardReport
from ragstream.core.settings import SourceConfig

KnownDocs = Mapping[str, set[tuple[int, int]]]  # doc_id -> fingerprints the index holds


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """`**/` = any number of directories, `*` = within one path segment, `?` = one char."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.IGNORECASE)


def glob_match(rel_path: str, pattern: str) -> bool:
    return _glob_regex(pattern).match(rel_path) is not None


@dataclass(frozen=True)
class PathFilter:
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def wanted(self, rel_path: str) -> bool:
        return self.why_not(rel_path) is None

    def why_not(self, rel_path: str) -> str | None:
        """None for a file the source indexes, else why not (the ledger's 'excluded')."""
        for pattern in self.exclude:
            if glob_match(rel_path, pattern):
                return f"excluded by pattern {pattern!r}"
        if any(glob_match(rel_path, p) for p in self.include):
            return None
        return "matches no include pattern (not a supported file type)"


def fingerprint_of(path: Path) -> FileFingerprint | None:
    """(size, mtime) of the file; of the link itself when a symlink cannot be followed."""
    for stat in (path.stat, path.lstat):
        try:
            st = stat()
        except OSError:
            continue
        return FileFingerprint(size=st.st_size, mtime_ns=st.st_mtime_ns)
    return None


def file_digest(path: Path, block: int = 1 << 20) -> str:
    """xxh3-128 of the file's bytes, streamed (GB/s: cheap next to parsing). OSError
    propagates: the caller decides whether an unreadable file is a dead letter or drift."""
    digest = xxhash.xxh3_128()
    with path.open("rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def with_digest(fp: FileFingerprint, path: Path) -> FileFingerprint:
    """The fingerprint plus the digest of the bytes now on disk ("" if they cannot be read:
    the parser then reports why, as a dead letter)."""
    try:
        return fp.model_copy(update={"digest": file_digest(path)})
    except OSError:
        return fp


def link_problem(path: Path, root: Path) -> str | None:
    """Why a symlink must not be read (loop, dangling, leaves the root), or None."""
    if not path.is_symlink():
        return None
    try:
        target = path.resolve(strict=True)
    except RuntimeError:
        return "symlink loop"
    except OSError as err:
        return "symlink loop" if err.errno == errno.ELOOP else "dangling symlink"
    if not target.is_relative_to(root.resolve()):
        return f"symlink leaves the watched root (points to {target}); not followed"
    return None


def scan_source(source: SourceConfig, pf: PathFilter) -> Iterator[tuple[str, Path]]:
    """(doc_id, path) of every wanted file under the root, symlinks included.

    Directory links are never descended; a file link that loops, dangles or leaves the
    root is still listed so the read step can dead-letter it visibly (see `link_problem`).
    """
    for did, path, rel in walk_source(source):
        if pf.wanted(rel):
            yield did, path


def walk_source(source: SourceConfig) -> Iterator[tuple[str, Path, str]]:
    """(doc_id, path, path relative to the root) of every file under the root, wanted or not."""
    root = source.root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            yield make_doc_id(source.name, rel), path, rel


def plan_catch_up(
    source: SourceConfig,
    found: Sequence[tuple[str, Path, FileFingerprint | None]],
    known: KnownDocs,
    max_delete_fraction: float,
    min_docs_for_guard: int,
    allow_mass_delete: bool,
) -> tuple[list[FileEvent], GuardReport | None]:
    """Events that make the index equal the folder (pure, given the scan and the index)."""
    root = str(source.root)
    events: list[FileEvent] = []
    present = set()
    for did, path, fp in found:
        present.add(did)
        if fp is None or known.get(did) != {(fp.size, fp.mtime_ns)}:
            events.append(
                FileEvent(
                    source=source.name,
                    root=root,
                    path=str(path),
                    doc_id=did,
                    kind="upsert",
                    fingerprint=fp,
                )
            )
    prefix = f"{source.name}:"
    indexed = [d for d in known if d.startswith(prefix)]
    gone = sorted(d for d in indexed if d not in present)
    guard = None
    if (
        gone
        and not allow_mass_delete
        and len(indexed) >= min_docs_for_guard
        and (len(gone) > max_delete_fraction * len(indexed))
    ):
        guard = GuardReport(
            source=source.name,
            would_delete=len(gone),
            docs_indexed=len(indexed),
            max_fraction=max_delete_fraction,
            reason=(
                f"{len(gone)} of {len(indexed)} documents of source {source.name!r} vanished "
                f"(> {max_delete_fraction:.0%}); is {root} unmounted? nothing was deleted; "
                "rerun with --allow-mass-delete to proceed"
            ),
        )
        return events, guard
    for did in gone:
        rel = did[len(prefix) :]
        events.append(
            FileEvent(
                source=source.name, root=root, path=str(Path(root) / rel), doc_id=did, kind="delete"
            )
        )
    return events, guard


@dataclass
class _Debouncer:
    """Paths touched by watchdog, each released once its due time has passed (thread-safe).

    A plain change is due after `quiet_s` without further events (a save in bursts is read
    once). A *completed* write — the writer closed the file, or renamed a finished temp file
    over it — is due after the much shorter `settle_s`: the bytes are final, and waiting the
    full quiet period would only add latency. Any later plain event pushes it back again.
    """

    quiet_s: float
    settle_s: float = 0.05
    _due: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def touch(self, path: str, *, completed: bool = False) -> None:
        wait = min(self.settle_s, self.quiet_s) if completed else self.quiet_s
        with self._lock:
            self._due[path] = time.monotonic() + wait

    def ready(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            due = [p for p, t in self._due.items() if t <= now]
            for p in due:
                del self._due[p]
        return sorted(due)


@dataclass(frozen=True)
class ScanSummary:
    """What one root's catch-up scan found: files seen, events planned, the guard if tripped."""

    source: str
    files_seen: int
    events: int
    guard: GuardReport | None


ScanHandler = Callable[[ScanSummary], None]


@dataclass(frozen=True)
class FolderSourceConfig:
    sources: tuple[SourceConfig, ...]
    path_filter: PathFilter
    watch: bool
    debounce_s: float = 0.3
    settle_s: float = 0.05
    batch_size: int = 32
    max_delete_fraction: float = 0.5
    min_docs_for_guard: int = 10
    allow_mass_delete: bool = False
    partition: tuple[int, int] = (0, 1)  # (index, count): own only these documents' events

    def owns(self, doc: str) -> bool:
        index, count = self.partition
        return partition_of(doc, count) == index


class FolderPartition(StatefulSourcePartition[FileEvent, None]):
    """The one partition that owns the watchers and the catch-up scan: however many bytewax
    workers or processes run the flow, folders are watched once, by the store owner.

    State lives in the stores (they are the truth), so `snapshot` is None: a resumed flow
    (bytewax recovery) or a restart re-runs the catch-up scan, which re-derives from file
    fingerprints exactly what the index is missing — including events that were queued or
    still debouncing when the process stopped. A snapshot could only repeat that, staler.
    """

    def __init__(
        self,
        cfg: FolderSourceConfig,
        known: Callable[[], KnownDocs],
        on_scan: ScanHandler,
    ) -> None:
        self._cfg = cfg
        self._known_fn = known
        self._on_scan = on_scan
        self._queue: list[FileEvent] = []
        self._known: dict[str, tuple[int, int] | None] = {}
        self._planned = False
        self._debouncer = _Debouncer(cfg.debounce_s, cfg.settle_s)
        self._observer = self._start_observer() if cfg.watch else None

    def _start_observer(self) -> object:
        from watchdog.events import (
            EVENT_TYPE_CLOSED,
            EVENT_TYPE_CLOSED_NO_WRITE,
            EVENT_TYPE_OPENED,
            DirModifiedEvent,
            FileSystemEvent,
            FileSystemEventHandler,
        )
        from watchdog.observers import Observer

        debouncer = self._debouncer
        ignored = (EVENT_TYPE_OPENED, EVENT_TYPE_CLOSED_NO_WRITE)  # reads (ours too) change nothing

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if isinstance(event, DirModifiedEvent) or event.event_type in ignored:
                    return
                closed = event.event_type == EVENT_TYPE_CLOSED  # a writer closed the file
                debouncer.touch(os.fsdecode(event.src_path), completed=closed)
                if getattr(event, "dest_path", ""):  # a rename's target is complete
                    debouncer.touch(os.fsdecode(event.dest_path), completed=True)

        observer = Observer()
        for source in self._cfg.sources:
            observer.schedule(Handler(), str(source.root.resolve()), recursive=True)
        observer.start()
        return observer

    def _plan(self) -> None:
        owns = self._cfg.owns  # another partition's documents are another replica's business
        known = {d: fps for d, fps in self._known_fn().items() if owns(d)}
        for source in self._cfg.sources:
            found = [
                (d, p, fingerprint_of(p))
                for d, p in scan_source(source, self._cfg.path_filter)
                if owns(d)
            ]
            events, guard = plan_catch_up(
                source,
                found,
                known,
                self._cfg.max_delete_fraction,
                self._cfg.min_docs_for_guard,
                self._cfg.allow_mass_delete,
            )
            self._on_scan(ScanSummary(source.name, len(found), len(events), guard))
            self._queue.extend(events)
        for did, fps in known.items():
            self._known[did] = next(iter(fps)) if len(fps) == 1 else None
        for event in self._queue:
            self._remember(event)
        self._planned = True

    def _remember(self, event: FileEvent) -> None:
        if event.kind == "delete":
            self._known.pop(event.doc_id, None)
        else:
            fp = event.fingerprint
            self._known[event.doc_id] = (fp.size, fp.mtime_ns) if fp else None

    def _source_of(self, path: Path) -> tuple[SourceConfig, str] | None:
        for source in self._cfg.sources:
            root = source.root.resolve()
            try:
                return source, path.relative_to(root).as_posix()
            except ValueError:
                continue
        return None

    def _events_for(self, raw: str) -> Iterator[FileEvent]:
        path = Path(raw)
        located = self._source_of(path)
        if located is None:
            return
        source, rel = located
        root = str(source.root)
        if path.is_dir() and not path.is_symlink():
            sub = SourceConfig(name=source.name, root=source.root, tenant=source.tenant)
            for did, p in scan_source(sub, self._cfg.path_filter):
                if p.parent == path or path in p.parents:
                    yield from self._upsert_if_changed(source, did, p)
            return
        did = make_doc_id(source.name, rel)
        if path.exists() or path.is_symlink():
            if self._cfg.path_filter.wanted(rel):
                yield from self._upsert_if_changed(source, did, path)
            return
        prefix = did + "/"
        for gone in sorted(d for d in self._known if d == did or d.startswith(prefix)):
            rel_gone = gone.split(":", 1)[1]
            yield FileEvent(
                source=source.name,
                root=root,
                path=str(Path(root) / rel_gone),
                doc_id=gone,
                kind="delete",
            )

    def _upsert_if_changed(self, source: SourceConfig, did: str, path: Path) -> Iterator[FileEvent]:
        fp = fingerprint_of(path)
        if fp is not None and self._known.get(did) == (fp.size, fp.mtime_ns):
            return
        yield FileEvent(
            source=source.name,
            root=str(source.root),
            path=str(path),
            doc_id=did,
            kind="upsert",
            fingerprint=fp,
        )

    def next_batch(self) -> list[FileEvent]:
        if not self._planned:
            self._plan()
        if not self._queue and self._observer is not None:
            for raw in self._debouncer.ready():
                for event in filter(lambda e: self._cfg.owns(e.doc_id), self._events_for(raw)):
                    self._remember(event)
                    self._queue.append(event)
        if self._queue:
            batch, self._queue = (
                self._queue[: self._cfg.batch_size],
                self._queue[self._cfg.batch_size :],
            )
            return batch
        if self._observer is None:
            raise StopIteration
        return []

    def next_awake(self) -> datetime | None:
        if self._queue or self._observer is None:
            return None
        return datetime.now(UTC) + timedelta(milliseconds=50)

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        observer, self._observer = self._observer, None  # idempotent: bytewax or our owner
        if observer is not None:
            observer.stop()  # type: ignore[attr-defined]
            observer.join(timeout=5)  # type: ignore[attr-defined]


class FolderSource(FixedPartitionedSource[FileEvent, None]):
    """bytewax source over watched folders: a single partition named `folders`.

    `owns` says whether this process owns the data dir: only the owner lists the partition
    (the scan needs the stores' fingerprints), so bytewax builds it on one of the owner's
    workers and never in another process of a `-p` cluster.
    """

    PART = "folders"

    def __init__(
        self,
        cfg: FolderSourceConfig,
        known: Callable[[], KnownDocs],
        on_scan: ScanHandler = lambda summary: None,
        owns: Callable[[], bool] = lambda: True,
    ) -> None:
        self._cfg, self._known, self._on_scan, self._owns = cfg, known, on_scan, owns
        self._built: list[FolderPartition] = []

    def list_parts(self) -> list[str]:
        return [self.PART] if self._owns() else []

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> FolderPartition:
        part = FolderPartition(self._cfg, self._known, self._on_scan)
        self._built.append(part)
        return part

    def close(self) -> None:
        """Stop the watchers: bytewax closes partitions only when input ends, not on Ctrl-C."""
        for part in self._built:
            part.close()
        self._built.clear()
