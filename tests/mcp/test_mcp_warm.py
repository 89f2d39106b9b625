"""`ragstream mcp` over an embedded data dir opens its models in the background as it
starts (`server.warm`), so the first question waits on a load already under way, never on
a cold start."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.mcp import server as mcp_server
from ragstream.service.local import LocalIndex
from ragstream.service.served import ServedIndex
from tests.harness.helpers import copy_docs


@asynccontextmanager
async def hung_up_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """stdin already at EOF: the server starts and stops at once."""
    send_in, read_in = anyio.create_memory_object_stream[Any](1)
    send_out, read_out = anyio.create_memory_object_stream[Any](16)
    await send_in.aclose()
    async with read_out:
        yield read_in, send_out


class Recording:
    def __init__(self) -> None:
        self.warmed = threading.Event()
        self.thread = ""

    def warm(self) -> None:
        self.thread = threading.current_thread().name
        self.warmed.set()


@pytest.mark.parametrize("warm", [True, False])
def test_the_stdio_server_warms_an_embedded_index_in_the_background(
    monkeypatch: pytest.MonkeyPatch, warm: bool
) -> None:
    monkeypatch.setattr(mcp_server, "stdio_server", hung_up_stdio)
    index = Recording()
    anyio.run(mcp_server.serve_stdio, index, warm)  # type: ignore[arg-type]
    if warm:  # on its own thread, whether or not a question came first
        assert index.warmed.wait(60) and index.thread == "ragstream-warm"
    else:
        assert not index.warmed.is_set() and index.thread == ""


def test_warming_a_local_index_opens_the_served_index_and_its_embedder(
    tmp_path: Path, shared_docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real = ServedIndex.warm

    def recording(self: ServedIndex) -> None:
        opened.append(self.engine.retriever.collection)
        real(self)

    monkeypatch.setattr(ServedIndex, "warm", recording)
    root = copy_docs(shared_docs, ["md/docling_faq_index.md"], tmp_path / "docs", flat=True)
    settings = Settings(data_dir=tmp_path / "data", query={"log_queries": False})
    api.sync([root], settings=settings)
    with LocalIndex(settings).open() as index:
        index.warm()
        assert len(opened) == 1  # the served index, opened once, with its models
        assert index.query("Is Python 3.13 supported?").citations
        assert len(opened) == 1
