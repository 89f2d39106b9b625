"""`GET /v1/eval` (admin): the saved `ragstream eval` reports the console's Quality page
tables and plots."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ragstream.http.deps import ADMIN, ServingDep

router = APIRouter(tags=["quality"])


@router.get("/v1/eval", dependencies=ADMIN)
def eval_reports(serving: ServingDep) -> list[dict[str, Any]]:
    """The saved `ragstream eval` reports of this data dir, newest first (admin): what
    the console's Quality page tables and plots. `[{"file", "report"}]`."""
    return serving.ready_index().eval_reports()
