"""What the two Qdrant vector stores share: naming, payload, filters, protocol logic, retries.

`EdgeVectorStore` (embedded Qdrant Edge) and `QdrantClientVectorStore` (qdrant-client: server or
local mode) differ only in how they talk to their engine. Everything that decides *behaviour*
(batching, soft-delete semantics, GC, fingerprints, filter meaning, hit order) lives here in
`BaseQdrantStore`, and each backend only implements a handful of primitives over pure-data
`Condition`s. That is what keeps the two congruent (tests/unit/connectors/test_vector_stores.py).

Layout: one collection per embedder version, named `<index>__<embedder.slug>`, and a live
pointer `<index>` naming the one queries use. The embedder version a collection was built with
is stored as collection metadata `{"embedder": {...}}`, so `connectors.stores.live_collection` can
tell the query side which model to load without loading any model (docs/architecture.md,
"Stores"). Opening a store of a kind is `connectors.stores`'s: this module imports no backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ragstream.connectors.lexical import tokenize
from ragstream.connectors.protocols import (
    STALE_FINGERPRINT,
    Hit,
    ParserKeys,
    SearchFilter,
    parsed_elsewise,
)
from ragstream.connectors.sparse import Sparse, bm25_vector, query_vector
from ragstream.core.errors import DataDirBusyError
from ragstream.core.filters import Where, meta_key
from ragstream.core.ids import doc_prefixes, prefix_key
from ragstream.core.metadata import FieldType
from ragstream.core.models import EmbedderVersion, FileFingerprint, IndexedChunk, version_token
from ragstream.core.settings import Settings, StoreSettings

VECTOR = "dense"  # the one named dense vector of every collection (room for a sparse one later)
KEYWORD_FIELDS = (
    "doc_id",
    "source",
    "status",
    "content_hash",
    "tenant",
    "readers",
    "file_type",
    "doc_prefixes",
)
FLOAT_FIELDS = ("deleted_at",)
# What `set_positions` refreshes on a kept vector: where the chunk now sits, and the doc-level
# fields that can change without its text changing (title, the file version it belongs to,
# the parser key it was read under) (and an OCR'd chunk's reading: where its text came from,
# its box, the engine's confidence)
POSITION_FIELDS: tuple[str, ...] = ("ordinal", "section_path", "page", "char_start", "char_end")
POSITION_FIELDS += ("origin", "bbox", "ocr_confidence")
DOC_FIELDS: tuple[str, ...] = (
    "title",
    "file_size",
    "file_mtime_ns",
    "file_digest",
    "file_commit",
    "indexed_at",
    "vector_origin",
    "pages",
    "ocr_pages",
    "parser",
    "readers",
    "readers_fp",
    "readers_reason",
    "meta",
    "meta_origin",
    "meta_notes",
)
READER_FIELDS = ("readers", "readers_fp", "readers_reason")  # a re-stamp's payload
DF_CAP = 1000  # `term_doc_freqs` counts a term's points up to this many
SPARSE = "bm25"  # the named sparse vector of the BM25 leg
BATCH = 256  # points per write call: one engine round trip per batch, bounded memory
PAGE = 1024  # points per scroll page


class StoreBusyError(DataDirBusyError):
    """The embedded data dir is held by another client/process (one process owns it)."""


def collection_name(index_name: str, embedder: EmbedderVersion) -> str:
    return f"{index_name}__{embedder.slug}"


def embedder_metadata(embedder: EmbedderVersion) -> dict[str, Any]:
    return {"embedder": embedder.model_dump(mode="json")}


def embedder_from_metadata(collection: str, metadata: dict[str, Any] | None) -> EmbedderVersion:
    if not metadata or "embedder" not in metadata:
        raise RuntimeError(f"collection {collection!r} has no embedder metadata")
    return EmbedderVersion.model_validate(metadata["embedder"])


def check_embedder(collection: str, stored: EmbedderVersion, wanted: EmbedderVersion) -> None:
    """Two versions with one slug would mix vector spaces in one collection: refuse."""
    if stored != wanted:
        raise RuntimeError(f"collection {collection!r} holds {stored}, not {wanted}")


# --- payload <-> IndexedChunk ----------------------------------------------------------------


def chunk_payload(chunk: IndexedChunk, keep_lexical: bool = False) -> dict[str, Any]:
    """The BM25-only neighbour text stays out of the vector store unless the BM25 leg lives
    there too (`sparse`): a blue/green backfill re-derives each point's sparse vector from it."""
    drop = {"point_id"} if keep_lexical else {"point_id", "lexical_context"}
    payload = chunk.model_dump(mode="json", exclude=drop)
    payload["doc_prefixes"] = doc_prefixes(chunk.doc_id)
    if chunk.status != "live":  # a tombstone is nobody's to read (`tombstone`)
        payload["readers"] = []
    return payload


