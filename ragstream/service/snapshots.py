"""Snapshots of a data dir: `take` one from open stores while writers are kept out (queries
go on reading), `listed` ones, `verify` a file (every checksum, then the counts of both legs
read back from its unpacked stores), and `restore` one into a new dir, which is checked the
same way before it takes the target's place (nothing is written to the target before).
A server-backed index travels as points files, read and loaded through its stores
(`service.snapshot_points`), onto a server or embedded alike.

The file layer is `connectors.snapshot_files`; this module adds the counts and the lock."""

from __future__ import annotations

import os
import shutil
import time
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

from ragstream.connectors.data_format import is_pre_migration, migrate_forward, too_new
from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.snapshot_files import (
    checked,
    listed,
    read_manifest,
    sweep_partials,
    write_snapshot,
)
from ragstream.core.errors import BadSnapshotError, InvalidRequestError
from ragstream.core.rwlock import StoreLock
from ragstream.core.settings import Settings
from ragstream.core.snapshot import (
    STORAGE_FORMAT,
    LegCounts,
    SnapshotInfo,
    SnapshotManifest,
    SnapshotMember,
    ragstream_version,
)
from ragstream.flows.runtime import Runtime
from ragstream.service.periodic import every
from ragstream.service.snapshot_points import (
    load_points,
    on_server,
    point_members,
    read_back,
    refuse_a_held_server,
)
from ragstream.service.stores import open_live


def snapshots_dir(settings: Settings) -> Path:
    return settings.data_dir / "snapshots"


def counts_of(vectors: VectorStore, lexical: LexicalIndex) -> LegCounts:
    return LegCounts(
        chunks_live=vectors.count("live"),
        chunks_deleted=vectors.count("deleted"),
        lexical_live=lexical.count("live"),
    )


def info_of(path: Path, manifest: SnapshotManifest) -> SnapshotInfo:
    return SnapshotInfo(
        id=manifest.id,
        path=str(path),
        size=path.stat().st_size,
        created_at=manifest.created_at,
        embedder=manifest.embedder,
        counts=manifest.counts,
        storage_format=manifest.storage_format,
    )


def take(
    settings: Settings,
    live: tuple[str, VectorStore],
    lexical: LexicalIndex,
    lock: StoreLock,
    out: Path | None = None,
) -> SnapshotInfo:
    """A snapshot of the data dir as it is now, written to `out` (default: the data dir's
    `snapshots/<id>.tar`). Under `lock.writers_out()`: writers wait, queries go on. A
    server's collections are read into the file through the store, points and vectors."""
    now = time.time()
    snap_id = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S") + f"{now % 1:.3f}"[1:]
    target = out or snapshots_dir(settings) / f"{snap_id}.tar"
    if target.exists():
        raise InvalidRequestError(f"{target} exists: name another file with --out")
    sweep_partials(target.parent)
    collection, vectors = live
    with lock.writers_out():
        vectors.flush()
        counts = counts_of(vectors, lexical)

        def manifest_of(members: list[SnapshotMember]) -> SnapshotManifest:
            return SnapshotManifest(
                id=snap_id,
                created_at=now,
                ragstream_version=ragstream_version(),
                embedder=vectors.embedder.slug,
                collection=collection,
                counts=counts,
                members=members,
            )

        served = on_server(settings)
        more = (lambda scratch: point_members(settings, scratch)) if served else None
        manifest = write_snapshot(settings.data_dir, target, manifest_of, more)
    return info_of(target, manifest)


def listed_snapshots(settings: Settings) -> list[SnapshotInfo]:
    """The data dir's snapshots, newest first (a file that cannot be read is left out)."""
    out = []
    for path in listed(snapshots_dir(settings)):
        try:
            out.append(info_of(path, read_manifest(path)))
        except BadSnapshotError:
            continue
    return out


