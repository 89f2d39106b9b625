"""`ragstream mcp` as a subprocess over stdio, with the SDK's own client, while `watch
--serve` owns the data dir (so the stdio server asks it over HTTP, the documented path):
list tools, search, a cited answer; edit the file; the next ask reflects the edit with the
new file version."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.mcp_client import call, stdio_session

pytestmark = pytest.mark.slow  # watch --serve and mcp subprocesses


async def _session(data: Path, doc: Path) -> None:
    async with stdio_session(data) as s:
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


def test_stdio_mcp_asks_the_watching_process_and_sees_edits(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    doc = root / "tea.md"
    doc.write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = tmp_path / "data"
    env = dict(os.environ, RAGSTREAM_SYNC__DEBOUNCE_MS="100")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream.cli", "watch", str(root), "--data-dir", str(data),
         "--json", "--serve", "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        endpoint = data / "state" / "endpoint.json"
        deadline = time.monotonic() + 180
        while not endpoint.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "watch --serve never served"
            time.sleep(0.2)
        asyncio.run(_session(data, doc))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