_CHUNK_FIELDS = frozenset(IndexedChunk.model_fields)  # read once: pydantic builds it per access


def payload_chunk(point_id: str, payload: dict[str, Any]) -> IndexedChunk:
    fields = {k: v for k, v in payload.items() if k in _CHUNK_FIELDS}
    return IndexedChunk.model_validate({**fields, "point_id": point_id})


# --- filters as pure data (each backend translates them to its own classes) ------------------


@dataclass(frozen=True)
class Match:
    key: str
    value: str


@dataclass(frozen=True)
class MatchIn:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Below:
    key: str
    value: float


@dataclass(frozen=True)
class HasIds:
    ids: tuple[str, ...]


IndexKind = Literal["keyword", "integer", "float", "datetime"]
# the payload index of each metadata field type (a bool is the keyword "true" / "false")
INDEX_KIND: dict[FieldType, IndexKind] = {
    "keyword": "keyword",
    "keywords": "keyword",
    "bool": "keyword",
    "integer": "integer",
    "float": "float",
    "datetime": "datetime",
}


# a `Where` (core.filters: a user's filter, checked) is a condition too, translated whole
Condition = Match | MatchIn | Below | HasIds | Where
LIVE = Match("status", "live")


def search_conditions(flt: SearchFilter, status: str = "live") -> list[Condition] | None:
    """The store-side filter of a search (all conditions must hold) over points of `status`
    (a count may ask for tombstones; a `readers` allow-list implies live:
    `SearchFilter.status_condition`); None = matches nothing.

    An empty allow-list (e.g. `tenants=()`) allows nothing: it must never widen to "all".
    """
    held = flt.status_condition(status)
    conds: list[Condition] = [] if held is None else [Match("status", held)]
    allow = (
        ("doc_id", flt.doc_ids),
        ("tenant", flt.tenants),
        ("readers", flt.readers),
        ("file_type", flt.file_types),
    )
    for key, values in allow:
        if values is not None:
            if not values:
                return None
            conds.append(MatchIn(key, tuple(values)))
    if flt.path_prefix is not None:
        conds.append(Match("doc_prefixes", prefix_key(flt.path_prefix)))
    if flt.where is not None:
        conds.append(flt.where)
    return conds


class Record(NamedTuple):
    id: str
    payload: dict[str, Any]
    vector: list[float] | None


def dense_vector(vector: object) -> list[float] | None:
    """The dense vector out of a record's named vectors ({"dense": [...]}) in either engine."""
    dense = vector.get(VECTOR) if isinstance(vector, dict) else None
    return [float(x) for x in dense] if isinstance(dense, list) else None


def batches(items: Sequence[str], size: int = BATCH) -> Iterator[tuple[str, ...]]:
    for start in range(0, len(items), size):
        yield tuple(items[start : start + size])


