"""`QdrantClientVectorStore`: the server/cluster path, through `qdrant_client.QdrantClient`.

The same code runs against a Qdrant URL or qdrant-client's local mode (`path=` or `:memory:`),
which is how it is tested: no server binary runs on our machines (DESIGN §4).

- Live pointer: the real alias `<index>`, switched with one `update_collection_aliases` call
  (delete + create in one request, atomic on the server).
- Embedder metadata: collection `metadata={"embedder": {...}}` (local mode persists it too), so
  `read_live` needs no sidecar and no reserved record.
- Clients are shared per location and reference-counted. Local mode locks its folder per client
  instance, so two stores on one path (old and new embedder during a blue/green rebuild), or
  `live_collection` while a store is open, must reuse one client rather than open a second.
- Payload indexes are created for the server; local mode ignores them (its warning is muted).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

from connectors.vector_stores import (
    FLOAT_FIELDS,
    KEYWORD_FIELDS,
    VECTOR,
    BaseQdrantStore,
    Below,
    Condition,
    HasIds,
    Match,
    MatchIn,
    Record,
    StoreBusyError,
    check_embedder,
    collection_name,
    dense_vector,
    embedder_from_metadata,
    embedder_metadata,
)
from core.models import EmbedderVersion

_lock = threading.Lock()
_clients: dict[str, tuple[QdrantClient, int]] = {}


def _location(base_dir: Path, url: str | None) -> str:
    return url if url is not None else str(Path(base_dir).resolve())


def acquire_client(base_dir: Path, url: str | None) -> QdrantClient:
    """The shared client for `url` (None = local mode at `base_dir`); pair with release."""
    key = _location(base_dir, url)
    with _lock:
        if key in _clients:
            client, refs = _clients[key]
        else:
            try:
                if url is None:
                    client = QdrantClient(path=key)
                elif url == ":memory:":
                    client = QdrantClient(location=":memory:")
                else:
                    client = QdrantClient(url=url)
            except RuntimeError as exc:
                if "already accessed" in str(exc):
                    raise StoreBusyError(str(exc)) from exc
                raise
            refs = 0
        _clients[key] = (client, refs + 1)
        return client


def release_client(base_dir: Path, url: str | None) -> None:
    key = _location(base_dir, url)
    with _lock:
        client, refs = _clients[key]
        if refs > 1:
            _clients[key] = (client, refs - 1)
            return
        del _clients[key]
    client.close()


def _condition(cond: Condition) -> models.FieldCondition | models.HasIdCondition:
    match cond:
        case Match(key, value):
            return models.FieldCondition(key=key, match=models.MatchValue(value=value))
        case MatchIn(key, values):
            return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        case Below(key, value):
            return models.FieldCondition(key=key, range=models.Range(lt=value))
        case HasIds(ids):
            return models.HasIdCondition(has_id=list(ids))


def _filter(conds: list[Condition]) -> models.Filter:
    return models.Filter(must=[_condition(c) for c in conds])


class QdrantClientVectorStore(BaseQdrantStore):
    """One Qdrant collection = one embedder version, over a shared client."""

    def __init__(
        self, base_dir: Path, url: str | None, collection: str, embedder: EmbedderVersion
    ) -> None:
        super().__init__(collection, embedder)
        self._where = (Path(base_dir), url)
        self.client = acquire_client(base_dir, url)

    @classmethod
    def open(
        cls, base_dir: Path, index_name: str, embedder: EmbedderVersion, url: str | None = None
    ) -> QdrantClientVectorStore:
        store = cls(base_dir, url, collection_name(index_name, embedder), embedder)
        try:
            store._ensure_collection()
        except BaseException:
            store.close()
            raise
        return store

    def _ensure_collection(self) -> None:
        name, client = self.collection, self.client
        if client.collection_exists(name):
            metadata = client.get_collection(name).config.metadata
            check_embedder(name, embedder_from_metadata(name, metadata), self.embedder)
            return
        client.create_collection(
            name,
            vectors_config={
                VECTOR: models.VectorParams(
                    size=self.embedder.dimension, distance=models.Distance.COSINE
                )
            },
            metadata=embedder_metadata(self.embedder),
        )
        schemas = [(f, models.PayloadSchemaType.KEYWORD) for f in KEYWORD_FIELDS]
        schemas += [(f, models.PayloadSchemaType.FLOAT) for f in FLOAT_FIELDS]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            for field, schema in schemas:
                client.create_payload_index(name, field, field_schema=schema, wait=True)

    def _write(
        self, ids: list[str], vectors: list[list[float]], payloads: list[dict[str, Any]]
    ) -> None:
        points = [
            models.PointStruct(id=i, vector={VECTOR: v}, payload=p)
            for i, v, p in zip(ids, vectors, payloads, strict=True)
        ]
        self.client.upsert(self.collection, points=points, wait=True)

    def _set_payload(self, conds: list[Condition], payload: dict[str, Any]) -> None:
        self.client.set_payload(self.collection, payload, points=_filter(conds), wait=True)

    def _delete(self, conds: list[Condition]) -> None:
        selector = models.FilterSelector(filter=_filter(conds))
        self.client.delete(self.collection, points_selector=selector, wait=True)

    def _count(self, conds: list[Condition]) -> int:
        return self.client.count(self.collection, count_filter=_filter(conds), exact=True).count

    def _scroll_page(
        self,
        conds: list[Condition],
        fields: list[str] | None,
        with_vector: bool,
        offset: str | None,
        limit: int,
    ) -> tuple[list[Record], str | None]:
        records, next_offset = self.client.scroll(
            self.collection,
            scroll_filter=_filter(conds),
            limit=limit,
            offset=offset,
            with_payload=True if fields is None else fields,
            with_vectors=with_vector,
        )
        page = [Record(str(r.id), r.payload or {}, dense_vector(r.vector)) for r in records]
        return page, None if next_offset is None else str(next_offset)

    def _retrieve(self, ids: list[str]) -> list[Record]:
        records = self.client.retrieve(self.collection, ids, with_payload=True)
        return [Record(str(r.id), r.payload or {}, None) for r in records]

    def _query(
        self, vector: list[float], limit: int, conds: list[Condition]
    ) -> list[tuple[Record, float]]:
        response = self.client.query_points(
            self.collection,
            query=vector,
            using=VECTOR,
            limit=limit,
            query_filter=_filter(conds),
            with_payload=True,
        )
        return [(Record(str(p.id), p.payload or {}, None), float(p.score)) for p in response.points]

    def _flush(self) -> None:
        """Writes are acknowledged with wait=True; nothing is buffered client-side."""

    def _close(self) -> None:
        release_client(*self._where)


class QdrantBackend:
    """`vector_stores.Backend` for qdrant-client: alias + collection metadata."""

    def open_store(
        self, base_dir: Path, index_name: str, embedder: EmbedderVersion, url: str | None
    ) -> QdrantClientVectorStore:
        return QdrantClientVectorStore.open(base_dir, index_name, embedder, url)

    def read_live(
        self, base_dir: Path, index_name: str, url: str | None
    ) -> tuple[str, EmbedderVersion] | None:
        client = acquire_client(base_dir, url)
        try:
            aliases = client.get_aliases().aliases
            target = next((a.collection_name for a in aliases if a.alias_name == index_name), None)
            if target is None:
                return None
            metadata = client.get_collection(target).config.metadata
            return target, embedder_from_metadata(target, metadata)
        finally:
            release_client(base_dir, url)

    def write_live(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> None:
        client = acquire_client(base_dir, url)
        try:
            if collection == index_name or not client.collection_exists(collection):
                raise ValueError(f"no collection {collection!r}")
            ops: list[models.CreateAliasOperation | models.DeleteAliasOperation] = []
            if any(a.alias_name == index_name for a in client.get_aliases().aliases):
                ops.append(
                    models.DeleteAliasOperation(
                        delete_alias=models.DeleteAlias(alias_name=index_name)
                    )
                )
            create = models.CreateAlias(collection_name=collection, alias_name=index_name)
            ops.append(models.CreateAliasOperation(create_alias=create))
            client.update_collection_aliases(change_aliases_operations=ops)
        finally:
            release_client(base_dir, url)


BACKEND = QdrantBackend()
