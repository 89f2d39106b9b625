"""The storage format of a data dir: recorded in `state/format.json`, checked whenever its
stores are opened, and migrated forward one step at a time.

A data dir records the format its stores and state are laid out in (`STORAGE_FORMAT` when
this ragstream created it) and the ragstream version that last wrote the record. Opening
one (`ensure_format`):

- a newer format than this ragstream reads is refused (`StorageFormatError`), nothing is
  touched;
- an older one is migrated in place, step by step (`MIGRATIONS[n]` takes format n to n+1),
  under a lock so two processes never migrate at once. When any step rewrites stored data,
  the data dir is first written to `snapshots/<id>-format<n>.tar` (the snapshot file layer,
  checksummed; restoring it gives the dir back as it was). With `store.migrate = "ask"` it
  is refused instead, with the command to run (`ragstream migrate --data-dir D`);
- a data dir without a record that holds an index was written before the record existed:
  format 0, whose layout is format 1's (its step records the format and rewrites nothing).

A step is given the settings of the data dir it migrates (`Settings.data_dir` is that dir):
the stores it rewrites are the ones those settings open (through `connectors.backends`).

- 0 -> 1: records the format.
- 1 -> 2: clears the `readers` of every tombstone in the index's collections, which format 1
  kept when it tombstoned a point. From format 2 on a tombstone has no readers, so a search
  filtered by readers sends no status condition (`SearchFilter.status_condition`); a format
  1 tombstone would match it.
- 2 -> 3: re-tokenizes the BM25 leg with the script-aware analyzer (CJK text as character
  bigrams, `core.language`) from the chunk text the index stores; nothing is embedded.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ragstream.connectors.backends import backend_of
from ragstream.connectors.lexical import retokenize_tantivy
from ragstream.connectors.snapshot_files import write_snapshot
from ragstream.connectors.vector_stores import BaseQdrantStore, RetryPolicy
from ragstream.core.errors import StorageFormatError
from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.settings import Settings
from ragstream.core.snapshot import (
    STORAGE_FORMAT,
    SnapshotManifest,
    SnapshotMember,
    ragstream_version,
)

FORMAT_FILE = "format.json"
LOCK_FILE = "format.lock"
PRE_MIGRATION = "-format"  # in the name of a snapshot taken before a migration


@dataclass(frozen=True)
class Migration:
    """One step from format `n` to `n + 1`: `apply(settings)` rewrites what changed in the
    data dir `settings.data_dir` and the stores `settings` open; `rewrites` says whether it
    changes stored data (then a snapshot is taken first)."""

    description: str
    apply: Callable[[Settings], None]
    rewrites: bool


def _nothing(settings: Settings) -> None:
    """Format 0 is format 1 without its record: the step only records the format."""


def each_collection(
    settings: Settings, rewrite: Callable[[BaseQdrantStore], int], sparse: bool = False
) -> int:
    """`rewrite` applied to each collection of the index `settings` describe (opened with
    its sparse vectors when `sparse`), summed."""
    s = settings
    backend = backend_of(s.store.vector_backend)
    base, name, url = s.vectors_dir, s.store.index_name, s.store.qdrant_url
    total = 0
    for embedder in backend.list(base, name, url).values():
        retry = RetryPolicy.from_settings(s)
        store = backend.open_store(base, name, embedder, url, retry, sparse=sparse)
        try:
            total += rewrite(store)
        finally:
            store.close()
    return total


def clear_tombstone_readers(settings: Settings) -> int:
    """Format 1 tombstones kept their `readers`: cleared in each collection of the index
    `settings` describe (opened without its sparse vectors: a payload write only); the
    tombstones there are."""
    return each_collection(settings, BaseQdrantStore.clear_tombstone_readers)


def _clear_tombstone_readers(settings: Settings) -> None:
    clear_tombstone_readers(settings)


def retokenize_bm25(settings: Settings) -> int:
    """Format 2 analyzed CJK text as words (a clause was one token): the BM25 leg is
    re-tokenized with the script-aware analyzer (`connectors.lexical.ANALYZER_KEY`) from the
    text the index stores, and nothing is embedded. Each collection's sparse vectors are
    recomputed; a separate tantivy index is rebuilt from the chunks it stores. How many
    points or chunks were re-tokenized."""
    if settings.lexical != "sparse":
        lexical = settings.lexical_dir
        return retokenize_tantivy(lexical) if settings.lexical == "tantivy" else 0
    return each_collection(settings, BaseQdrantStore.rewrite_bm25, sparse=True)


def _retokenize_bm25(settings: Settings) -> None:
    retokenize_bm25(settings)


# MIGRATIONS[n] takes a data dir from format n to n + 1; a format change adds its step here
MIGRATIONS: dict[int, Migration] = {
    0: Migration("record the storage format (the layout is unchanged)", _nothing, False),
    1: Migration("clear the readers of tombstoned points", _clear_tombstone_readers, True),
    2: Migration("re-tokenize BM25 with the script-aware analyzer", _retokenize_bm25, True),
}


def format_path(data_dir: Path) -> Path:
    return data_dir / "state" / FORMAT_FILE


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


def holds_an_index(data_dir: Path) -> bool:
    """Whether `data_dir` already holds an index (vectors, a lexical index, a finished sync)."""
    return (
        _has_files(data_dir / "vectors")
        or _has_files(data_dir / "lexical")
        or (data_dir / "state" / "sync.json").is_file()
    )


def recorded_format(data_dir: Path) -> int | None:
    """The format `data_dir` records; 0 for an index written before the record existed;
    None for a new or empty data dir."""
    raw = read_json(format_path(data_dir), None)
    if isinstance(raw, dict) and isinstance(raw.get("storage_format"), int):
        return int(raw["storage_format"])
    return 0 if holds_an_index(data_dir) else None


def record_format(data_dir: Path, storage_format: int | None = None) -> None:
    """Record `storage_format` (default: the current one) and this ragstream's version."""
    fmt = STORAGE_FORMAT if storage_format is None else storage_format
    write_json_atomic(
        format_path(data_dir), {"storage_format": fmt, "ragstream_version": ragstream_version()}
    )


