"""The collections one process owns: the live side and, while a reindex is open, the other.

Ingest writes every change to each open side, each with its own embedder (dual-write), and
queries served from the same process ask `current()` once per query, so they always search
one side with the embedder recorded on it. Which side is live is the live pointer's business
(an atomic file replace for Qdrant Edge, an alias for a server); `<state_dir>/reindex.json`
only says that a second side exists and how to load its embedder.

The live side is always opened with the embedder *recorded on it*, never the one in settings:
`settings.embedder` chooses the model of a brand-new index, and an existing index changes model
only through a reindex. Otherwise editing the setting would silently start a second, empty
collection that nothing queries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ragstream.connectors.fields import FieldCatalog
from ragstream.connectors.protocols import VectorStore
from ragstream.connectors.state import ReindexBook
from ragstream.connectors.stores import (
    PointerFollower,
    configured_live,
    open_configured,
    set_live_collection,
)
from ragstream.connectors.vector_stores import collection_name
from ragstream.core.models import EmbedderVersion, ReindexRecord
from ragstream.core.rwlock import IndexLock
from ragstream.core.settings import Settings
from ragstream.operators.embed import Embedder, check_version, embedder_spec, open_embedder


@dataclass(frozen=True)
class Side:
    """One open collection with the embedder that fills it."""

    collection: str
    embedder: Embedder
    vectors: VectorStore
    spec: str  # how `load_embedder` loads `embedder` again (recorded in reindex.json)


class IndexSides:
    """Every side this process writes. `lock` (an `IndexLock`) lets one writer in at a
    time (an index batch, a backfill page, a pointer swap) and keeps the queries served from
    the same process out only while the stores change; they read together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.book = ReindexBook(settings.state_dir)
        self.lock = IndexLock()
        self._refresh = threading.Lock()  # a query that found the server's alias moved
        self._sides: dict[str, Side] = {}
        self._live = ""
        self._follower: PointerFollower[Side] | None = None  # a server's alias, followed
        self.record: ReindexRecord | None = None

    # ---- opening ----------------------------------------------------------------------
    def load(self) -> None:
        """Open the live side (creating the index on first use) and the other side of an
        open reindex."""
        s = self.settings
        live = configured_live(s)
        if live is None:
            side = self.open_side(s.embedder)
            self._live = side.collection
        else:
            self._live = self._open_recorded(live[0], live[1], embedder_spec(live[1])).collection
        self.record = self.book.load()
        if self.record is not None:
            pair = {self.record.old.collection, self.record.new.collection}
            if self._live not in pair:
                raise RuntimeError(
                    f"reindex.json pairs {sorted(pair)} but the live collection is "
                    f"{self._live!r}; inspect {self.book.path} and remove it if stale"
                )
            for part in (self.record.old, self.record.new):
                self._open_recorded(part.collection, part.embedder, part.spec)
        if s.store.vector_backend == "qdrant" and s.store.qdrant_url not in (None, ":memory:"):
            self._follower = PointerFollower(
                s,
                (self._live, self.live),
                lambda name, recorded: self._open_recorded(name, recorded, embedder_spec(recorded)),
            )

    def open_side(self, spec: str, dimension: int | None = None) -> Side:
        """Open (creating if missing) the collection of the embedder `spec` loads
        (`dimension`: the one recorded with it, for a remote model)."""
        embedder = open_embedder(spec, self.settings, dimension)
        name = collection_name(self.settings.store.index_name, embedder.version)
        if name not in self._sides:
            s = self.settings
            store = open_configured(s, embedder.version)
            # every metadata field known so far gets its payload index on this side too
            # (a reindex's new side fills by copy; the indexer adds a new field's on write)
            store.index_fields(FieldCatalog(s.state_dir).types())
            self._sides[name] = Side(name, embedder, store, spec)
        return self._sides[name]

    def _open_recorded(self, collection: str, recorded: EmbedderVersion, spec: str) -> Side:
        if collection in self._sides:
            return self._sides[collection]
        embedder = open_embedder(spec, self.settings, recorded.dimension)
        check_version(collection, recorded, embedder.version)
        side = self.open_side(spec, recorded.dimension)
        if side.collection != collection:
            raise RuntimeError(f"collection {collection!r} is not named for {recorded.slug}")
        return side

    # ---- views ------------------------------------------------------------------------
    @property
    def live(self) -> Side:
        return self._sides[self._live]

    def current(self) -> Side:
        """The side a query searches now (`query.retrieve.SideSource`).

        On a Qdrant server another process (the sync worker) may swap the alias, so it is
        followed (`connectors.stores.PointerFollower`, read on every query); an embedded
        pointer only ever changes in this process.
        """
        if self._follower is not None:
            followed = self._follower.current()
            if followed.collection != self._live:
                with self._refresh:  # queries hold the read lock: never the writers' one here
                    self._live = followed.collection
                    self.record = self.book.load()
        return self.live

    @property
    def others(self) -> tuple[Side, ...]:
        """Sides that receive every write but serve no query (the other side of a reindex)."""
        if self.record is None:
            return ()
        names = (self.record.old.collection, self.record.new.collection)
        return tuple(self._sides[n] for n in names if n != self._live)

    def side(self, collection: str) -> Side:
        return self._sides[collection]

    # ---- changes (callers hold `lock`) -------------------------------------------------
    def set_record(self, record: ReindexRecord | None) -> None:
        if record is None:
            self.book.clear()
        else:
            self.book.save(record)
        self.record = record

    def point_live(self, collection: str) -> None:
        """The atomic switch: flush the target, then swap the pointer/alias."""
        target = self._sides[collection]
        target.vectors.flush()
        s = self.settings
        set_live_collection(
            s.store.vector_backend,
            s.vectors_dir,
            s.store.index_name,
            collection,
            s.store.qdrant_url,
        )
        self._live = collection

    def close_side(self, collection: str) -> None:
        side = self._sides.pop(collection, None)
        if side is not None:
            side.vectors.close()

    def close(self) -> None:
        for name in list(self._sides):
            self.close_side(name)


@contextmanager
def open_sides(settings: Settings) -> Iterator[IndexSides]:
    sides = IndexSides(settings)
    try:
        sides.load()
        yield sides
    finally:
        sides.close()
