"""The index itself: `GET /v1/status`, the ledger (`/v1/files`, `/v1/files/{doc_id}`), the
catalogue of metadata fields (`/v1/fields`), the audit (`/v1/verify`, admin), the retrieval
log (`/v1/log`, admin) and the live sync feed (`/v1/events`, from `watch --serve`). A tenant
key sees its own sources' records only."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query

from ragstream.core.errors import NotFoundError
from ragstream.core.models import FieldInfo, FileDetail, FileRecord, StatusReport, VerifyReport
from ragstream.http.deps import ADMIN, ServingDep, TenantsDep
from ragstream.http.sse import KEEPALIVE_S, event_stream, outcome_events

router = APIRouter(tags=["index"])
EVENTS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: one `drift` event ({kind: count} of the last audit, "
        "or null), then an `outcome` event (a DocOutcome) per document written; a comment "
        "line every few seconds keeps the connection checked",
        "content": {"text/event-stream": {}},
    }
}


@router.get("/v1/status")
async def status(caller: TenantsDep, serving: ServingDep) -> StatusReport:
    """Docs, chunks, embedder, last sync, dead letters (a tenant key: its own only)."""
    return await serving.offload(serving.ready_index(caller).status)


@router.get("/v1/files")
async def files(
    caller: TenantsDep,
    serving: ServingDep,
    state: Annotated[list[str] | None, Query()] = None,
) -> list[FileRecord]:
    """The per-file ledger: state, chunks, embedder, version, indexed-at, reason (a
    tenant key: its own sources' files only). `?state=dead&state=stale` narrows it."""
    return await serving.offload(partial(serving.ready_index(caller).files, state=state))


@router.get("/v1/fields")
async def fields(caller: TenantsDep, serving: ServingDep) -> list[FieldInfo]:
    """The metadata fields the caller's documents carry: each field's type, how many
    documents carry it, example values and where it was read (a tenant key: its own
    sources only)."""
    return await serving.offload(serving.ready_index(caller).fields)


@router.get("/v1/files/{doc_id:path}")
async def file(doc_id: str, caller: TenantsDep, serving: ServingDep) -> FileDetail:
    """One file: its ledger record and live chunks in order, with hashes and whether each
    vector was embedded, reused or kept at its last change (a tenant key: its own only)."""
    return await serving.offload(serving.ready_index(caller).file, doc_id)


@router.get("/v1/verify", dependencies=ADMIN)
async def verify(
    serving: ServingDep,
    sample: Annotated[int | None, Query(ge=1)] = None,
) -> VerifyReport:
    """Audit disk ↔ vectors ↔ BM25 (admin): each drift class with counts and examples. It
    runs in the background lane, yielding to queries between pages. Repair is
    `ragstream verify --repair` (or a restarted `watch`: its catch-up scan)."""
    return await serving.background(partial(serving.ready_index().verify, sample=sample))


@router.get("/v1/log", dependencies=ADMIN)
def log(
    serving: ServingDep, limit: Annotated[int | None, Query(ge=1)] = None
) -> list[dict[str, Any]]:
    """The newest `limit` entries of the retrieval log (admin; all kept ones without it),
    oldest first: who asked what, what came back, the trace id."""
    return serving.ready_index().log(limit=limit)


@router.get("/v1/events", responses=EVENTS_DOC)
def events(caller: TenantsDep, serving: ServingDep) -> Any:
    """Sync outcomes as they happen (Server-Sent Events), from `watch --serve` only: first
    `drift` (the last audit's counts), then one `outcome` per document written (a tenant
    key: its own sources' documents only)."""
    if serving.index is None:  # still opening: a `serve`, whose index never syncs
        raise NotFoundError("the live feed is served by `ragstream watch --serve`")
    return event_stream(outcome_events(serving.ready_index(caller).follow(KEEPALIVE_S)))


__all__ = ["router"]
