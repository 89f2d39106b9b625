"""The git source (`GitSource`, a `connectors.protocols.Source`): the files of a repository's
tree at a ref, read by blob id, the ref polled for moves.

A document's identity is its path in the tree (`<source>:<path>`, as for a folder), its
version the blob id: the listing walks tree objects only and never opens a blob, so a scan
of an unchanged tree reads no file content, and a commit that touches one file re-reads one
blob. A document's locator is `git+file://<repo>@<ref>:<path>`; its fingerprint carries the
blob id (`digest`) and the commit it was read at (`commit`), which citations show.

dulwich reads the repository: pure Python (no git binary on the machine), bare or not, loose
objects and packs, any object by id without a checkout or a working tree.
"""

from __future__ import annotations

import datetime
import hashlib
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from ragstream.connectors.protocols import (
    SourceEntry,
    SourceReadError,
    Touch,
    poll_for_changes,
)
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import doc_id as make_doc_id
from ragstream.core.metadata import RawValue
from ragstream.core.models import FileEvent, FileFingerprint
from ragstream.core.permissions import OFF_STAMP, Readers, UserDb
from ragstream.core.source_config import GIT_SCHEME, GitConfig

_READS = [0]  # blobs read by this process (the bench checks a re-scan reads none unchanged)
_READS_LOCK = threading.Lock()


def blob_reads() -> int:
    """How many blobs this process has read so far."""
    return _READS[0]


def fingerprint(blob_id: str, commit: str) -> FileFingerprint:
    """A blob's version: its id is the token (a blob has no mtime, and its size is only
    known once it is opened)."""
    return FileFingerprint(size=0, mtime_ns=0, digest=blob_id, commit=commit)


def locator(repo: str, ref: str, rel: str) -> str:
    return f"{GIT_SCHEME}{repo}@{ref}:{rel}"


def parse_locator(text: str) -> tuple[str, str, str]:
    """(repository, ref, path in the tree) of a git locator (a ref holds no ':')."""
    rest = text[len(GIT_SCHEME) :]
    head, _, rel = rest.partition(":")
    repo, _, ref = head.rpartition("@")
    return repo, ref, rel


@lru_cache(maxsize=16)
def _open(root: str) -> tuple[Any, threading.Lock]:
    """One dulwich `Repo` per repository and process, with the lock its pack reads need."""
    from dulwich.errors import NotGitRepository
    from dulwich.repo import Repo

    try:
        return Repo(root), threading.Lock()
    except (NotGitRepository, FileNotFoundError, NotADirectoryError):
        raise InvalidRequestError(f"{root} is not a git repository") from None


