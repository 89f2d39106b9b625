"""A session over streamable HTTP at `/mcp` of a real `ragstream watch DIR --serve` is told
when the documents it lists change: the server advertises `resources.listChanged`, a file
added to the folder brings `notifications/resources/list_changed` (on the session's
standalone stream, with no request of the client's in flight) within a bounded wait, and
the next `resources/list` names the new document."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError

from tests.harness.mcp_client import http_session, watch_serve

pytestmark = pytest.mark.slow  # a watch --serve subprocess

WAIT_S = 60.0  # from the write to the notification: the sync pass, then the debounce


async def _listed(session: ClientSession) -> set[str]:
    """The names `resources/list` gives (none while the index is still opening)."""
    try:
        return {r.name for r in (await session.list_resources()).resources}
    except MCPError as err:
        assert err.data["status"] == 503, err
        return set()


async def _session(root: Path, url: str) -> None:
    changed = asyncio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changed.set()

    async with http_session(url, on_message=on_message) as s:
        capabilities = (await s.initialize()).capabilities
        assert capabilities.resources is not None and capabilities.resources.list_changed
        deadline = time.monotonic() + 120
        while "notes:tea.md" not in await _listed(s):
            assert time.monotonic() < deadline, "the catch-up never indexed tea.md"
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # whatever the catch-up's outcomes sent has arrived
        changed.clear()
        assert "notes:coffee.md" not in await _listed(s)
        (root / "coffee.md").write_text("# Coffee\n\nEspresso is brewed at nine bars.\n")
        await asyncio.wait_for(changed.wait(), WAIT_S)
        assert "notes:coffee.md" in await _listed(s)


def test_a_new_file_sends_resources_list_changed_over_http(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees.\n")
    with watch_serve(root, tmp_path / "data") as url:
        asyncio.run(_session(root, url))
