"""`create_app`: the FastAPI app of `ragstream serve` and `ragstream watch --serve`,
assembled from its parts (error handling, routers, the MCP endpoint, the console); the
routes live in `routes/`, what they depend on in `deps`, MCP in `mcp`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from ragstream.http.admission import Admission, Limits, default_max_inflight
from ragstream.http.deps import Serving
from ragstream.http.errors import install_error_handling
from ragstream.http.mcp import mount_mcp
from ragstream.http.routes import ROUTERS
from ragstream.http.routes.console import mount_console


def package_version() -> str:
    """The installed distribution's version (the one `pyproject.toml` declares)."""
    try:
        return version("ragstream")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def limits_of(serving: Serving) -> Limits:
    """The admission limits `server.*` set, with defaults from the machine and the LLM."""
    s = serving.settings
    llm = s.generator.base_url is not None
    inflight = s.server.max_inflight or default_max_inflight(llm, serving.cpu_threads)
    queue = 2 * inflight if s.server.max_queue is None else s.server.max_queue
    return Limits(
        inflight,
        queue,
        s.server.request_timeout_s,
        s.server.rate_per_key,
        body_timeout_s=s.server.body_timeout_s,
    )


def create_app(serving: Serving) -> FastAPI:
    app = FastAPIOffline(
        title="ragstream",
        version=package_version(),
        summary="Answers with verified citations from an index kept in sync with folders.",
        swagger_ui_parameters={"validatorUrl": None},  # the viewer calls nothing outside
    )
    app.state.serving = serving
    app.add_middleware(Admission, limits=limits_of(serving), draining=lambda: serving.draining)
    install_error_handling(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_mcp(app, serving)
    mount_console(app)
    return app