class GitSource:
    """A repository's tree at `ref` (a branch, tag or commit). `poll_s`: how often `watch`
    reads the ref; when it moved, the whole tree is re-listed against the index (a reset or
    a force-push is one more change)."""

    def __init__(self, config: GitConfig, poll_s: float = 5.0) -> None:
        self.config, self.name, self.ref = config, config.name, config.ref
        self.root = str(config.root.expanduser().resolve())
        self.poll_s = poll_s

    def _repo(self) -> tuple[Any, threading.Lock]:
        try:
            return _open(self.root)
        except InvalidRequestError as err:
            raise InvalidRequestError(f"source {self.name!r}: {err}") from None

    def head(self) -> str:
        """The commit id the ref names now; InvalidRequestError for an unknown ref."""
        from dulwich.objectspec import parse_commit

        repo, lock = self._repo()
        try:
            with lock:
                return str(parse_commit(repo, self.ref.encode()).id.decode())
        except (KeyError, ValueError, AttributeError, NotImplementedError):
            raise InvalidRequestError(
                f"source {self.name!r}: unknown ref {self.ref!r} in {self.root} (no branch, tag "
                "or commit of that name)"
            ) from None

    def check(self) -> None:
        self.head()

    def entries(self) -> Iterator[SourceEntry]:
        """Every file of the tree at the ref (tree objects only; submodules are skipped).
        A tree object that cannot be read is an error: nothing is listed, nothing deleted."""
        commit = self.head()
        for rel, sha in self._tree(commit):
            fp = fingerprint(sha, commit)
            yield SourceEntry.listed(make_doc_id(self.name, rel), self.locator(rel), rel, fp)

    def _tree(self, commit: str) -> list[tuple[str, str]]:
        from dulwich.object_store import iter_tree_contents

        repo, lock = self._repo()
        try:
            with lock:
                tree = repo[commit.encode()].tree
                found = [
                    (e.path.decode("utf-8", "surrogateescape"), e.sha.decode())
                    for e in iter_tree_contents(repo.object_store, tree)
                    if e.mode is not None and not stat.S_ISDIR(e.mode) and e.mode != 0o160000
                ]
        except Exception as err:  # a missing or corrupt tree object: refuse the listing
            raise InvalidRequestError(
                f"source {self.name!r}: the tree of {commit[:12]} in {self.root} cannot be read "
                f"({type(err).__name__}: {err}); nothing was changed"
            ) from None
        return sorted(found)

    def locator(self, rel: str) -> str:
        return locator(self.root, self.ref, rel)

    def read(self, event: FileEvent) -> bytes:
        """The blob the event's fingerprint names, checked against its id."""
        blob_id = event.fingerprint.digest if event.fingerprint is not None else ""
        if not blob_id:
            raise SourceReadError("no blob id to read")
        try:
            repo, lock = self._repo()
            with lock:
                obj = repo.object_store[blob_id.encode()]
            data = bytes(obj.as_raw_string())
            kind = obj.type_name
        except InvalidRequestError as err:
            raise SourceReadError(str(err)) from None
        except Exception as err:
            raise SourceReadError(f"git object {blob_id} cannot be read: {err}") from None
        with _READS_LOCK:
            _READS[0] += 1
        if kind != b"blob":
            raise SourceReadError(f"git object {blob_id} is a {kind.decode()}, not a blob")
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != blob_id:
            raise SourceReadError(f"git object {blob_id} is corrupt (its content has another id)")
        return data

    def version(self, locator: str) -> FileFingerprint | None:
        """The blob at the locator's path in the tree the ref names now (None: not there)."""
        from dulwich.object_store import tree_lookup_path

        _, _, rel = parse_locator(locator)
        commit = self.head()
        repo, lock = self._repo()
        try:
            with lock:
                _, sha = tree_lookup_path(
                    repo.__getitem__, repo[commit.encode()].tree, rel.encode()
                )
        except KeyError:
            return None
        return fingerprint(sha.decode(), commit)

    def fields(self, locator: str) -> dict[str, RawValue]:
        """The last commit's time and author for the path (`commit_time`, `commit_author`)."""
        last = self.last_commit(parse_locator(locator)[2])
        return {} if last is None else {"commit_time": last[0], "commit_author": last[1]}

    def stamp(self, locator: str, db: UserDb) -> Readers:
        """A tree at a ref has no file permissions to mirror."""
        return OFF_STAMP

    def last_commit(self, path: str) -> tuple[datetime.datetime, str] | None:
        """(author time in UTC, author name without the email) of the last commit at the ref
        that changed `path` (a path in the tree, as `entries` names it); None when no commit
        there touched it, or the ref or history cannot be read."""
        try:
            commit = self.head()
            repo, lock = self._repo()
            with lock:
                walker = repo.get_walker(
                    include=[commit.encode()],
                    paths=[path.encode("utf-8", "surrogateescape")],
                    max_entries=1,
                )
                found = next(iter(walker), None)
        except Exception:  # an unknown ref, a missing or corrupt object: no answer
            return None
        if found is None:
            return None
        when = datetime.datetime.fromtimestamp(found.commit.author_time, tz=datetime.UTC)
        author = found.commit.author.decode("utf-8", "replace")
        return when, (author.partition("<")[0].strip() or author.strip())

    def watch(self, touch: Touch) -> Callable[[], None]:
        """Poll the ref every `poll_s`; a moved ref touches `""` (re-list the tree)."""
        name = f"ragstream-git-{self.name}"
        return poll_for_changes(name, self.poll_s, self._head_or_none, touch)

    def _head_or_none(self) -> str | None:
        try:
            return self.head()
        except InvalidRequestError:  # the ref went away for now: the next poll sees again
            return None

    def changed(self, locator: str, known: Mapping[str, str | None]) -> Iterator[FileEvent]:
        return iter(())  # the tree is re-listed as a whole (`""`), never a path at a time
