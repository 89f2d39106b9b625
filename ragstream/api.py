"""What the package does that `Client` does not: keep an embedded index in sync and
serve it. `sync` and `watch` (optionally serving HTTP from the same process) run ingest
here, `gc` purges old tombstones, `optimize` builds the HNSW graph, `rebuild_lexical`
rebuilds the BM25 leg from the vector store, `load_settings` builds a `Settings`, and
`serve` runs the HTTP API over a data dir or a running flow's stores. `import ragstream`
re-exports `sync`, `watch`, `gc`, `load_settings` and `serve`; its `status` is
`ragstream.client.status`, which asks the index through `ragstream.service.connect` like
every `Client` method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.core.models import SyncReport
from ragstream.core.settings import Settings, load_settings
from ragstream.service import ingest
from ragstream.service.feed import OutcomeFeed
from ragstream.service.ingest import OutcomeHandler, gc, optimize, rebuild_lexical, sync

if TYPE_CHECKING:
    from ragstream.service.served import Servable


def watch(
    paths: Sequence[str | Path],
    *,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
    allow_mass_delete: bool = False,
    on_outcome: OutcomeHandler | None = None,
    serve: tuple[str, int] | None = None,
    on_serving: Callable[[str], None] | None = None,
    workers: int = 1,
) -> SyncReport:
    """Catch up, then follow every change until interrupted (bytewax recovery on, under
    `<data_dir>/recovery/`); returns the totals.

    `serve=(host, port)` also answers queries over HTTP from this process's own stores
    (one process owns an embedded data dir): its URL is recorded in the data dir for clients
    and passed to `on_serving`, and the console's Live page follows the outcomes. `workers`
    bytewax worker threads share the parsing; one of them writes.
    """
    common: dict[str, Any] = dict(
        settings=settings,
        data_dir=data_dir,
        allow_mass_delete=allow_mass_delete,
        on_outcome=on_outcome,
        workers=workers,
    )
    if serve is None:
        return ingest.watch(paths, **common)
    host, port = serve

    def http(target: Servable, feed: OutcomeFeed) -> AbstractContextManager[str]:
        from ragstream.http import serve as serve_http

        return serve_http(target, host=host, port=port, on_serving=on_serving, feed=feed)

    return ingest.watch_serving(paths, http, **common)


def serve(
    target: Servable,
    *,
    host: str | None = None,
    port: int | None = None,
    on_serving: Callable[[str], None] | None = None,
    feed: OutcomeFeed | None = None,
) -> AbstractContextManager[str]:
    """The HTTP API of a data dir (`Settings`) or of a running flow's stores (`Runtime`),
    yielding its URL once the index is open (`ragstream.http.serve`)."""
    from ragstream.http import serve as serve_http

    return serve_http(target, host=host, port=port, on_serving=on_serving, feed=feed)


__all__ = [
    "gc",
    "load_settings",
    "optimize",
    "rebuild_lexical",
    "serve",
    "sync",
    "watch",
]
