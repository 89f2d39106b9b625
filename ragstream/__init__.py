"""ragstream: keep a retrieval index in sync with document folders.

Public API (floor 4, the face):

    import ragstream
    report = ragstream.sync(["docs/"], data_dir=".ragstream")
    print(ragstream.status(data_dir=".ragstream"))
    with ragstream.Client(url="http://127.0.0.1:8765") as c:   # light: no model, no store
        c.query("how are deleted files handled?")

Every name is imported on first use, so `import ragstream` (and the remote client) loads
no model, parser, dataflow engine or store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.api import gc, load_settings, status, sync, watch
    from ragstream.client import AsyncClient, Client
    from ragstream.core.errors import RagstreamError

_LAZY = {
    "gc": "ragstream.api",
    "load_settings": "ragstream.api",
    "status": "ragstream.api",
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
