"""A snapshot of a data dir: its manifest (what the one file holds, each member's checksum,
the counts of both legs it was taken at) and what `snapshot list` / `create` report, the
storage format version this ragstream writes, and the installed ragstream version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from pydantic import BaseModel, ConfigDict

SNAPSHOT_FORMAT = "ragstream-snapshot/1"
# the layout of a data dir's stores and state (recorded in `state/format.json`); a snapshot
# records the one it was taken from. Raise it with a migration step in
# `connectors.data_format.MIGRATIONS` whenever a stored layout changes.
STORAGE_FORMAT = 3


def ragstream_version() -> str:
    """The installed ragstream's version ("0+unknown" when run from a tree not installed)."""
    try:
        return version("ragstream")
    except PackageNotFoundError:
        return "0+unknown"


class SnapshotMember(BaseModel):
    """One file of the snapshot: its path under the data dir, size and SHA-256."""

    model_config = ConfigDict(frozen=True)

    name: str
    size: int
    sha256: str


class LegCounts(BaseModel):
    """Points of the live collection (dense leg) and documents of the lexical leg."""

    model_config = ConfigDict(frozen=True)

    chunks_live: int
    chunks_deleted: int
    lexical_live: int


class SnapshotManifest(BaseModel):
    """What a snapshot file holds, written as its last member."""

    model_config = ConfigDict(extra="forbid")

    format: str = SNAPSHOT_FORMAT
    id: str
    created_at: float
    ragstream_version: str
    storage_format: int = STORAGE_FORMAT
    embedder: str | None  # the live side's embedder tag (slug)
    collection: str | None  # the live collection
    # None: taken before a migration, of stores in an older format this version does not
    # count (verify checks its checksums only)
    counts: LegCounts | None
    members: list[SnapshotMember]


class SnapshotInfo(BaseModel):
    """A snapshot file as `snapshot list` and `create` report it."""

    id: str
    path: str
    size: int
    created_at: float
    embedder: str | None
    counts: LegCounts | None
    storage_format: int = STORAGE_FORMAT
