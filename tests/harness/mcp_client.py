"""The official MCP SDK's client, opened the two ways a host opens ragstream: `ragstream mcp`
as a subprocess over stdio, and streamable HTTP against a served app's `/mcp` with an API
key; and `watch_serve`, a `ragstream watch DIR --serve` subprocess to open them against.
Shared by the MCP tests and `bench/mcp.py`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.session import MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def stdio_session(
    data_dir: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """`python -m ragstream.cli mcp --data-dir D ARGS` as a subprocess, initialized."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragstream.cli", "mcp", "--data-dir", str(data_dir), *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    with open(os.devnull, "w") as quiet:
        async with (
            stdio_client(params, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(
    url: str,
    key: str | None = None,
    on_status: Callable[[str, int], None] | None = None,
    on_message: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """The streamable HTTP client on `URL/mcp`, sending `key` as the bearer token;
    `on_status(method, status)` sees every HTTP response the transport gets, `on_message`
    every notification the server sends."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = httpx2.Timeout(120.0)

    async def seen(response: httpx2.Response) -> None:
        if on_status is not None:
            on_status(response.request.method, response.status_code)

    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=timeout, event_hooks={"response": [seen]}
        ) as client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def watch_serve(root: Path, data: Path) -> Iterator[str]:
    """`ragstream watch ROOT --data-dir DATA --serve --port 0` (sync debounce 100 ms) as a
    subprocess; yields its URL once it serves, and stops it with SIGINT."""
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
        yield json.loads(endpoint.read_text())["url"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call's `structuredContent` (asserting it is not a tool error)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content
