"""`QdrantClientVectorStore`: the server/cluster path, through `qdrant_client.QdrantClient`.

The same code runs against a Qdrant URL or qdrant-client's local mode (`path=` or `:memory:`),
which is how it is tested: it runs without a server binary.

- Live pointer: the real alias `<index>`, switched with one `update_collection_aliases` call
  (delete + create in one request, atomic on the server).
- Embedder metadata: collection `metadata={"embedder": {...}}` (local mode persists it too), so
  `read_live` needs no sidecar and no reserved record.
- Clients are shared per location and reference-counted. Local mode locks its folder per client
  instance, so two stores on one path (old and new embedder during a blue/green rebuild), or
  `live_collection` while a store is open, must reuse one client rather than open a second.
- Payload indexes are created for the server; local mode ignores them (its warning is muted).
- Transient failures (connection refused/reset, timeouts, 5xx, 429, gRPC UNAVAILABLE) are
  retried with jittered exponential backoff (tenacity) within a `RetryPolicy`, then surface as
  `StoreUnavailableError`; a 4xx is a bad request and fails at once. Every retried unit is
  idempotent: point writes are upserts by id, payload updates and deletes go by filter (a
  tombstone matches live points only), and the collection/alias operations re-read the state
  they act on in each attempt. So a write that timed out after the server applied it is
  harmless to repeat, and a flow that outlives an outage loses nothing acknowledged.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
from opentelemetry import trace
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
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
from ragstream.core.models import EmbedderVersion

T = TypeVar("T")
log = logging.getLogger(__name__)

_lock = threading.Lock()
_clients: dict[str, tuple[QdrantClient, int]] = {}
_open: Counter[tuple[str, str]] = Counter()  # (location, collection) -> stores open on it

FIRST_WAIT_S = 0.1  # first backoff; doubles per retry, plus up to this much random jitter
_TRANSIENT_GRPC = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED"})
_TRANSIENT_HTTPX = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class StoreUnavailableError(RuntimeError):
    """The store kept failing with transient errors for the whole retry budget."""


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the same request may succeed once the store is back (never a 4xx).

    qdrant-client wraps transport errors in `ResponseHandlingException`, and also a reply it
    cannot parse (a version mismatch, not an outage), so its `source` decides.
    """
    if isinstance(exc, UnexpectedResponse):
        code = exc.status_code
        return code is not None and (code == 429 or code >= 500)
    if isinstance(exc, ResponseHandlingException):
        return is_transient(exc.source)
    if isinstance(exc, (*_TRANSIENT_HTTPX, ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):
        return getattr(exc.code(), "name", "") in _TRANSIENT_GRPC
    return False


def with_retry(policy: RetryPolicy, where: str, op: str, fn: Callable[[], T]) -> T:
    """`fn()` retried on transient errors within `policy`; `fn` must be idempotent."""
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(policy.attempts) | stop_before_delay(policy.max_wait_s),
        wait=wait_exponential_jitter(
            multiplier=FIRST_WAIT_S, max=max(policy.max_wait_s, FIRST_WAIT_S), jitter=FIRST_WAIT_S
        ),
        before_sleep=lambda state: _note_retry(where, op, state),
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        waited = float(retrying.statistics.get("idle_for", 0.0))
        raise StoreUnavailableError(
            f"Qdrant at {where} unavailable: {op} failed {exc.last_attempt.attempt_number} "
            f"times, {waited:.1f}s of backoff (last error {type(last).__name__}: {last})"
        ) from last


def _note_retry(where: str, op: str, state: RetryCallState) -> None:
    """Log the retry and record it on the current span (e.g. `ragstream.ingest.write`)."""
    exc = state.outcome.exception() if state.outcome is not None else None
    sleep = state.next_action.sleep if state.next_action is not None else 0.0
    error = f"{type(exc).__name__}: {exc}"
    log.warning(
        "qdrant %s at %s failed (attempt %d: %s); retrying in %.2fs",
        op, where, state.attempt_number, error, sleep,
    )  # fmt: skip
    trace.get_current_span().add_event(
        "store.retry",
        {"operation": op, "attempt": state.attempt_number, "error": error, "sleep_s": sleep},
    )


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


def _condition(cond: Condition) -> models.Condition:
    match cond:
        case Match(key, value):
            return models.FieldCondition(key=key, match=models.MatchValue(value=value))
        case MatchIn(key, values):
            return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        case Below(key, value):
            return models.FieldCondition(key=key, range=models.Range(lt=value))
        case HasIds(ids):
            return models.HasIdCondition(has_id=list(ids))
        case Equals(key, values):
            match: models.Match = (
                models.MatchValue(value=values[0])
                if len(values) == 1
                else models.MatchAny(any=list(values))
            )
            return models.FieldCondition(key=key, match=match)
        case Between(key, gt, gte, lt, lte, instant):
            span = models.DatetimeRange if instant else models.Range
            return models.FieldCondition(key=key, range=span(gt=gt, gte=gte, lt=lt, lte=lte))
        case Present(key):
            empty = models.IsEmptyCondition(is_empty=models.PayloadField(key=key))
            return models.Filter(must_not=[empty])
        case AllOf(items):
            return models.Filter(must=[_condition(i) for i in items])
        case AnyOf(items):
            return models.Filter(should=[_condition(i) for i in items])
        case NoneOf(items):
            return models.Filter(must_not=[_condition(i) for i in items])
    raise TypeError(cond)


def _filter(conds: list[Condition]) -> models.Filter:
    return models.Filter(must=[_condition(c) for c in conds])


class QdrantClientVectorStore(BaseQdrantStore):
    """One Qdrant collection = one embedder version, over a shared client."""

    def __init__(
        self,
        base_dir: Path,
        url: str | None,
        collection: str,
        embedder: EmbedderVersion,
        retry: RetryPolicy | None = None,
        sparse: bool = False,
    ) -> None:
        super().__init__(collection, embedder, sparse)
        self._where = (Path(base_dir), url)
        self._retry = retry or RetryPolicy.default()
        self.client = acquire_client(base_dir, url)
        with _lock:
            _open[(_location(base_dir, url), collection)] += 1

    @classmethod
    def open(
        cls,
        base_dir: Path,
        index_name: str,
        embedder: EmbedderVersion,
        url: str | None = None,
        retry: RetryPolicy | None = None,
        sparse: bool = False,
    ) -> QdrantClientVectorStore:
        name = collection_name(index_name, embedder)
        store = cls(base_dir, url, name, embedder, retry, sparse)
        try:
            store._call("ensure collection", store._ensure_collection)
        except BaseException:
            store.close()
            raise
        return store

    def _call(self, op: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One engine call (or idempotent unit), retried on transient errors."""
        where = _location(*self._where)
        return with_retry(self._retry, where, op, lambda: fn(*args, **kwargs))

    def _ensure_collection(self) -> None:
        """Create-if-missing, check the embedder, add missing payload indexes: one retry unit,
        so an attempt that died half-way (created, no indexes yet) is completed by the next."""
        name, client = self.collection, self.client
        if not client.collection_exists(name):
            client.create_collection(
                name,
                vectors_config={
                    VECTOR: models.VectorParams(
                        size=self.embedder.dimension, distance=models.Distance.COSINE
                    )
                },
                metadata=embedder_metadata(self.embedder),
                sparse_vectors_config=(
                    {
                        SPARSE: models.SparseVectorParams(
                            index=models.SparseIndexParams(full_scan_threshold=FULL_SCAN),
                            modifier=models.Modifier.IDF,
                        )
                    }
                    if self.sparse
                    else None
                ),
            )
        info = client.get_collection(name)
        if self.sparse and SPARSE not in (info.config.params.sparse_vectors or {}):
            raise sparse_mismatch(name)
        check_embedder(name, embedder_from_metadata(name, info.config.metadata), self.embedder)
        schemas = [(f, models.PayloadSchemaType.KEYWORD) for f in KEYWORD_FIELDS]
        schemas += [(f, models.PayloadSchemaType.FLOAT) for f in FLOAT_FIELDS]
        have = info.payload_schema or {}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            for field, schema in schemas:
                if field not in have:
                    client.create_payload_index(name, field, field_schema=schema, wait=True)

    def _write(
        self,
        ids: list[str],
        vectors: list[list[float]],
        payloads: list[dict[str, Any]],
        sparse: list[Sparse] | None,
    ) -> None:
        named: list[dict[str, Any]] = [{VECTOR: v} for v in vectors]
        for entry, (indices, values) in zip(named, sparse or (), strict=False):
            entry[SPARSE] = models.SparseVector(indices=indices, values=values)
        points = [
            models.PointStruct(id=i, vector=v, payload=p)
            for i, v, p in zip(ids, named, payloads, strict=True)
        ]
        self._call("upsert", self.client.upsert, self.collection, points=points, wait=True)

    def _set_sparse(self, ids: list[str], sparse: list[Sparse]) -> None:
        points = [
            models.PointVectors(
                id=i, vector={SPARSE: models.SparseVector(indices=vec[0], values=vec[1])}
            )
            for i, vec in zip(ids, sparse, strict=True)
        ]
        self._call("update_vectors", self.client.update_vectors, self.collection, points=points,
                   wait=True)  # fmt: skip

    def _query_sparse(
        self, query: Sparse, limit: int, conds: list[Condition], with_payload: bool
    ) -> list[tuple[Record, float]]:
        if not query[0]:
            return []
        sparse = models.SparseVector(indices=query[0], values=query[1])
        return self._nearest(sparse, SPARSE, limit, conds, with_payload)

    def _set_payload(self, conds: list[Condition], payload: dict[str, Any]) -> None:
        flt = _filter(conds)
        self._call("set_payload", self.client.set_payload, self.collection, payload, points=flt,
                   wait=True)  # fmt: skip

    def _delete(self, conds: list[Condition]) -> None:
        selector = models.FilterSelector(filter=_filter(conds))
        self._call("delete", self.client.delete, self.collection, points_selector=selector,
                   wait=True)  # fmt: skip

    def _count(self, conds: list[Condition]) -> int:
        flt = _filter(conds)
        result = self._call("count", self.client.count, self.collection, count_filter=flt,
                            exact=True)  # fmt: skip
        return int(result.count)

    def _scroll_page(
        self,
        conds: list[Condition],
        fields: list[str] | None,
        with_vector: bool,
        offset: str | None,
        limit: int,
    ) -> tuple[list[Record], str | None]:
        records, next_offset = self._call(
            "scroll",
            self.client.scroll,
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
        records = self._call(
            "retrieve", self.client.retrieve, self.collection, ids, with_payload=True
        )
        return [Record(str(r.id), r.payload or {}, None) for r in records]

    def _query(
        self, vector: list[float], limit: int, conds: list[Condition]
    ) -> list[tuple[Record, float]]:
        return self._nearest(vector, VECTOR, limit, conds, True)

    def _nearest(
        self,
        query: list[float] | models.SparseVector,
        using: str,
        limit: int,
        conds: list[Condition],
        with_payload: bool,
    ) -> list[tuple[Record, float]]:
        response = self._call(
            "query_points",
            self.client.query_points,
            self.collection,
            query=query,
            using=using,
            limit=limit,
            query_filter=_filter(conds) if conds else None,
            with_payload=with_payload,
        )
        return [(Record(str(p.id), p.payload or {}, None), float(p.score)) for p in response.points]

    def _flush(self) -> None:
        """Writes are acknowledged with wait=True; nothing is buffered client-side."""

    def _optimize(self) -> None:
        """A server's optimizer builds its graphs in the background; local mode has none."""

    def _index_schema(self) -> set[str]:
        info = self._call("get_collection", self.client.get_collection, self.collection)
        return set(info.payload_schema or {})

    def _add_index(self, key: str, kind: IndexKind) -> None:
        schema = {
            "keyword": models.PayloadSchemaType.KEYWORD,
            "integer": models.PayloadSchemaType.INTEGER,
            "float": models.PayloadSchemaType.FLOAT,
            "datetime": models.PayloadSchemaType.DATETIME,
        }[kind]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self._call(
                "create_payload_index",
                self.client.create_payload_index,
                self.collection,
                key,
                field_schema=schema,
                wait=True,
            )

    def _close(self) -> None:
        key = (_location(*self._where), self.collection)
        with _lock:
            _open[key] -= 1
            if _open[key] <= 0:
                del _open[key]
        release_client(*self._where)


class QdrantBackend:
    """`backends.Backend` for qdrant-client: alias + collection metadata.

    Each method is one idempotent retry unit (it re-reads the aliases it acts on), so a
    request that timed out after the server applied it is safe to repeat.
    """

    def open_store(
        self,
        base_dir: Path,
        index_name: str,
        embedder: EmbedderVersion,
        url: str | None,
        retry: RetryPolicy | None = None,
        sparse: bool = False,
    ) -> QdrantClientVectorStore:
        return QdrantClientVectorStore.open(base_dir, index_name, embedder, url, retry, sparse)

    def read_live(
        self, base_dir: Path, index_name: str, url: str | None
    ) -> tuple[str, EmbedderVersion] | None:
        def read(client: QdrantClient) -> tuple[str, EmbedderVersion] | None:
            target = _alias_target(client, index_name)
            if target is None:
                return None
            metadata = client.get_collection(target).config.metadata
            return target, embedder_from_metadata(target, metadata)

        return _with_client(base_dir, url, "read live alias", read)

    def write_live(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> None:
        def write(client: QdrantClient) -> None:
            if collection == index_name or not client.collection_exists(collection):
                raise ValueError(f"no collection {collection!r}")
            ops: list[models.CreateAliasOperation | models.DeleteAliasOperation] = []
            if _alias_target(client, index_name) is not None:
                ops.append(
                    models.DeleteAliasOperation(
                        delete_alias=models.DeleteAlias(alias_name=index_name)
                    )
                )
            create = models.CreateAlias(collection_name=collection, alias_name=index_name)
            ops.append(models.CreateAliasOperation(create_alias=create))
            client.update_collection_aliases(change_aliases_operations=ops)

        _with_client(base_dir, url, "switch live alias", write)

    def drop(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> bool:
        check_collection_of(index_name, collection)
        with _lock:
            if _open[(_location(base_dir, url), collection)]:
                raise StoreBusyError(f"collection {collection!r} is open in this process")

        def drop(client: QdrantClient) -> bool:
            if _alias_target(client, index_name) == collection:
                raise ValueError(
                    f"{collection!r} is the live collection of {index_name!r}: "
                    "point the alias elsewhere before dropping it"
                )
            if not client.collection_exists(collection):
                return False
            if _owned_embedder(client, index_name, collection) is None:
                raise ValueError(f"{collection!r} is not a collection of index {index_name!r}")
            client.delete_collection(collection)
            return True

        return _with_client(base_dir, url, f"drop {collection}", drop)

    def list(self, base_dir: Path, index_name: str, url: str | None) -> dict[str, EmbedderVersion]:
        def collections(client: QdrantClient) -> dict[str, EmbedderVersion]:
            out: dict[str, EmbedderVersion] = {}
            for c in client.get_collections().collections:
                embedder = _owned_embedder(client, index_name, c.name)
                if embedder is not None:
                    out[c.name] = embedder
            return dict(sorted(out.items()))

        return _with_client(base_dir, url, "list collections", collections)


def _owned_embedder(client: QdrantClient, index_name: str, name: str) -> EmbedderVersion | None:
    """The embedder recorded on `name` if it is one of `index_name`'s collections, else None
    (a collection without our metadata was not made by ragstream: never ours to drop)."""
    if not name.startswith(f"{index_name}__"):
        return None
    metadata = client.get_collection(name).config.metadata
    if not metadata or "embedder" not in metadata:
        return None
    embedder = embedder_from_metadata(name, metadata)
    return embedder if owned_collection(index_name, name, embedder) else None


def _alias_target(client: QdrantClient, alias: str) -> str | None:
    aliases = client.get_aliases().aliases
    return next((a.collection_name for a in aliases if a.alias_name == alias), None)


def _with_client(base_dir: Path, url: str | None, op: str, fn: Callable[[QdrantClient], T]) -> T:
    """`fn(client)` on the shared client, retried as one unit under the default policy."""
    client = acquire_client(base_dir, url)
    try:
        return with_retry(RetryPolicy.default(), _location(base_dir, url), op, lambda: fn(client))
    finally:
        release_client(base_dir, url)


BACKEND = QdrantBackend()
