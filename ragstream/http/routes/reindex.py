"""`POST /v1/admin/reindex/{status,start,run,promote,rollback,cleanup,abort}`: the blue/green
commands (with `server.api_keys` set, an admin key only)."""

from __future__ import annotations

from fastapi import APIRouter

from ragstream.core.models import CleanupOptions, PromoteOptions, ReindexStatus, StartOptions
from ragstream.http.deps import ADMIN, ServingDep

router = APIRouter(prefix="/v1/admin/reindex", tags=["reindex (admin)"], dependencies=ADMIN)


@router.post("/status")
def reindex_status(serving: ServingDep) -> ReindexStatus:
    return serving.ready_index().reindex_status()


@router.post("/start")
def reindex_start(body: StartOptions, serving: ServingDep) -> ReindexStatus:
    return serving.ready_index().reindex_start(body.embedder)


@router.post("/run")
def reindex_run(serving: ServingDep) -> ReindexStatus:
    return serving.ready_index().reindex_run()


@router.post("/promote")
def reindex_promote(serving: ServingDep, body: PromoteOptions | None = None) -> ReindexStatus:
    return serving.ready_index().reindex_promote(**(body or PromoteOptions()).model_dump())


@router.post("/rollback")
def reindex_rollback(serving: ServingDep) -> ReindexStatus:
    return serving.ready_index().reindex_rollback()


@router.post("/cleanup")
def reindex_cleanup(serving: ServingDep, body: CleanupOptions | None = None) -> ReindexStatus:
    return serving.ready_index().reindex_cleanup(confirm=(body or CleanupOptions()).confirm)


@router.post("/abort")
def reindex_abort(serving: ServingDep) -> ReindexStatus:
    return serving.ready_index().reindex_abort()
