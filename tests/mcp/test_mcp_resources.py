"""The document resources are listed in pages: the SDK's client walks `nextCursor` through a
ledger of 250 files (100, 100, 50) and sees each once; a cursor the server never gave is a
typed error and the session keeps serving. The ledger is a stand-in for `IndexService.files`
(the real one answers the resource tests of test_mcp_http.py), the server and the client are
the real ones, joined by the SDK's in-memory streams."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from mcp import ClientSession
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import INVALID_PARAMS, PaginatedRequestParams

from ragstream.core.models import FileRecord
from ragstream.mcp.schemas import PAGE_SIZE
from ragstream.mcp.server import build_server, doc_uri
from ragstream.service.base import IndexService


class Ledger:
    """`files()` of an index of `n` documents."""

    def __init__(self, n: int) -> None:
        self.records = [
            FileRecord(doc_id=f"notes:d{i:03d}.md", source="notes", path=f"d{i:03d}.md",
                       state="indexed", chunks=1)
            for i in range(n)
        ]  # fmt: skip

    def files(self, **_: Any) -> list[FileRecord]:
        return self.records


async def _walk(n: int) -> tuple[list[str], list[str | None]]:
    index = cast(IndexService, Ledger(n))

    async def index_of(ctx: ServerRequestContext[Any, Any]) -> IndexService:
        return index

    server = build_server(index_of)
    async with (
        create_client_server_memory_streams() as (client, served),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(
            lambda: server.run(served[0], served[1], server.create_initialization_options())
        )
        async with ClientSession(*client) as session:
            await session.initialize()
            uris: list[str] = []
            cursors: list[str | None] = []
            cursor: str | None = None
            while True:
                page = await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
                uris += [r.uri for r in page.resources]
                cursors.append(page.next_cursor)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            with pytest.raises(MCPError) as caught:
                await session.list_resources(params=PaginatedRequestParams(cursor="x"))
            assert caught.value.code == INVALID_PARAMS
            assert len((await session.list_resources()).resources) == PAGE_SIZE
        tg.cancel_scope.cancel()
    return uris, cursors


def test_resources_are_listed_in_pages_each_document_once() -> None:
    uris, cursors = anyio.run(_walk, 250)
    assert cursors == ["100", "200", None]
    assert uris == [doc_uri(f"notes:d{i:03d}.md") for i in range(250)]
    assert uris[0] == "ragstream://doc/notes:d000.md"
