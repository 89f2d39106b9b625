"""ragstream: keep a retrieval index in sync with document folders, and ask it.

    import ragstream
    report = ragstream.sync(["docs/"], data_dir=".ragstream")   # ingest, in this process
    print(ragstream.status(data_dir=".ragstream"))              # asks the index
    with ragstream.Client(url="http://127.0.0.1:8765") as c:   # light: no model, no store
        c.query("how are deleted files handled?")

Two kinds of names. `sync`, `watch`, `gc`, `load_settings` and `serve` (from
`ragstream.api`) keep an embedded index in sync and serve it over HTTP
(`with ragstream.serve(ragstream.load_settings(".ragstream"), port=0) as url: ...`).
`status`, `Client` and `AsyncClient` (from `ragstream.client`) ask
an index wherever `ragstream.service.connect` finds it: a URL, the endpoint a running
`serve` / `watch --serve` recorded in the data dir (that process answers), or the data
dir's stores opened here. `RagstreamError` is the base of
the typed errors they raise. `ragstream.integrations` holds retrievers for LangChain and
LlamaIndex over both clients (the extras `ragstream[langchain]`, `ragstream[llamaindex]`).

Every name is imported on first use, so `import ragstream` (and the remote client) loads
no model, parser, dataflow engine or store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.api import gc, load_settings, serve, sync, watch
    from ragstream.client import AsyncClient, Client, status
    from ragstream.core.errors import RagstreamError

_LAZY = {
    "gc": "ragstream.api",
    "load_settings": "ragstream.api",
    "serve": "ragstream.api",
    "status": "ragstream.client",
    "sync": "ragstream.api",
    "watch": "ragstream.api",
    "Client": "ragstream.client",
    "AsyncClient": "ragstream.client",
    "RagstreamError": "ragstream.core.errors",
}

__all__ = [
    "AsyncClient",
    "Client",
    "RagstreamError",
    "gc",
    "load_settings",
    "serve",
    "status",
    "sync",
    "watch",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ragstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
