"""Snapshots of the served data dir (admin): `POST /v1/snapshots` takes one while the index
keeps answering, `GET /v1/snapshots` lists them, `GET /v1/snapshots/{id}` downloads one."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from ragstream.core.snapshot import SnapshotInfo
from ragstream.http.deps import ADMIN, ServingDep

router = APIRouter(prefix="/v1/snapshots", tags=["snapshots (admin)"], dependencies=ADMIN)


@router.post("")
async def snapshot(serving: ServingDep) -> SnapshotInfo:
    """Snapshot the data dir now (index batches wait while it is written; queries do not)."""
    return await serving.background(lambda pause: serving.ready_index().snapshot())


@router.get("")
def snapshots(serving: ServingDep) -> list[SnapshotInfo]:
    """The data dir's snapshots, newest first."""
    return serving.ready_index().snapshots()


@router.get("/{snapshot_id}", response_class=FileResponse)
def download(snapshot_id: str, serving: ServingDep) -> FileResponse:
    """One snapshot file (a tar whose last member is its manifest)."""
    path = serving.ready_index().snapshot_file(snapshot_id)
    return FileResponse(path, media_type="application/x-tar", filename=path.name)
