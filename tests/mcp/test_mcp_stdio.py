"""`ragstream mcp` as a subprocess over stdio, with the SDK's own client, while `watch
--serve` owns the data dir (so the stdio server asks it over HTTP, the documented path):
list tools, search, a cited answer; edit the file; the next ask reflects the edit with the
new file version, over stdio and over the same process's `/mcp` (a session opened before
the edit); bad input over stdio is a typed error and the next call works."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.harness.mcp_client import call, http_session, stdio_session, watch_serve

pytestmark = pytest.mark.slow  # watch --serve and mcp subprocesses


BAD = [
    ("no_such_tool", {}, "unknown_tool"),
    ("search", {"query": ["tea"], "k": "many"}, "invalid_request"),
    ("ask", {"question": "tea " * 2000}, "invalid_request"),
    ("search", {"query": "tea", "k": 10**6}, "invalid_request"),
    ("read", {"path": "../../etc/passwd"}, "not_found"),
]


async def _session(data: Path, doc: Path, url: str) -> None:
    async with stdio_session(data) as s, http_session(url) as h:
        assert {t.name for t in (await s.list_tools()).tools} >= {"search", "ask", "read"}
        deadline = time.monotonic() + 120
        while not (hits := (await call(s, "search", query="green tea steeped"))["hits"]):
            assert time.monotonic() < deadline, "the catch-up never indexed tea.md"
            await asyncio.sleep(0.5)
        assert hits[0]["doc_id"] == "notes:tea.md"
        first = await call(s, "ask", question="How long is green tea steeped?")
        assert first["answered"] and "two minutes" in first["text"]
        version = first["citations"][0]["file_version"]["digest"]
        doc.write_text("# Tea\n\nGreen tea is steeped at 80 degrees for three minutes.\n")
        deadline = time.monotonic() + 120
        while True:
            again = await call(s, "ask", question="How long is green tea steeped?")
            if again["answered"] and "three minutes" in again["text"]:
                break
            assert time.monotonic() < deadline, again
            await asyncio.sleep(0.5)
        assert again["citations"][0]["file_version"]["digest"] != version
        over_http = await call(h, "ask", question="How long is green tea steeped?")
        assert over_http["answered"] and "three minutes" in over_http["text"]
        assert over_http["citations"][0]["file_version"] == again["citations"][0]["file_version"]
        for tool, arguments, code in BAD:
            with pytest.raises(MCPError) as caught:
                await s.call_tool(tool, arguments)
            assert caught.value.code == INVALID_PARAMS, (tool, arguments)
            assert caught.value.data["code"] == code, (tool, caught.value.data)
            assert (await call(s, "status"))["docs"] == 1  # still serving


def test_stdio_mcp_asks_the_watching_process_and_sees_edits(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    doc = root / "tea.md"
    doc.write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = tmp_path / "data"
    with watch_serve(root, data) as url:
        asyncio.run(_session(data, doc, url))


async def _as_tenant(data: Path, config: Path) -> tuple[set[str], list[str]]:
    env = {"RAGSTREAM_CONFIG": str(config)}
    async with stdio_session(data, "--tenant", "acme", env=env) as s:
        files = {f["doc_id"] for f in (await call(s, "files"))["files"]}
        hits = (await call(s, "search", query="espresso brewed pressure", k=5))["hits"]
        listed = [r.name for r in (await s.list_resources()).resources]
        return files | set(listed), [h["doc_id"] for h in hits]


def test_stdio_mcp_answers_as_the_tenant_its_flag_names(tmp_path: Path) -> None:
    """Embedded (no server owns the data dir), `--tenant acme` sees only acme's sources
    through the ledger, search and resources."""
    for tenant, name, text in (
        ("acme", "tea.md", "# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n"),
        ("globex", "coffee.md", "# Coffee\n\nEspresso is brewed at nine bars of pressure.\n"),
    ):
        (tmp_path / tenant).mkdir()
        (tmp_path / tenant / name).write_text(text)
    data, config = tmp_path / "data", tmp_path / "ragstream.toml"
    config.write_text(
        "".join(
            f'[[sources]]\nname = "{t}"\nroot = "{tmp_path / t}"\ntenant = "{t}"\n\n'
            for t in ("acme", "globex")
        )
    )
    env = dict(os.environ, RAGSTREAM_CONFIG=str(config))
    code = f"from ragstream import api; print(api.sync([], data_dir={str(data)!r}).chunks_live)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split()[-1] == "2", done.stderr[-2000:]
    seen, hits = asyncio.run(_as_tenant(data, config))
    assert seen == {"acme:tea.md"}
    assert hits and set(hits) == {"acme:tea.md"}  # never globex's coffee, however close
