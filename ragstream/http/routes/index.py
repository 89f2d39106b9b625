"""The index itself: `GET /v1/status`, the ledger (`/v1/files`, `/v1/files/{doc_id}`), the
audit (`/v1/verify`, admin), the retrieval log (`/v1/log`, admin) and the live sync feed
(`/v1/events`, from `watch --serve`). A tenant key sees its own sources' records only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ragstream.core.errors import NotFoundError
from ragstream.core.ids import source_of
from ragstream.core.models import FileDetail, FileRecord, StatusReport, VerifyReport
from ragstream.http.deps import ADMIN, ServingDep, Tenants, TenantsDep
from ragstream.http.sse import event_stream, outcome_events
from ragstream.service.audit import audited, file_detail, files_of_stores, verify_stores
from ragstream.service.ingest import query_log
from ragstream.service.status import engine_status

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
    report = await serving.offload(engine_status, serving.ready_engine())
    return for_tenant(report, serving.settings.sources_of(caller))


def for_tenant(report: StatusReport, own: frozenset[str] | None) -> StatusReport:
    """A tenant's key sees the dead letters and redactions of its own sources only, and
    none of the operator's warnings (they name server paths and models)."""
    if own is None:
        return report
    return report.model_copy(
        update={
            "dead_letters": [d for d in report.dead_letters if source_of(d.doc_id) in own],
            "redactions": [r for r in report.redactions if source_of(r.doc_id) in own],
            "warnings": [],
        }
    )


@router.get("/v1/files")
async def files(
    caller: TenantsDep,
    serving: ServingDep,
    state: Annotated[list[str] | None, Query()] = None,
) -> list[FileRecord]:
    """The per-file ledger: state, chunks, embedder, version, indexed-at, reason (a
    tenant key: its own sources' files only). `?state=dead&state=stale` narrows it."""
    r = serving.ready_engine().retriever
    s = audited(serving.settings)
    return await serving.offload(files_of_stores, s, r.vectors, r.lexical, state, caller)


@router.get("/v1/files/{doc_id:path}")
async def file(doc_id: str, caller: TenantsDep, serving: ServingDep) -> FileDetail:
    """One file: its ledger record and live chunks in order, with hashes and whether each
    vector was embedded, reused or kept at its last change (a tenant key: its own only)."""
    r = serving.ready_engine().retriever
    s = audited(serving.settings)
    return await serving.offload(file_detail, s, r.vectors, r.lexical, doc_id, caller)


@router.get("/v1/verify", dependencies=ADMIN)
async def verify(
    serving: ServingDep, sample: Annotated[int | None, Query(ge=1)] = None
) -> VerifyReport:
    """Audit disk ↔ vectors ↔ BM25 (admin): each drift class with counts and examples. It
    runs in the background lane, yielding to queries between pages. Repair is
    `ragstream verify --repair` (or a restarted `watch`: its catch-up scan)."""
    r = serving.ready_engine().retriever
    s = audited(serving.settings)
    return await serving.background(verify_stores, s, r.vectors, r.lexical, sample)


@router.get("/v1/log", dependencies=ADMIN)
def log(
    serving: ServingDep, limit: Annotated[int | None, Query(ge=1)] = None
) -> list[dict[str, Any]]:
    """The newest `limit` entries of the retrieval log (admin; all kept ones without it),
    oldest first: who asked what, what came back, the trace id."""
    return query_log(limit=limit, settings=serving.settings)


@router.get("/v1/events", responses=EVENTS_DOC)
def events(caller: TenantsDep, serving: ServingDep) -> Any:
    """Sync outcomes as they happen (Server-Sent Events), from `watch --serve` only: first
    `drift` (the last audit's counts), then one `outcome` per document written (a tenant
    key: its own sources' documents only)."""
    if serving.feed is None:
        raise NotFoundError("the live feed is served by `ragstream watch --serve`")
    return event_stream(outcome_events(serving, serving.feed, caller))


__all__ = ["Tenants", "for_tenant", "router"]