def _written_by(data_dir: Path) -> str:
    raw = read_json(format_path(data_dir), {})
    return str(raw.get("ragstream_version", "an unknown version")) if isinstance(raw, dict) else ""


def too_new(where: Path, found: int, written_by: str) -> StorageFormatError:
    """The refusal of a data dir or snapshot of a newer format than this ragstream reads."""
    return StorageFormatError(
        f"{where} has storage format {found} (written by ragstream {written_by}); "
        f"this ragstream ({ragstream_version()}) reads formats up to {STORAGE_FORMAT}: upgrade "
        f"ragstream to open it (nothing was changed)"
    )


def ensure_format(settings: Settings, creating: bool = False) -> None:
    """Open `settings.data_dir` at the current format: refuse a newer one, migrate an older
    one (`store.migrate = "auto"`) or refuse it with the command (`"ask"`); with `creating`,
    a new data dir gets the current record."""
    data_dir = settings.data_dir
    found = recorded_format(data_dir)
    if found == STORAGE_FORMAT:
        return
    if found is None:
        if creating:
            record_format(data_dir)
        return
    if found > STORAGE_FORMAT:
        raise too_new(data_dir, found, _written_by(data_dir))
    if settings.store.migrate != "auto":
        raise StorageFormatError(
            f"{data_dir} has storage format {found}, this ragstream writes {STORAGE_FORMAT}: "
            f"run `ragstream migrate --data-dir {data_dir}` (it snapshots the data dir first "
            f"when a step rewrites data), or set store.migrate = 'auto'"
        )
    migrate_forward(settings)


@contextmanager
def _migration_lock(data_dir: Path) -> Iterator[None]:
    path = data_dir / "state" / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def migrate_forward(settings: Settings, snapshot: bool = True) -> list[str]:
    """Take `settings.data_dir` to `STORAGE_FORMAT`, one recorded step at a time; the
    descriptions of the steps run (none when it is current). A snapshot comes first when a
    step rewrites data (`snapshot=False`: the caller holds a copy, e.g. a restore's own
    file)."""
    data_dir = settings.data_dir
    with _migration_lock(data_dir):
        found = recorded_format(data_dir)
        if found is None or found == STORAGE_FORMAT:
            return []
        if found > STORAGE_FORMAT:
            raise too_new(data_dir, found, _written_by(data_dir))
        steps = [(n, MIGRATIONS[n]) for n in range(found, STORAGE_FORMAT)]
        if snapshot and any(step.rewrites for _, step in steps):
            snapshot_before(data_dir, found)
        done = []
        for n, step in steps:
            step.apply(settings)
            record_format(data_dir, n + 1)  # a crash resumes from the next step
            done.append(f"format {n} -> {n + 1}: {step.description}")
        return done


def is_pre_migration(snapshot: Path) -> bool:
    """Whether a snapshot file is one `snapshot_before` wrote (named `<id>-format<N>.tar`)."""
    return PRE_MIGRATION in snapshot.stem


def snapshot_before(data_dir: Path, found: int) -> Path:
    """The data dir as it is, in format `found`, written to its `snapshots/` folder (the
    leg counts are not read: this version may not open that format's stores)."""
    now = time.time()
    snap_id = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S") + f"{PRE_MIGRATION}{found}"
    out = data_dir / "snapshots" / f"{snap_id}.tar"

    def manifest_of(members: list[SnapshotMember]) -> SnapshotManifest:
        return SnapshotManifest(
            id=snap_id,
            created_at=now,
            ragstream_version=ragstream_version(),
            storage_format=found,
            embedder=None,
            collection=None,
            counts=None,
            members=members,
        )

    write_snapshot(data_dir, out, manifest_of)
    return out
