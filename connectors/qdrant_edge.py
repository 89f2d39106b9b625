"""`EdgeVectorStore`: the embedded default, Qdrant's own Rust engine in-process (qdrant-edge-py).

Layout under `base_dir`:
  `<index>__<slug>/`            one Edge shard per embedder version (engine files) plus
  `<index>__<slug>/collection.json`  sidecar `{"embedder": {...}}` (the collection metadata;
                                 written last, so its presence means "fully created")
  `<index>.alias.json`          the live pointer `{"collection": "<index>__<slug>"}`; Edge has
                                 no aliases, so it is replaced atomically (temp + os.replace)
  `.<index>__<slug>.dropping/`  a shard being dropped (renamed first, then deleted)

Engine notes (qdrant-edge-py 0.9.0): `MatchValue(True)` never matches a bool payload, hence
`status` is a keyword. Writes go to the shard's WAL and survive a killed process without
`flush()` (replayed by `EdgeShard.load`), so we flush on `close()` and at explicit batch
boundaries only: a flush costs as much as upserting a few hundred points. Edge runs no
background optimizer; `optimize()` (HNSW build) is slow and left to maintenance, since the
plain filtered scan is already fast. A shard dir is locked by the process that opened it
("Can't init WAL: WouldBlock"), surfaced as `StoreBusyError`.

Memory: most of what a shard being written holds is its own mmap'd files (vector and payload
chunks, the open WAL segment), i.e. page cache the kernel can reclaim once flushed; the rest is
anonymous (payload indexes, id tracker). `Memory.Cold` placement made no difference while the
appendable segment is written, so the engine defaults stay.

Figures: docs/measurements.md, "Qdrant Edge engine notes" (and docs/scale.md "Memory").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    IsEmptyCondition,
    MatchAny,
    MatchValue,
    Modifier,
    PayloadSchemaType,
    Point,
    PointVectors,
    Query,
    QueryRequest,
    RangeDateTime,
    RangeFloat,
    ScrollRequest,
    SparseVector,
    UpdateOperation,
)

from ragstream.connectors.sparse import FULL_SCAN_THRESHOLD as FULL_SCAN
from ragstream.connectors.sparse import Sparse
from ragstream.connectors.vector_stores import (
    FLOAT_FIELDS,
    KEYWORD_FIELDS,
    SPARSE,
    VECTOR,
    BaseQdrantStore,
    Below,
    Condition,
    HasIds,
    IndexKind,
    Match,
    MatchIn,
    Record,
    RetryPolicy,
    StoreBusyError,
    check_collection_of,
    check_embedder,
    collection_name,
    dense_vector,
    embedder_from_metadata,
    embedder_metadata,
    owned_collection,
    sparse_mismatch,
)
from ragstream.core.filters import AllOf, AnyOf, Between, Equals, NoneOf, Present
from ragstream.core.jsonfile import write_json_atomic
from ragstream.core.models import EmbedderVersion

SIDECAR = "collection.json"
DROPPING = ".dropping"  # suffix of a shard dir being deleted (hidden: `.<collection>.dropping`)


def _condition(cond: Condition) -> FieldCondition | HasIdCondition | Filter:
    match cond:
        case Match(key, value):
            return FieldCondition(key=key, match=MatchValue(value))
        case MatchIn(key, values):
            return FieldCondition(key=key, match=MatchAny(list(values)))
        case Below(key, value):
            return FieldCondition(key=key, range=RangeFloat(lt=value))
        case HasIds(ids):
            return HasIdCondition(point_ids=set(ids))
        case Equals(key, values):
            one, many = values[0], list(values)  # one type per field: str or int (core.filters)
            match = MatchValue(one) if len(values) == 1 else MatchAny(many)  # type: ignore[arg-type]
            return FieldCondition(key=key, match=match)
        case Between(key, gt, gte, lt, lte, instant):
            span = RangeDateTime if instant else RangeFloat
            return FieldCondition(key=key, range=span(gt=gt, gte=gte, lt=lt, lte=lte))  # type: ignore[arg-type]
        case Present(key):
            return Filter(must_not=[IsEmptyCondition(key=key)])
        case AllOf(items):
            return Filter(must=[_condition(i) for i in items])
        case AnyOf(items):
            return Filter(should=[_condition(i) for i in items])
        case NoneOf(items):
            return Filter(must_not=[_condition(i) for i in items])


def _filter(conds: list[Condition]) -> Filter | None:
    return Filter(must=[_condition(c) for c in conds]) if conds else None


def _load_or_create(
    path: Path, embedder: EmbedderVersion | None, sparse: bool = False
) -> EdgeShard | None:
    """Open the shard at `path` (taking its lock); create it if missing and `embedder` is
    given, else None."""
    try:
        if (path / "edge_config.json").exists():
            return EdgeShard.load(str(path))
        if embedder is None:
            return None
        params = EdgeVectorParams(size=embedder.dimension, distance=Distance.Cosine)
        bm25 = (
            {SPARSE: EdgeSparseVectorParams(modifier=Modifier.Idf, full_scan_threshold=FULL_SCAN)}
            if sparse
            else None
        )
        return EdgeShard.create(
            str(path), EdgeConfig(vectors={VECTOR: params}, sparse_vectors=bm25)
        )
    except Exception as exc:
        if "WouldBlock" in str(exc):
            raise StoreBusyError(f"{path} is held by another process or store") from exc
        raise


class EdgeVectorStore(BaseQdrantStore):
    """One Edge shard = one collection of one embedder version."""

    def __init__(
        self, shard: EdgeShard, path: Path, embedder: EmbedderVersion, sparse: bool = False
    ) -> None:
        super().__init__(path.name, embedder, sparse)
        self.path = path
        self._shard = shard

    @classmethod
    def open(
        cls, base_dir: Path, index_name: str, embedder: EmbedderVersion, sparse: bool = False
    ) -> EdgeVectorStore:
        path = base_dir / collection_name(index_name, embedder)
        shard = _load_or_create(path, embedder, sparse)
        assert shard is not None
        store = cls(shard, path, embedder, sparse)
        try:
            config = json.loads((path / "edge_config.json").read_text(encoding="utf-8"))
            if sparse and SPARSE not in (config.get("sparse_vectors") or {}):
                raise sparse_mismatch(path.name)
            store._ensure_indexes()
            sidecar = path / SIDECAR
            if sidecar.exists():
                stored = json.loads(sidecar.read_text(encoding="utf-8"))
                check_embedder(path.name, embedder_from_metadata(path.name, stored), embedder)
            else:
                shard.flush()
                write_json_atomic(sidecar, embedder_metadata(embedder))
        except BaseException:
            store.close()
            raise
        return store

    def _ensure_indexes(self) -> None:
        """Idempotent; also completes a shard whose creation was interrupted."""
        have = self._shard.info().payload_schema
        wanted = [(f, PayloadSchemaType.Keyword) for f in KEYWORD_FIELDS]
        wanted += [(f, PayloadSchemaType.Float) for f in FLOAT_FIELDS]
        for field, schema in wanted:
            if field not in have:
                self._shard.update(UpdateOperation.create_field_index(field, schema))

    def _write(
        self,
        ids: list[str],
        vectors: list[list[float]],
        payloads: list[dict[str, Any]],
        sparse: list[Sparse] | None,
    ) -> None:
        named: list[dict[str, Any]] = [{VECTOR: v} for v in vectors]
        for entry, (indices, values) in zip(named, sparse or (), strict=False):
            entry[SPARSE] = SparseVector(indices, values)
        points = [
            Point(id=i, vector=v, payload=p) for i, v, p in zip(ids, named, payloads, strict=True)
        ]
        self._shard.update(UpdateOperation.upsert_points(points))

    def _set_sparse(self, ids: list[str], sparse: list[Sparse]) -> None:
        update = [
            PointVectors(i, {SPARSE: SparseVector(*vec)})
            for i, vec in zip(ids, sparse, strict=True)
        ]
        self._shard.update(UpdateOperation.update_vectors(update))

    def _query_sparse(
        self, query: Sparse, limit: int, conds: list[Condition], with_payload: bool
    ) -> list[tuple[Record, float]]:
        if not query[0]:
            return []
        return self._nearest(
            Query.Nearest(SparseVector(*query), using=SPARSE), limit, conds, with_payload
        )

    def _set_payload(self, conds: list[Condition], payload: dict[str, Any]) -> None:
        flt = Filter(must=[_condition(c) for c in conds])
        self._shard.update(UpdateOperation.set_payload_by_filter(flt, payload))

    def _delete(self, conds: list[Condition]) -> None:
        flt = Filter(must=[_condition(c) for c in conds])
        self._shard.update(UpdateOperation.delete_points_by_filter(flt))

    def _count(self, conds: list[Condition]) -> int:
        return self._shard.count(CountRequest(exact=True, filter=_filter(conds)))

    def _scroll_page(
        self,
        conds: list[Condition],
        fields: list[str] | None,
        with_vector: bool,
        offset: str | None,
        limit: int,
    ) -> tuple[list[Record], str | None]:
        request = ScrollRequest(
            offset=offset,
            limit=limit,
            filter=_filter(conds),
            with_payload=True if fields is None else fields,
            with_vector=with_vector,
        )
        records, next_offset = self._shard.scroll(request)
        page = [Record(str(r.id), r.payload or {}, dense_vector(r.vector)) for r in records]
        return page, None if next_offset is None else str(next_offset)

    def _retrieve(self, ids: list[str]) -> list[Record]:
        records = self._shard.retrieve(list(ids), with_payload=True, with_vector=False)
        return [Record(str(r.id), r.payload or {}, None) for r in records]

    def _query(
        self, vector: list[float], limit: int, conds: list[Condition]
    ) -> list[tuple[Record, float]]:
        return self._nearest(Query.Nearest(vector, using=VECTOR), limit, conds, True)

    def _nearest(
        self, query: Query, limit: int, conds: list[Condition], with_payload: bool
    ) -> list[tuple[Record, float]]:
        request = QueryRequest(
            limit=limit,
            query=query,
            filter=_filter(conds),
            with_payload=with_payload,
            with_vector=False,
        )
        return [
            (Record(str(p.id), p.payload or {}, None), float(p.score))
            for p in self._shard.query(request)
        ]

    def _flush(self) -> None:
        self._shard.flush()

    def _optimize(self) -> None:
        self._shard.optimize()
        self._shard.flush()

    def _index_schema(self) -> set[str]:
        return set(self._shard.info().payload_schema)

    def _add_index(self, key: str, kind: IndexKind) -> None:
        schema = {
            "keyword": PayloadSchemaType.Keyword,
            "integer": PayloadSchemaType.Integer,
            "float": PayloadSchemaType.Float,
            "datetime": PayloadSchemaType.Datetime,
        }[kind]
        self._shard.update(UpdateOperation.create_field_index(key, schema))

    def _close(self) -> None:
        self._shard.close()


class EdgeBackend:
    """`backends.Backend` for Edge: pointer and metadata are plain files, no engine."""

    def open_store(
        self,
        base_dir: Path,
        index_name: str,
        embedder: EmbedderVersion,
        url: str | None,
        retry: RetryPolicy | None = None,
        sparse: bool = False,
    ) -> EdgeVectorStore:
        """`retry` is ignored: an in-process engine has no transient network errors."""
        if url is not None:
            raise ValueError("the edge vector store is embedded and takes no url")
        return EdgeVectorStore.open(base_dir, index_name, embedder, sparse)

    def read_live(
        self, base_dir: Path, index_name: str, url: str | None
    ) -> tuple[str, EmbedderVersion] | None:
        pointer = base_dir / f"{index_name}.alias.json"
        if not pointer.exists():
            return None
        collection = str(json.loads(pointer.read_text(encoding="utf-8"))["collection"])
        sidecar = base_dir / collection / SIDECAR
        if not sidecar.exists():
            raise RuntimeError(f"live collection {collection!r} has no {SIDECAR} in {base_dir}")
        metadata = json.loads(sidecar.read_text(encoding="utf-8"))
        return collection, embedder_from_metadata(collection, metadata)

    def write_live(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> None:
        if not (base_dir / collection / SIDECAR).exists():
            raise ValueError(f"no collection {collection!r} in {base_dir}")
        write_json_atomic(base_dir / f"{index_name}.alias.json", {"collection": collection})

    def drop(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> bool:
        """Rename the shard dir out of the way while holding its lock, then delete it.

        Holding the engine's lock proves no store (here or in another process) has it open;
        the rename makes the drop atomic for readers and crash-safe (a leftover `.dropping`
        dir is no collection and is swept by the next drop).
        """
        if url is not None:
            raise ValueError("the edge vector store is embedded and takes no url")
        check_collection_of(index_name, collection)
        live = self.read_live(base_dir, index_name, None)
        if live is not None and live[0] == collection:
            raise ValueError(
                f"{collection!r} is the live collection of {index_name!r}: "
                "point the live pointer elsewhere before dropping it"
            )
        for leftover in base_dir.glob(f".{index_name}__*{DROPPING}"):
            shutil.rmtree(leftover, ignore_errors=True)
        path = base_dir / collection
        if not path.is_dir():
            return False
        if collection not in self.list(base_dir, index_name, None):
            raise ValueError(f"{collection!r} is not a collection of index {index_name!r}")
        doomed = base_dir / f".{collection}{DROPPING}"
        shard = _load_or_create(path, None)  # StoreBusyError while any store has it open
        try:
            path.rename(doomed)
        finally:
            if shard is not None:
                shard.close()
        shutil.rmtree(doomed)
        return True

    def list(self, base_dir: Path, index_name: str, url: str | None) -> dict[str, EmbedderVersion]:
        """Shard dirs of this index whose sidecar exists (a shard without one was never
        completed: it is nobody's collection yet)."""
        if url is not None:
            raise ValueError("the edge vector store is embedded and takes no url")
        out: dict[str, EmbedderVersion] = {}
        for sidecar in sorted(base_dir.glob(f"{index_name}__*/{SIDECAR}")):
            name = sidecar.parent.name
            embedder = embedder_from_metadata(name, json.loads(sidecar.read_text("utf-8")))
            if owned_collection(index_name, name, embedder):
                out[name] = embedder
        return out


BACKEND = EdgeBackend()
