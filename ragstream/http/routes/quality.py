"""`GET /v1/eval` (admin): the saved `ragstream eval` reports the console's Quality page
tables and plots."""

from __future__ import annotations

import json

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ragstream.http.deps import ADMIN, ServingDep

router = APIRouter(tags=["quality"])


@router.get("/v1/eval", dependencies=ADMIN)
def eval_reports(serving: ServingDep) -> JSONResponse:
    """The saved `ragstream eval` reports of this data dir, newest first (admin): what
    the console's Quality page tables and plots. `[{"file", "report"}]`."""
    from ragstream.eval.evaluation import saved_reports

    saved = saved_reports(serving.settings.data_dir)
    return JSONResponse([{"file": f, "report": json.loads(r.to_json())} for f, r in saved])
