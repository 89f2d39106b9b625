"""`/mcp`: the MCP server (`ragstream.mcp`) over the SDK's streamable HTTP transport, on the
app's port. A request without a known API key is a 401 before it reaches the transport, and
each tool call asks the served index as the tenants of that request's own key see it
(`deps.caller_tenants`, the rule of `/v1/*`); the admission middleware holds back `POST
/mcp` like the work routes. The transport's session manager starts with the first request,
on the server's event loop (the app runs without a lifespan), and with it the follower of the
served index's live feed (`ListChanges`, in `watch --serve`): a session is told
`notifications/resources/list_changed` when a document its key's tenants see comes, goes or
changes, and forgotten when its client deletes it."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request

from ragstream.core.errors import AuthError, RagstreamError
from ragstream.core.ids import in_sources
from ragstream.http.admission import Receive, Scope, Send
from ragstream.http.deps import Serving, caller_tenants
from ragstream.http.errors import user_error
from ragstream.mcp.changes import ListChanges, Sees
from ragstream.mcp.server import build_server
from ragstream.service.base import IndexService

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app mounted at `/mcp`."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

        async def index_of(ctx: ServerRequestContext[Any, Any]) -> IndexService:
            if not isinstance(ctx.request, Request):
                raise AuthError("an MCP call over HTTP carries its API key on each request")
            return serving.ready_index(await caller_tenants(ctx.request, serving))

        async def scope_of(ctx: ServerRequestContext[Any, Any]) -> tuple[str, Sees] | None:
            if not isinstance(ctx.request, Request):
                return None
            key = ctx.request.headers.get(MCP_SESSION_ID_HEADER)
            if key is None:
                return None
            own = serving.settings.sources_of((await caller_tenants(ctx.request, serving)).tenants)
            return key, lambda doc_id: in_sources(doc_id, own)

        # the operator's view of the feed; each session is told of its own tenants' documents
        self.changes = (
            ListChanges(lambda wait_s: serving.ready_index().follow(wait_s), scope_of)
            if serving.syncs
            else None
        )
        server = build_server(index_of, serving.offload, self.changes)
        self.manager = StreamableHTTPSessionManager(app=server)
        self._started: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def _run(self, started: asyncio.Event) -> None:
        async with self.manager.run():
            started.set()
            if self.changes is not None:
                await self.changes.run()  # follows the feed until the loop ends
            await asyncio.Event().wait()  # until the loop ends (the server stops)

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = asyncio.Event()
            self._task = asyncio.create_task(self._run(self._started))
        await self._started.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            await caller_tenants(request, self.serving)  # unknown key: 401, as on /v1/*
        except RagstreamError as exc:
            await (await user_error(request, exc))(scope, receive, send)
            return
        await self._ensure_started()
        await self.manager.handle_request(scope, receive, send)
        key = request.headers.get(MCP_SESSION_ID_HEADER)
        if request.method == "DELETE" and key and self.changes is not None:
            self.changes.leave(key)


def mount_mcp(app: Any, serving: Serving) -> None:
    """`/mcp` on `app`: streamable HTTP, the same keys, tenants and admission as `/v1/*`."""
    endpoint = McpEndpoint(serving)
    app.state.mcp = endpoint
    app.add_route(PATH, endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
