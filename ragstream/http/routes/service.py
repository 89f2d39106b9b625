"""Liveness and readiness: `GET /v1/health` and `GET /v1/ready`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ragstream.http.deps import ServingDep

router = APIRouter(tags=["service"])


@router.get("/v1/health")
def health(serving: ServingDep) -> dict[str, Any]:
    """Liveness: the process answers. Model names once the index is open."""
    if serving.index is None:
        return {"ok": True, "ready": False}
    return serving.index.health()


@router.get("/v1/ready", responses={503: {"description": "not ready"}})
def ready(serving: ServingDep) -> JSONResponse:
    """Readiness: the live collection is open and its embedder is loaded."""
    if serving.draining:
        return JSONResponse({"ready": False, "reason": "shutting down"}, 503)
    if serving.index is None:
        return JSONResponse({"ready": False, "reason": "index not open yet"}, 503)
    readiness = serving.index.readiness()
    return JSONResponse(readiness, 200 if readiness["ready"] else 503)