class BaseQdrantStore(ABC):
    """The `VectorStore` protocol on top of a few engine primitives (see module docstring).

    Payload updates go through filters (`HasIds`) rather than id lists: both engines reject
    an id list naming a point that no longer exists, and at-least-once replay after GC must
    not crash. Tombstoning matches only live points, so a replay does not push back the
    `deleted_at` of a point already tombstoned.
    """

    def __init__(self, collection: str, embedder: EmbedderVersion, sparse: bool = False) -> None:
        self.collection = collection
        self.embedder = embedder
        # the BM25 leg lives in these points as the sparse vector `bm25` (connectors.sparse)
        self.sparse = sparse
        self._closed = False
        self._indexed: set[str] | None = None  # payload keys with an index (read once)

    # primitives -------------------------------------------------------------------------
    @abstractmethod
    def _write(
        self,
        ids: list[str],
        vectors: list[list[float]],
        payloads: list[dict[str, Any]],
        sparse: list[Sparse] | None,
    ) -> None: ...

    @abstractmethod
    def _set_sparse(self, ids: list[str], sparse: list[Sparse]) -> None:
        """Replace the `bm25` sparse vector of existing points (their text context moved)."""

    @abstractmethod
    def _query_sparse(
        self, query: Sparse, limit: int, conds: list[Condition], with_payload: bool
    ) -> list[tuple[Record, float]]: ...

    @abstractmethod
    def _set_payload(self, conds: list[Condition], payload: dict[str, Any]) -> None: ...

    @abstractmethod
    def _delete(self, conds: list[Condition]) -> None: ...

    @abstractmethod
    def _count(self, conds: list[Condition]) -> int: ...

    @abstractmethod
    def _scroll_page(
        self,
        conds: list[Condition],
        fields: list[str] | None,
        with_vector: bool,
        offset: str | None,
        limit: int,
    ) -> tuple[list[Record], str | None]:
        """One page of matching points; `fields=None` = whole payload; next offset or None."""

    @abstractmethod
    def _retrieve(self, ids: list[str]) -> list[Record]: ...

    @abstractmethod
    def _query(
        self, vector: list[float], limit: int, conds: list[Condition]
    ) -> list[tuple[Record, float]]: ...

    @abstractmethod
    def _flush(self) -> None: ...

    @abstractmethod
    def _close(self) -> None: ...

    @abstractmethod
    def _optimize(self) -> None:
        """Build the engine's search structures (Edge: the HNSW graph); a no-op where the
        engine optimizes by itself."""

    @abstractmethod
    def _index_schema(self) -> set[str]:
        """The payload keys this collection has an index on."""

    @abstractmethod
    def _add_index(self, key: str, kind: IndexKind) -> None:
        """Create a payload index of `kind` on `key` (idempotent)."""

    def index_fields(self, fields: Mapping[str, FieldType]) -> None:
        """A payload index of the right kind on each metadata field (`meta.<name>`) that has
        none yet: keyword (keywords and bools too), integer, float or datetime."""
        if self._indexed is None:
            self._indexed = self._index_schema()
        for name, field_type in fields.items():
            key = meta_key(name)
            if key not in self._indexed:
                self._add_index(key, INDEX_KIND[field_type])
                self._indexed.add(key)

    # protocol ---------------------------------------------------------------------------
    def upsert(self, chunks: Sequence[IndexedChunk], vectors: Sequence[Sequence[float]]) -> None:
        """Idempotent write by point id; every point is stamped with this store's embedder."""
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        for start in range(0, len(chunks), BATCH):
            part = chunks[start : start + BATCH]
            vecs = [self._vector(v) for v in vectors[start : start + BATCH]]
            stamped = [c.model_copy(update={"embedder": self.embedder.slug}) for c in part]
            payloads = [chunk_payload(c, self.sparse) for c in stamped]
            sparse = [bm25_vector(c) for c in part] if self.sparse else None
            self._write([c.point_id for c in part], vecs, payloads, sparse)

    def set_fingerprint(
        self, point_ids: Sequence[str], fingerprint: FileFingerprint, indexed_at: float
    ) -> None:
        update = {
            "file_size": fingerprint.size,
            "file_mtime_ns": fingerprint.mtime_ns,
            "file_digest": fingerprint.digest,
            "file_commit": fingerprint.commit,
            "indexed_at": float(indexed_at),
            "vector_origin": "kept",  # only kept points get a new version without a write
        }
        for ids in batches(point_ids):
            self._set_payload([HasIds(ids)], update)

    def set_readers(self, chunks: Sequence[IndexedChunk]) -> None:
        """Payload-only update of who may read each chunk (a permission change: nothing
        re-read, nothing re-embedded). Live points only: a tombstone never gets readers
        back (a search filtered by readers sends no status condition)."""
        for chunk in chunks:
            payload = chunk_payload(chunk, self.sparse)
            update = {k: payload[k] for k in READER_FIELDS}
            self._set_payload([HasIds((chunk.point_id,)), LIVE], update)

    def readable_docs(self, readers: Sequence[str], doc_id: str | None = None) -> set[str]:
        """The doc ids (of `doc_id` alone, when given) with a live point whose `readers`
        hold one of `readers` (filtered in the store, as a search is)."""
        only = (doc_id,) if doc_id is not None else None
        return self.live_docs(SearchFilter(readers=tuple(readers), doc_ids=only))

    def live_docs(self, flt: SearchFilter) -> set[str]:
        """The doc ids with a live point matching the filter (one payload field read)."""
        conds = search_conditions(flt)
        if conds is None:
            return set()
        return {str(r.payload["doc_id"]) for r in self._scroll_all(conds, ["doc_id"], False)}

    def live_payloads(self, flt: SearchFilter, keys: Sequence[str]) -> Iterator[dict[str, Any]]:
        """The `keys` of every live point matching the filter, a page at a time."""
        conds = search_conditions(flt)
        if conds is not None:
            for record in self._scroll_all(conds, list(keys), False):
                yield record.payload

    def live_doc_readers(self) -> dict[str, set[str]]:
        """doc_id -> the readers fingerprints over its live points (the catch-up scan's
        view of the permission stamps)."""
        out: dict[str, set[str]] = {}
        for r in self._scroll_all([LIVE], ["doc_id", "readers_fp"], False):
            out.setdefault(str(r.payload["doc_id"]), set()).add(r.payload.get("readers_fp") or "")
        return out

    def set_positions(self, chunks: Sequence[IndexedChunk]) -> None:
        fields = POSITION_FIELDS + DOC_FIELDS + (("lexical_context",) if self.sparse else ())
        for chunk in chunks:  # live points only, as `set_readers` (DOC_FIELDS hold readers)
            payload = chunk_payload(chunk, self.sparse)
            self._set_payload([HasIds((chunk.point_id,)), LIVE], {k: payload[k] for k in fields})
        if self.sparse and chunks:  # a moved or retitled chunk's BM25 text changed too
            for start in range(0, len(chunks), BATCH):
                part = chunks[start : start + BATCH]
                self._set_sparse([c.point_id for c in part], [bm25_vector(c) for c in part])

    def search_text(self, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        """BM25 top-`limit` over live points matching the filter (the sparse leg)."""
        self._need_sparse()
        conds = search_conditions(flt)
        terms = tokenize(query)
        if conds is None or limit <= 0 or not terms:
            return []
        scored = self._query_sparse(query_vector(terms), limit, conds, True)
        hits = [Hit(chunk=payload_chunk(r.id, r.payload), score=s) for r, s in scored]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.point_id))

    def term_doc_freqs(self, terms: Sequence[str], cap: int = DF_CAP) -> tuple[int, dict[str, int]]:
        """(points, analyzed term -> points holding it, counted up to `cap`): Qdrant keeps
        its IDF statistics to itself, so a term's frequency is read as the number of points a
        one-term query matches. Past `cap` a term is common enough that its weight is ~0."""
        self._need_sparse()
        out = {}
        for term in set(terms):
            got = self._query_sparse(query_vector([term]), cap, [], False)
            out[term] = len(got)
        return self._count([]), out

    def _need_sparse(self) -> None:
        if not self.sparse:
            raise RuntimeError(f"{self.collection} was opened without its BM25 sparse vectors")

    def tombstone(self, point_ids: Sequence[str], deleted_at: float) -> None:
        """Soft delete; the point's `readers` are cleared with it, so that a `readers`
        allow-list alone matches live points only (`SearchFilter.status_condition`)."""
        for ids in batches(point_ids):
            update = {"status": "deleted", "deleted_at": float(deleted_at), "readers": []}
            self._set_payload([HasIds(ids), LIVE], update)

    def clear_tombstone_readers(self) -> int:
        """Clear the `readers` of every tombstone (points tombstoned before `tombstone`
        cleared them: the storage format 2 migration); how many tombstones there are."""
        deleted: list[Condition] = [Match("status", "deleted")]
        n = self._count(deleted)
        if n:
            self._set_payload(deleted, {"readers": []})
        return n

    def rewrite_bm25(self) -> int:
        """Recompute every point's BM25 sparse vector from its stored text, live and
        tombstoned alike (the analyzer changed: the storage format 3 migration); nothing is
        embedded. How many points were rewritten."""
        self._need_sparse()
        done = 0
        ids: list[str] = []
        vectors: list[Sparse] = []
        for record in self._scroll_all([], None, False):
            ids.append(str(record.id))
            vectors.append(bm25_vector(payload_chunk(str(record.id), record.payload)))
            if len(ids) >= BATCH:
                self._set_sparse(ids, vectors)
                done, ids, vectors = done + len(ids), [], []
        if ids:
            self._set_sparse(ids, vectors)
        return done + len(ids)

    def optimize(self) -> None:
        """Build the HNSW graph over what the collection holds (`ragstream optimize`):
        minutes per 100k points, after which a search, filtered or not, walks the graph
        instead of scanning every point (docs/benchmarks.md, "Metadata filters")."""
        self._optimize()

    def gc(self, older_than: float) -> int:
        """Counted before deleting: the engines' delete-by-filter does not report a count."""
        conds: list[Condition] = [Match("status", "deleted"), Below("deleted_at", older_than)]
        n = self._count(conds)
        if n:
            self._delete(conds)
        return n

    def live_chunks(self, doc_id: str) -> list[IndexedChunk]:
        recs = self._scroll_all([LIVE, Match("doc_id", doc_id)], None, False)
        chunks = [payload_chunk(r.id, r.payload) for r in recs]
        return sorted(chunks, key=lambda c: (c.ordinal, c.point_id))

    def live_doc_fingerprints(
        self, chunker: str = "", parser: ParserKeys | None = None
    ) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        fields = ["doc_id", "file_size", "file_mtime_ns", "file_digest", "file_commit"]
        fields += ["chunker", "parser", "path"]
        for r in self._scroll_all([LIVE], fields, False):
            p = r.payload
            held = p.get("chunker") or ""
            stale = bool(chunker and held and held != chunker)
            stale = stale or parsed_elsewise(p.get("parser") or "", p["path"], parser)
            token = version_token(
                int(p["file_size"]),
                int(p["file_mtime_ns"]),
                p.get("file_digest") or "",
                p.get("file_commit") or "",
            )
            out.setdefault(p["doc_id"], set()).add(STALE_FINGERPRINT if stale else token)
        return out

    def live_pages(self, size: int = PAGE) -> Iterator[list[IndexedChunk]]:
        """Every live point, a page at a time (whole payload, no vectors)."""
        page: list[IndexedChunk] = []
        for r in self._scroll_all([LIVE], None, False):
            page.append(payload_chunk(r.id, r.payload))
            if len(page) >= size:
                yield page
                page = []
        if page:
            yield page

    def point_pages(self, size: int = PAGE) -> Iterator[list[tuple[IndexedChunk, list[float]]]]:
        """Every point, live and tombstoned, with its dense vector, a page at a time: what a
        snapshot of a server's collection holds, and a restore upserts again."""
        page: list[tuple[IndexedChunk, list[float]]] = []
        for r in self._scroll_all([], None, True):
            if r.vector is None:
                raise RuntimeError(f"point {r.id} of {self.collection} has no dense vector")
            page.append((payload_chunk(r.id, r.payload), r.vector))
            if len(page) >= size:
                yield page
                page = []
        if page:
            yield page

    def live_doc_points(self) -> dict[str, set[str]]:
        """doc_id -> the ids of its live points (one field of the payload read, no vectors)."""
        out: dict[str, set[str]] = {}
        for r in self._scroll_all([LIVE], ["doc_id"], False):
            out.setdefault(str(r.payload["doc_id"]), set()).add(r.id)
        return out

    def vectors_for_hashes(self, hashes: Iterable[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        mine = Match("embedder", self.embedder.slug)  # a retagged point's vector is not trusted
        for part in batches(sorted(set(hashes)), PAGE):
            conds: list[Condition] = [MatchIn("content_hash", part), mine]
            for r in self._scroll_all(conds, ["content_hash"], True):
                if r.vector is not None:
                    out.setdefault(r.payload["content_hash"], r.vector)
        return out

    def get(self, point_ids: Sequence[str]) -> list[IndexedChunk]:
        """In request order (duplicates once); ids not in the collection are skipped."""
        wanted = list(dict.fromkeys(point_ids))
        found = {r.id: r for r in self._retrieve(wanted)} if wanted else {}
        return [payload_chunk(i, found[i].payload) for i in wanted if i in found]

    def search(self, vector: Sequence[float], limit: int, flt: SearchFilter) -> list[Hit]:
        conds = search_conditions(flt)
        if conds is None or limit <= 0:
            return []
        scored = self._query(self._vector(vector), limit, conds)
        hits = [Hit(chunk=payload_chunk(r.id, r.payload), score=s) for r, s in scored]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.point_id))

    def count(self, status: str, flt: SearchFilter | None = None) -> int:
        """Counted in the engine (the filter's fields carry payload indexes)."""
        conds = search_conditions(flt or SearchFilter(), status)
        return self._count(conds) if conds is not None else 0

    def flush(self) -> None:
        """Persist pending writes (a batch boundary); not required for crash safety."""
        self._flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._flush()
            self._close()

    # helpers ----------------------------------------------------------------------------
    def _vector(self, vector: Sequence[float]) -> list[float]:
        if len(vector) != self.embedder.dimension:
            dim = self.embedder.dimension
            raise ValueError(f"vector of {len(vector)} dims; {self.collection} holds {dim}")
        return [float(x) for x in vector]

    def _scroll_all(
        self, conds: list[Condition], fields: list[str] | None, with_vector: bool
    ) -> Iterator[Record]:
        offset: str | None = None
        while True:
            page, offset = self._scroll_page(conds, fields, with_vector, offset, PAGE)
            yield from page
            if offset is None:
                return