def _unpacked(settings: Settings, path: Path, into: Path) -> SnapshotManifest:
    """`path` checked and unpacked into the new dir `into`, whose stores, opened without a
    model, must hold the counts the manifest records. A snapshot of an older storage format
    is migrated there (its own file is the copy); a newer one is refused before unpacking."""
    head = read_manifest(path)
    if head.storage_format > STORAGE_FORMAT:
        raise too_new(path, head.storage_format, head.ragstream_version)
    manifest = checked(path, unpack_to=into)
    load_points(settings.model_copy(update={"data_dir": into}), manifest)
    there = settings.model_copy(update={"data_dir": into})
    migrate_forward(there, snapshot=False)
    if manifest.counts is None:  # taken before a migration: the checksums are the proof
        return manifest
    with open_live(there) as live:
        if live is None:
            raise BadSnapshotError(f"{path}: it holds no live collection")
        _, vectors, lexical = live
        found = counts_of(vectors, lexical)
    if found != manifest.counts:
        raise BadSnapshotError(
            f"{path}: the manifest counts {manifest.counts.model_dump()} but its stores "
            f"hold {found.model_dump()}"
        )
    return manifest


def verify(settings: Settings, path: Path) -> SnapshotManifest:
    """Check `path` whole (checksums, members, counts) without touching any data dir or
    server: it is unpacked into a scratch dir beside it (a server's points into embedded
    stores there), which is removed after."""
    scratch = path.parent / f".verify-{path.name}-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        return _unpacked(read_back(settings, read_manifest(path)), path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def restore(settings: Settings, path: Path, target: Path, force: bool = False) -> SnapshotManifest:
    """Restore `path` into `target`, an empty or missing dir (`force`: a non-empty one is
    moved aside and removed only once the restore succeeded). The snapshot is unpacked and
    checked beside `target` first, so a bad file writes nothing to it. With a server in
    `settings` (store.qdrant_url), the points are upserted there, into a server that does
    not hold the index yet."""
    if not path.is_file():
        raise InvalidRequestError(f"no snapshot file {path}")
    refuse_a_held_server(settings)
    if target.exists() and any(target.iterdir()) and not force:
        raise InvalidRequestError(f"{target} is not empty: restore into a new dir, or --force")
    staging = target.parent / f".{target.name}.restoring-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        manifest = _unpacked(settings, path, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    aside = target.parent / f".{target.name}.replaced-{os.getpid()}"
    if target.exists():
        target.rename(aside)
    staging.rename(target)
    shutil.rmtree(aside, ignore_errors=True)
    return manifest


def migrate(settings: Settings) -> list[str]:
    """Take the data dir to this ragstream's storage format now (`ragstream migrate`): what
    opening it does on its own with `store.migrate = "auto"`; the steps run, none when it
    is current. A snapshot is taken first when a step rewrites data."""
    if not settings.data_dir.is_dir():
        raise InvalidRequestError(f"no data dir {settings.data_dir}")
    return migrate_forward(settings)


def prune(settings: Settings, keep: int) -> list[Path]:
    """Remove all but the newest `keep` snapshots of the data dir; the files removed. The
    snapshots a migration took first (`<id>-format<N>.tar`) are never removed: each is the
    only copy of the layout before it."""
    gone = [p for p in listed(snapshots_dir(settings)) if not is_pre_migration(p)][keep:]
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def scheduled(rt: Runtime, settings: Settings) -> AbstractContextManager[None]:
    """`watch`'s snapshots: one every `snapshot.every` seconds, taken between index batches
    (writers wait, queries do not), then all but the newest `snapshot.keep` removed. A
    failing snapshot is logged and never stops the watch."""

    def snapshot_once() -> None:
        side = rt.sides.live
        take(settings, (side.collection, side.vectors), rt.lexical, rt.lock)
        prune(settings, settings.snapshot.keep)

    return every(settings.snapshot.every, "snapshot", snapshot_once, join_s=600)
