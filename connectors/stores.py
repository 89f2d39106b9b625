"""Opening a store by its kind: the one place that picks an implementation.

`open_vector_store`, the live pointer and the collection functions go to the Qdrant backend a
kind names (`connectors.backends`: `edge` or `qdrant`); `open_lexical_index` opens the BM25
index a kind names (`tantivy` or `rank-bm25` from `connectors.lexical`, `sparse` from
`connectors.sparse`). No module it picks among imports this one, so choosing an
implementation never closes an import cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from ragstream.connectors.backends import backend_of as _backend
from ragstream.connectors.data_format import ensure_format
from ragstream.connectors.lexical import RankBM25Index, TantivyIndex
from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.sparse import SparseLexicalIndex
from ragstream.connectors.vector_stores import BaseQdrantStore, RetryPolicy
from ragstream.core.models import EmbedderVersion
from ragstream.core.settings import Settings

S = TypeVar("S")  # what a side is to the process that follows the pointer

# --- vector stores and the live pointer ------------------------------------------------------


def open_vector_store(
    kind: str,
    base_dir: Path,
    index_name: str,
    embedder: EmbedderVersion,
    url: str | None = None,
    retry: RetryPolicy | None = None,
    sparse: bool = False,
) -> BaseQdrantStore:
    """Open (creating if missing) the collection of `embedder`; the first one becomes live.

    Returns a `VectorStore` (plus `.collection` and `.flush()`).

    `kind="edge"`: shards under `base_dir` (no url). `kind="qdrant"`: `url=None` is local mode
    persisted at `base_dir`, `url=":memory:"` is in-memory, anything else a server URL.
    `retry` (qdrant only; default: the settings' defaults) bounds how long transient store
    errors are retried before `StoreUnavailableError`. `sparse`: the points also carry the
    BM25 leg as the sparse vector `bm25` (`store.lexical_backend = "sparse"`); a collection created
    without it cannot gain it (reindex into a new one).
    """
    backend = _backend(kind)
    store = backend.open_store(Path(base_dir), index_name, embedder, url, retry, sparse)
    try:
        if backend.read_live(Path(base_dir), index_name, url) is None:
            backend.write_live(Path(base_dir), index_name, store.collection, url)
    except BaseException:
        store.close()
        raise
    return store


def live_collection(
    kind: str, base_dir: Path, index_name: str, url: str | None = None
) -> tuple[str, EmbedderVersion] | None:
    """(live collection, its embedder version), read from metadata only; None if no pointer."""
    return _backend(kind).read_live(Path(base_dir), index_name, url)


def set_live_collection(
    kind: str, base_dir: Path, index_name: str, collection: str, url: str | None = None
) -> None:
    """Atomically point `<index>` at an existing collection (the blue/green switch)."""
    _backend(kind).write_live(Path(base_dir), index_name, collection, url)


def open_configured(settings: Settings, embedder: EmbedderVersion) -> BaseQdrantStore:
    """`open_vector_store` with the backend, location, index and retry policy of `settings`,
    once the data dir is at the current storage format (a new one records it)."""
    s = settings
    ensure_format(s, creating=True)
    return open_vector_store(
        s.store.vector_backend,
        s.vectors_dir,
        s.store.index_name,
        embedder,
        url=s.store.qdrant_url,
        retry=RetryPolicy.from_settings(s),
        sparse=s.lexical == "sparse",
    )


def configured_live(settings: Settings) -> tuple[str, EmbedderVersion] | None:
    """`live_collection` of the index `settings` describe, once its data dir is at the
    current storage format (`connectors.data_format`)."""
    s = settings
    ensure_format(s)
    return live_collection(
        s.store.vector_backend, s.vectors_dir, s.store.index_name, s.store.qdrant_url
    )


def drop_collection(
    kind: str, base_dir: Path, index_name: str, collection: str, url: str | None = None
) -> bool:
    """Delete one collection of `index_name` (blue/green cleanup); False if it was not there.

    Never the live one (ValueError: switch the pointer first) and never one open in this
    process (StoreBusyError); a name outside this index is refused, not interpreted.
    """
    return _backend(kind).drop(Path(base_dir), index_name, collection, url)


def list_collections(
    kind: str, base_dir: Path, index_name: str, url: str | None = None
) -> dict[str, EmbedderVersion]:
    """Collection name -> recorded embedder version, for every collection of `index_name`."""
    return _backend(kind).list(Path(base_dir), index_name, url)


class PointerFollower(Generic[S]):
    """The one follower of an index's live pointer (Qdrant Edge's pointer file, a server's
    alias), for a process that did not move it: `current()` reads the pointer and hands out
    the side it names, opened once by `open_side(collection, recorded)`. A side a swap leaves
    is kept, so a rollback reuses it; with `keep`, those more than `keep` swaps old go to
    `retire` (a query may still read the side it pinned). A pointer that is gone raises
    `missing()` when given, else the side held stays. The query engine's `PointerTracker`
    and the writer's `IndexSides` both follow through one."""

    def __init__(
        self,
        settings: Settings,
        first: tuple[str, S],
        open_side: Callable[[str, EmbedderVersion], S],
        *,
        keep: int | None = None,
        retire: Callable[[S], None] = lambda side: None,
        missing: Callable[[], Exception] | None = None,
    ) -> None:
        self._settings, self._open, self._retire, self._missing = (
            settings,
            open_side,
            retire,
            missing,
        )
        self._keep = keep
        self._lock = threading.Lock()
        self._name, self._side = first
        self._left: list[tuple[str, S]] = []

    @property
    def collection(self) -> str:
        """The collection of the side handed out last."""
        return self._name

    def current(self) -> S:
        live = configured_live(self._settings)
        if live is None:
            if self._missing is not None:
                raise self._missing()
            return self._side
        with self._lock:
            if live[0] != self._name:
                back = [side for name, side in self._left if name == live[0]]  # a rollback
                self._left = [(n, side) for n, side in self._left if n != live[0]]
                self._left.append((self._name, self._side))
                self._side = back[0] if back else self._open(*live)
                self._name = live[0]
                while self._keep is not None and len(self._left) > self._keep:
                    self._retire(self._left.pop(0)[1])
            return self._side

    def held(self) -> list[S]:
        """Every side this follower holds: the current one last."""
        with self._lock:
            return [side for _, side in self._left] + [self._side]


# --- lexical indexes -------------------------------------------------------------------------


def open_lexical_index(
    kind: str, path: Path, vectors: Callable[[], VectorStore] | None = None
) -> LexicalIndex:
    """`tantivy` (default, incremental, on disk), `rank-bm25` (exact reference), or `sparse`
    (BM25 as a sparse vector in the vector store's points: `vectors` names the live store)."""
    if kind == "tantivy":
        return TantivyIndex(path)
    if kind == "rank-bm25":
        return RankBM25Index(path)
    if kind == "sparse":
        if vectors is None:
            raise ValueError("the sparse lexical leg lives in a vector store: pass `vectors`")
        return SparseLexicalIndex(vectors)
    raise ValueError(f"unknown lexical index {kind!r}: expected 'tantivy', 'rank-bm25' or 'sparse'")
