"""What the package does that `Client` does not: keep an embedded index in sync and
serve it. `sync` and `watch` (optionally serving HTTP from the same process) run ingest
here, `gc` purges old tombstones, `rebuild_lexical` rebuilds the BM25 leg from the vector
store, `load_settings` builds a `Settings`, and `serve_runtime` / `serving` put the HTTP API
over a running flow's stores or a given `Serving`. `import ragstream` re-exports `sync`,
`watch`, `gc` and `load_settings`; its `status` is `ragstream.client.status`, which asks
the index through `ragstream.service.connect` like every `Client` method.

The CLI's `watch` runs `watch` here; its other commands call `ragstream.service` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ragstream.core.models import DocOutcome, SyncReport
from ragstream.core.settings import Settings, load_settings
from ragstream.flows.runtime import Runtime
from ragstream.flows.sync import OutcomeHandler
from ragstream.service import ingest
from ragstream.service.feed import OutcomeFeed
from ragstream.service.ingest import gc, rebuild_lexical, sync

if TYPE_CHECKING:
    from ragstream.http import Serving


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
    if serve is None:
        return ingest.watch(
            paths,
            settings=settings,
            data_dir=data_dir,
            allow_mass_delete=allow_mass_delete,
            on_outcome=on_outcome,
            workers=workers,
        )
    feed = OutcomeFeed()  # the console's Live page

    def published(outcome: DocOutcome) -> None:
        feed.publish(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    @contextmanager
    def http(rt: Runtime) -> Iterator[str]:
        with serve_runtime(rt, serve, on_serving, feed) as url:
            yield url

    return ingest.watch(
        paths,
        settings=settings,
        data_dir=data_dir,
        allow_mass_delete=allow_mass_delete,
        on_outcome=published,
        alongside=http,
        workers=workers,
    )


@contextmanager
def serve_runtime(
    rt: Runtime,
    address: tuple[str, int],
    on_serving: Callable[[str], None] | None,
    feed: OutcomeFeed | None,
) -> Iterator[str]:
    """The HTTP API over a running flow's stores, yielding its URL: its engine reads the
    flow's sides and shares its lock with the index batches, reindex commands wake the flow's
    backfill, and `feed` (when given) carries the outcomes to the console's Live page."""
    from ragstream.http import Serving, serving
    from ragstream.query.engine import QueryEngine
    from ragstream.query.retrieve import Retriever
    from ragstream.service.reindex import Maintainer

    engine = QueryEngine(rt.settings, Retriever(rt.sides, rt.lexical))
    kick = rt.backfill.kick if rt.backfill is not None else None
    maintainer = Maintainer(rt.sides, rt.lexical, kick=kick)
    state = Serving(rt.settings, engine, maintainer, lock=rt.lock, feed=feed)
    with serving(state, address[0], address[1], on_serving) as url:
        yield url


def serving(
    state: Serving, host: str, port: int, on_serving: Callable[[str], None] | None = None
) -> AbstractContextManager[str]:
    """The HTTP API over `state` (`ragstream.http.serving`): yields its URL, recorded in the
    data dir while it serves."""
    from ragstream.http import serving as serve_http

    return serve_http(state, host, port, on_serving)


__all__ = [
    "gc",
    "load_settings",
    "rebuild_lexical",
    "serve_runtime",
    "serving",
    "sync",
    "watch",
]
