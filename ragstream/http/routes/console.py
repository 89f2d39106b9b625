"""The web console: plain files in the package (page, script, styles), every asset served
by this process (offline), at `/` and `/console/*`."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

CONSOLE = Path(__file__).resolve().parents[2] / "console"


def mount_console(app: FastAPI) -> None:
    app.mount("/console", StaticFiles(directory=CONSOLE), name="console")

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(CONSOLE / "index.html")
