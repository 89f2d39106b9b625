"""The points of a snapshot where they are not the data dir's own files: a server-backed
index (`store.qdrant_url`) is snapshotted by reading each of its collections through the
store (a scroll, vectors included) into a points file, and a restore whose target stores
are not the snapshot's (a server target, or a server's snapshot restored embedded) upserts
every point into them, a page at a time, embedding nothing.

Qdrant's own collection snapshots are written on the server's disk and read back by URL,
which a ragstream process cannot reach in general (and qdrant-client's local mode has no
snapshot API): the scroll works against any server, and the snapshot file stays one whole,
checksummed file (docs/guide/snapshots.md, "A server-backed deployment")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from ragstream.connectors.snapshot_files import (
    POINTS_DIR,
    POINTS_SUFFIX,
    SHARD_SUFFIX,
    PointPage,
    PointsHeader,
    points_files,
    read_points,
    write_points,
)
from ragstream.connectors.stores import (
    list_collections,
    live_collection,
    open_vector_store,
    set_live_collection,
)
from ragstream.connectors.vector_stores import BaseQdrantStore, RetryPolicy, collection_name
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import EmbedderVersion
from ragstream.core.settings import Settings
from ragstream.core.snapshot import SnapshotManifest

SOURCE_VECTORS = ".snapshot-vectors"  # an embedded snapshot's stores, read into a server


def on_server(settings: Settings) -> bool:
    """Whether the vectors of `settings` live in a Qdrant server, not in the data dir."""
    return settings.store.vector_backend == "qdrant" and settings.store.qdrant_url is not None


def point_members(settings: Settings, scratch: Path) -> Iterator[tuple[str, Path]]:
    """Every collection of the server-backed index as a points file written under
    `scratch`: (member name, file). The caller keeps writers out meanwhile."""
    s = settings
    kind, base, url = s.store.vector_backend, s.vectors_dir, s.store.qdrant_url
    for collection, embedder in list_collections(kind, base, s.store.index_name, url).items():
        store = open_vector_store(
            kind, base, s.store.index_name, embedder, url, RetryPolicy.from_settings(s),
            sparse=s.lexical == "sparse",
        )  # fmt: skip
        try:
            out = scratch / f"{collection}{POINTS_SUFFIX}"
            write_points(out, PointsHeader(collection=collection, embedder=embedder),
                         store.point_pages())  # fmt: skip
        finally:
            store.close()
        yield f"{POINTS_DIR}/{out.name}", out


def refuse_a_held_server(settings: Settings) -> None:
    """A restore onto a server writes the index's collections there: refused while the
    server already holds any of them (drop them, or restore under another index name)."""
    if not on_server(settings):
        return
    s = settings
    kind, base, url = s.store.vector_backend, s.vectors_dir, s.store.qdrant_url
    held = list_collections(kind, base, s.store.index_name, url)
    if held or live_collection(kind, base, s.store.index_name, url) is not None:
        raise InvalidRequestError(
            f"the Qdrant server at {url} already holds index {s.store.index_name!r} "
            f"({', '.join(held) or 'its alias'}): restore into an empty server, drop those "
            "collections first, or set another store.index_name"
        )


def load_points(there: Settings, manifest: SnapshotManifest) -> int:
    """Put the unpacked snapshot's points into the stores `there` opens when they are not
    already its own files: a server's points files into any target, an embedded
    snapshot's stores into a server. Points written (0: nothing to move)."""
    into = there.data_dir
    if points_files(into):
        sources = [read_points(f) for f in points_files(into)]
        written = _write_all(there, sources, manifest)
        shutil.rmtree(into / POINTS_DIR)
        return written
    if not on_server(there) or not (into / "vectors").is_dir():
        return 0
    held = into / SOURCE_VECTORS
    (into / "vectors").rename(held)
    try:
        shards = any(m.name.endswith(SHARD_SUFFIX) for m in manifest.members)
        return _from_embedded(there, "edge" if shards else "qdrant", held, manifest)
    finally:
        shutil.rmtree(held, ignore_errors=True)


def _from_embedded(there: Settings, kind: str, held: Path, manifest: SnapshotManifest) -> int:
    """The embedded stores unpacked under `held` (of backend `kind`) written into `there`."""
    index = there.store.index_name
    opened: list[BaseQdrantStore] = []
    try:
        sources = []
        for embedder in list_collections(kind, held, index).values():
            store = open_vector_store(kind, held, index, embedder, sparse=there.lexical == "sparse")
            opened.append(store)
            header = PointsHeader(collection=store.collection, embedder=embedder)
            sources.append((header, store.point_pages()))
        return _write_all(there, sources, manifest)
    finally:
        for store in opened:
            store.close()


def _write_all(
    there: Settings,
    sources: list[tuple[PointsHeader, Iterator[PointPage]]],
    manifest: SnapshotManifest,
) -> int:
    """Each source's points upserted into the collection of its embedder that `there`
    opens (named as the snapshot's, so the index name must be the snapshot's)."""
    s = there
    kind, base, url = s.store.vector_backend, s.vectors_dir, s.store.qdrant_url
    written = 0
    for header, pages in sources:
        _check_named(there, header.collection, header.embedder)
        store = open_vector_store(
            kind, base, s.store.index_name, header.embedder, url, RetryPolicy.from_settings(s),
            sparse=s.lexical == "sparse",
        )  # fmt: skip
        try:
            for page in pages:
                store.upsert([c for c, _ in page], [v for _, v in page])
                written += len(page)
            store.flush()
        finally:
            store.close()
    if manifest.collection is not None:  # the collection the snapshot was live on
        set_live_collection(kind, base, s.store.index_name, manifest.collection, url)
    return written


def _check_named(there: Settings, collection: str, embedder: EmbedderVersion) -> None:
    if collection_name(there.store.index_name, embedder) != collection:
        raise InvalidRequestError(
            f"the snapshot holds collection {collection}, not one of index "
            f"{there.store.index_name!r}: restore with store.index_name set to the "
            "snapshot's index name"
        )


def read_back(settings: Settings, manifest: SnapshotManifest) -> Settings:
    """`settings` for reading a snapshot back in a scratch dir (`snapshot verify`): never a
    server's stores; a snapshot of Edge shards or of a server's points is read as Edge."""
    names = [m.name for m in manifest.members]
    moved = any(n.endswith(SHARD_SUFFIX) or n.startswith(f"{POINTS_DIR}/") for n in names)
    kind = "edge" if moved else settings.store.vector_backend
    store = settings.store.model_copy(update={"qdrant_url": None, "vector_backend": kind})
    return settings.model_copy(update={"store": store})