# --- what both backends use around a collection: retries, names, errors ---------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How long a store that talks over a network rides out transient errors (server path).

    At most `attempts` calls per operation and `max_wait_s` seconds of backoff in all; the
    embedded Edge engine has no network between us and it, so it ignores the policy.
    """

    attempts: int
    max_wait_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(settings.store.retry_attempts, settings.store.retry_max_wait_s)

    @classmethod
    def default(cls) -> RetryPolicy:
        """The settings' defaults (what a caller that passes no policy gets)."""
        store = StoreSettings()
        return cls(store.retry_attempts, store.retry_max_wait_s)


def sparse_mismatch(collection: str) -> RuntimeError:
    return RuntimeError(
        f"collection {collection!r} was built without the BM25 sparse vectors that "
        "store.lexical_backend = 'sparse' needs: set store.lexical_backend = 'tantivy' (and "
        "`ragstream rebuild-lexical` if its index is gone), or reindex into a new collection "
        "(`ragstream reindex start`)"
    )


def check_collection_of(index_name: str, collection: str) -> None:
    """Refuse (ValueError) any name that `collection_name` cannot produce for this index: a
    name is matched, never interpreted (no path or other index can be reached through it)."""
    slug = collection.removeprefix(f"{index_name}__")
    if slug == collection or not slug or not all(c.isalnum() or c == "-" for c in slug):
        raise ValueError(f"{collection!r} is not a collection of index {index_name!r}")


def owned_collection(index_name: str, collection: str, embedder: EmbedderVersion) -> bool:
    """True when `collection` is the name this index gives `embedder`'s collection.

    Both backends list by this rule, so an index named `a` never claims `a__b`'s collections.
    """
    return collection == collection_name(index_name, embedder)
