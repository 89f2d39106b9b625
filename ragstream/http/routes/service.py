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
    engine = serving.engine
    if engine is None:
        return {"ok": True, "ready": False}
    return {
        "ok": True,
        "ready": True,
        "embedder": engine.retriever.embedder.version.model_dump(mode="json"),
        "reranker": engine.reranker_name,
        "generator": engine.generator.name,
    }


@router.get("/v1/ready", responses={503: {"description": "not ready"}})
def ready(serving: ServingDep) -> JSONResponse:
    """Readiness: the live collection is open and its embedder is loaded."""
    engine = serving.engine
    if serving.draining:
        return JSONResponse({"ready": False, "reason": "shutting down"}, 503)
    if engine is None:
        return JSONResponse({"ready": False, "reason": "index not open yet"}, 503)
    return JSONResponse(
        {
            "ready": True,
            "collection": engine.retriever.collection,
            "embedder": engine.retriever.embedder.version.slug,
        }
    )
