"""The folder source (`FolderSource`, a `connectors.protocols.Source`): the files under a
root, fingerprinted by (size, mtime), read whole, followed by watchdog.

The catch-up scan over it (connectors/sources.py) is what makes a restart converge: every
file whose (size, mtime) is not exactly what the index recorded for its doc is re-read.
Live events are debounced per path (`_Debouncer`): a file saved in bursts, or written as
temp + rename, is read once after it has been quiet for `debounce_s`. Also here: the include
/ exclude patterns (`PathFilter`) every source's listing is matched against.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

import xxhash

from ragstream.connectors.protocols import SourceEntry, SourceReadError, Touch
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import doc_id as make_doc_id
from ragstream.core.metadata import RawValue
from ragstream.core.models import FileEvent, FileFingerprint
from ragstream.core.permissions import (
    DIR_NEED,
    FILE_NEED,
    OFF_STAMP,
    AclFormatError,
    ObjectPermissions,
    Readers,
    UserDb,
    owner_only,
    parse_acl,
    readers,
)
from ragstream.core.source_config import FolderConfig

# doc_id -> the one version token the index holds for it (None: several, or unknown)
KnownKeys = Mapping[str, str | None]


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


def walk_source(source: FolderConfig) -> Iterator[tuple[str, Path, str]]:
    """(doc_id, path, path relative to the root) of every file under the root, wanted or not.

    Directory links are never descended; a file link that loops, dangles or leaves the
    root is still listed so the read step can dead-letter it visibly (see `link_problem`).
    """
    root = source.root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            yield make_doc_id(source.name, rel), path, rel


def read_file(path: Path, root: Path) -> bytes:
    """All bytes at once (docling never races a file that changes under it), or why not."""
    problem = link_problem(path, root)
    if problem is not None:
        raise SourceReadError(problem)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SourceReadError("file vanished before it could be read") from None
    except PermissionError:
        raise SourceReadError("permission denied: the file is not readable") from None
    except OSError as exc:
        raise SourceReadError(f"could not read file: {exc.strerror or exc}") from None


ACL_ATTRIBUTE = "system.posix_acl_access"
_NO_ACL = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)  # no ACL here, or no ACLs at all


def object_permissions(path: Path, need: int) -> ObjectPermissions:
    """Owner, group, mode and access ACL of one object (links followed, as a reader's open
    follows them). `OSError` or `AclFormatError` when they cannot be read."""
    st = os.stat(path)
    try:
        acl = parse_acl(os.getxattr(path, ACL_ATTRIBUTE))
    except OSError as err:
        if err.errno not in _NO_ACL:
            raise
        acl = None
    return ObjectPermissions(st.st_uid, st.st_gid, st.st_mode & 0o777, acl, need)


def file_readers(path: Path, root: Path, db: UserDb) -> Readers:
    """Who may read the file at `path`: its permissions and those of every folder from the
    watched `root` down (`core.permissions.readers`). Fail closed: what cannot be read leaves
    the file to its owner, with the reason."""
    try:
        uid: int | None = os.stat(path).st_uid
    except OSError as err:
        return owner_only(None, db, f"permissions unreadable: {err.strerror or err}")
    try:
        rel = path.relative_to(root)
        folders = [root, *(root / p for p in reversed(rel.parents[:-1]))] if rel.parts else []
        chain = [object_permissions(d, DIR_NEED) for d in folders]
        chain.append(object_permissions(path, FILE_NEED))
    except (OSError, AclFormatError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return owner_only(uid, db, f"permissions unreadable: {why}")
    return readers(chain, db)


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


class FolderSource:
    """The files under one folder (a `Source`): listed by a walk, fingerprinted by a stat,
    read whole, followed by a watchdog observer. A file's locator is its absolute path."""

    def __init__(self, config: FolderConfig, path_filter: PathFilter) -> None:
        self.config, self.name, self.root = config, config.name, str(config.root)
        self._root = config.root.resolve()
        self._filter = path_filter
        self.mirrors = config.permissions == "posix"  # file permissions onto its chunks

    def stamp(self, locator: str, db: UserDb) -> Readers:
        """Who may read the document at `locator` (`OFF_STAMP` where this source mirrors no
        permissions)."""
        return file_readers(Path(locator), self._root, db) if self.mirrors else OFF_STAMP

    def fields(self, locator: str) -> dict[str, RawValue]:
        """Nothing beyond the file: its size, mtime and extension are read from the file."""
        return {}

    def doc_ids_at(self, locator: str, docs: Iterable[str]) -> list[str]:
        """Those of `docs` at or under the path `locator` (a file, or a folder whose
        permissions changed)."""
        try:
            did = make_doc_id(self.name, Path(locator).relative_to(self._root).as_posix())
        except ValueError:
            return []
        if Path(locator) == self._root:
            return sorted(d for d in docs if d.startswith(f"{self.name}:"))
        return sorted(d for d in docs if d == did or d.startswith(did + "/"))

    def check(self) -> None:
        if not self._root.is_dir():  # an unmounted folder must not read as "all deleted"
            raise InvalidRequestError(
                f"source {self.name!r}: {self.config.root} is not a directory here"
            )

    def entries(self) -> Iterator[SourceEntry]:
        self.check()
        for did, path, rel in walk_source(self.config):
            yield SourceEntry(did, str(path), rel, partial(fingerprint_of, path))

    def locator(self, rel: str) -> str:
        return str(Path(self.root) / rel)

    def read(self, event: FileEvent) -> bytes:
        return read_file(Path(event.path), Path(event.root))

    def version(self, locator: str) -> FileFingerprint | None:
        try:
            st = os.stat(locator)
        except FileNotFoundError:
            if Path(locator).parent.is_dir():
                return None
            raise
        return FileFingerprint(size=st.st_size, mtime_ns=st.st_mtime_ns)

    def watch(self, touch: Touch) -> Callable[[], None]:
        """A watchdog observer on the root; reads (ours too) change nothing."""
        from watchdog.events import (
            EVENT_TYPE_CLOSED,
            EVENT_TYPE_CLOSED_NO_WRITE,
            EVENT_TYPE_OPENED,
            DirModifiedEvent,
            FileSystemEvent,
            FileSystemEventHandler,
        )
        from watchdog.observers import Observer

        ignored = (EVENT_TYPE_OPENED, EVENT_TYPE_CLOSED_NO_WRITE)

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if isinstance(event, DirModifiedEvent) or event.event_type in ignored:
                    return
                closed = event.event_type == EVENT_TYPE_CLOSED  # a writer closed the file
                touch(os.fsdecode(event.src_path), closed)
                if getattr(event, "dest_path", ""):  # a rename's target is complete
                    touch(os.fsdecode(event.dest_path), True)

        observer = Observer()
        observer.schedule(Handler(), str(self._root), recursive=True)
        observer.start()

        def stop() -> None:
            observer.stop()
            observer.join(timeout=5)

        return stop

    def changed(self, locator: str, known: KnownKeys) -> Iterator[FileEvent]:
        """The events of one touched path: a directory's changed files, a file's upsert, or
        the deletes of what was indexed at (or under) a path that is gone."""
        path = Path(locator)
        try:
            rel = path.relative_to(self._root).as_posix()
        except ValueError:
            return
        if path.is_dir() and not path.is_symlink():
            for did, p, sub in walk_source(self.config):
                if (p.parent == path or path in p.parents) and self._filter.wanted(sub):
                    yield from self._upsert_if_changed(did, p, known)
            return
        did = make_doc_id(self.name, rel)
        if path.exists() or path.is_symlink():
            if self._filter.wanted(rel):
                yield from self._upsert_if_changed(did, path, known)
            return
        prefix = did + "/"
        for gone in sorted(d for d in known if d == did or d.startswith(prefix)):
            yield FileEvent(
                source=self.name,
                root=self.root,
                path=self.locator(gone.split(":", 1)[1]),
                doc_id=gone,
                kind="delete",
            )

    def _upsert_if_changed(self, did: str, path: Path, known: KnownKeys) -> Iterator[FileEvent]:
        fp = fingerprint_of(path)
        if fp is not None and known.get(did) == fp.token:
            return
        yield FileEvent(
            source=self.name,
            root=self.root,
            path=str(path),
            doc_id=did,
            kind="upsert",
            fingerprint=fp,
        )
