"""The public Python API behind the CLI: sync, watch, status, gc."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.audit import scheduled_verify
from ragstream.connectors.fs import ScanHandler
from ragstream.connectors.lexical import open_lexical_index, section_contexts
from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.connectors.state import SourcesBook, endpoint_path, write_json_atomic
from ragstream.connectors.vector_stores import configured_live, open_configured
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import DocOutcome, StatusReport, SyncReport
from ragstream.core.settings import Settings, load_settings
from ragstream.core.telemetry import configure
from ragstream.feed import OutcomeFeed
from ragstream.flows.runtime import Runtime
from ragstream.flows.sides import open_sides
from ragstream.flows.sync import OutcomeHandler, run_sync
from ragstream.query.engine import QueryEngine
from ragstream.query.retrieve import Retriever, no_index
from ragstream.reindex import Maintainer
from ragstream.status import status_report

if TYPE_CHECKING:
    from ragstream.server import Serving


def _with_paths(settings: Settings, paths: Sequence[str | Path]) -> Settings:
    chosen = settings.with_paths([Path(p) for p in paths])
    if not chosen.sources:
        raise InvalidRequestError("no folders to sync: pass PATH arguments or configure `sources`")
    for src in chosen.sources:
        if not src.root.is_dir():
            raise InvalidRequestError(f"not a directory: {src.root} (pass a folder to sync)")
    SourcesBook(chosen.state_dir).record(chosen.sources)  # what `verify` audits by default
    return chosen


def sync(
    paths: Sequence[str | Path],
    *,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
    allow_mass_delete: bool = False,
    on_outcome: OutcomeHandler | None = None,
    on_scan: ScanHandler | None = None,
    workers: int = 1,
) -> SyncReport:
    """Catch up once: make the index equal the folders, then return the pass's totals.

    `workers` bytewax worker threads share the parsing; one of them writes (`flows.sync`).
    """
    chosen = _with_paths(settings or load_settings(data_dir), paths)
    return run_sync(
        chosen,
        watch=False,
        workers=workers,
        allow_mass_delete=allow_mass_delete,
        on_outcome=on_outcome,
        on_scan=on_scan,
    )


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
    `<data_dir>/recovery/`).

    `serve=(host, port)` also answers queries over HTTP from this process's own stores
    (one process owns an embedded data dir); its URL is recorded for `Client`s. `workers`
    bytewax worker threads share the parsing; one of them writes.
    """
    chosen = _with_paths(settings or load_settings(data_dir), paths)
    feed = OutcomeFeed() if serve is not None else None  # the console's Live page

    @contextmanager
    def alongside(rt: Runtime) -> Iterator[None]:
        with ExitStack() as scope:
            if chosen.verify_every_s > 0:
                scope.enter_context(scheduled_verify(rt, chosen))
            if serve is not None:
                scope.enter_context(_serving(rt, serve[0], serve[1], on_serving, feed))
            yield

    def published(outcome: DocOutcome) -> None:
        if feed is not None:
            feed.publish(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    return run_sync(
        chosen,
        watch=True,
        workers=workers,
        allow_mass_delete=allow_mass_delete,
        on_outcome=published,
        alongside=alongside,
    )


@contextmanager
def open_engine(settings: Settings) -> Iterator[tuple[QueryEngine, Maintainer]]:
    """A query engine and the reindex commands over one set of open stores (`serve`, an
    embedded `Client`): a process opens an embedded data dir once, so both share it."""
    s = settings
    if configured_live(s) is None:
        raise no_index(s)
    configure(s.telemetry_exporter, s.otlp_endpoint)
    with (
        open_sides(s) as sides,
        closing(open_lexical_index(s.lexical, s.lexical_dir, lambda: sides.live.vectors)) as lex,
    ):
        yield QueryEngine(s, Retriever(sides, lex)), Maintainer(sides, lex)


@contextmanager
def serving(
    state: Serving,
    host: str,
    port: int,
    on_serving: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """The HTTP API (uvicorn, background thread) over `state`; yields its URL, which is
    recorded in the data dir while it serves so `Client`s find it.

    Used by `serve` (which opens the engine after the server is up: `/v1/ready` says when)
    and by `watch --serve` (the engine reads the flow's stores and shares its lock with the
    index batches). With a maintainer the reindex commands are served too.
    """
    from ragstream.server import create_app, run_server

    state_dir = state.settings.state_dir
    with run_server(create_app(state), host, port) as url:
        write_json_atomic(endpoint_path(state_dir), {"url": url, "pid": os.getpid()})
        if on_serving is not None:
            on_serving(url)
        try:
            yield url
        finally:
            endpoint_path(state_dir).unlink(missing_ok=True)


def _serving(
    rt: Runtime,
    host: str,
    port: int,
    on_serving: Callable[[str], None] | None,
    feed: OutcomeFeed | None = None,
) -> AbstractContextManager[str]:
    from ragstream.server import Serving

    engine = QueryEngine(rt.settings, Retriever(rt.sides, rt.lexical))
    kick = rt.backfill.kick if rt.backfill is not None else None
    maintainer = Maintainer(rt.sides, rt.lexical, kick=kick)
    state = Serving(rt.settings, engine, maintainer, lock=rt.lock, feed=feed)
    return serving(state, host, port, on_serving)


@contextmanager
def open_stores(s: Settings) -> Iterator[tuple[VectorStore, LexicalIndex]]:
    """The live vector store and the lexical index, opened without any model (an audit)."""
    with _live_vectors(s) as live:
        if live is None:
            raise no_index(s)
        vectors = live[1]
        with closing(open_lexical_index(s.lexical, s.lexical_dir, lambda: vectors)) as lx:
            yield vectors, lx


@contextmanager
def _live_vectors(s: Settings) -> Iterator[tuple[str, VectorStore] | None]:
    """The live collection's name and store (opened with its recorded embedder), or None."""
    live = configured_live(s)
    if live is None:
        yield None
        return
    vectors = open_configured(s, live[1])
    try:
        yield live[0], vectors
    finally:
        vectors.close()


def status(*, settings: Settings | None = None, data_dir: str | Path | None = None) -> StatusReport:
    """Counts and versions straight from the stores; loads no model."""
    s = settings or load_settings(data_dir)
    with _live_vectors(s) as live:
        if live is None:
            return status_report(s, None, None)
        vectors = live[1]
        with closing(open_lexical_index(s.lexical, s.lexical_dir, lambda: vectors)) as lexical:
            return status_report(s, live, lexical)


def gc(
    *,
    retention_s: float | None = None,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
) -> dict[str, int]:
    """Hard-delete tombstones older than the retention window in both stores."""
    s = settings or load_settings(data_dir)
    cutoff = time.time() - (s.gc_retention_s if retention_s is None else retention_s)
    purged = {"vectors": 0, "lexical": 0}
    with _live_vectors(s) as live:
        if live is not None:
            purged["vectors"] = live[1].gc(cutoff)
    if s.lexical != "sparse":  # the sparse leg's vectors go with their points
        with closing(open_lexical_index(s.lexical, s.lexical_dir)) as lexical:
            purged["lexical"] = lexical.gc(cutoff)
            lexical.commit()
    return purged


def rebuild_lexical(*, settings: Settings | None = None, data_dir: str | Path | None = None) -> int:
    """Rebuild the lexical index from the live chunks the vector store holds (the truth).

    For a lost or corrupted lexical dir, or after a change to what BM25 indexes. Tombstones
    are not carried over (they are invisible to search anyway). Returns chunks indexed.
    """
    s = settings or load_settings(data_dir)
    if s.lexical == "sparse":
        raise InvalidRequestError(
            "lexical_backend = 'sparse': the BM25 leg is part of the vector store's points, "
            "there is no separate index to rebuild"
        )
    with _live_vectors(s) as live:
        if live is None:
            raise no_index(s)
        vectors = live[1]
        shutil.rmtree(s.lexical_dir, ignore_errors=True)
        with closing(open_lexical_index(s.lexical, s.lexical_dir)) as lexical:
            total = pending = 0
            for doc in sorted(vectors.live_doc_fingerprints()):
                chunks = sorted(vectors.live_chunks(doc), key=lambda c: c.ordinal)
                contexts = section_contexts(chunks)  # BM25-only text, not in the vector store
                lexical.upsert(
                    [
                        c.model_copy(update={"lexical_context": x})
                        for c, x in zip(chunks, contexts, strict=True)
                    ]
                )
                total, pending = total + len(chunks), pending + len(chunks)
                if pending >= 2000:  # bounded memory: commit in slices
                    lexical.commit()
                    pending = 0
            lexical.commit()
    return total


def query_log(
    *,
    limit: int | None = None,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
) -> list[dict[str, Any]]:
    """The newest `limit` entries of the retrieval log (all kept ones if None), oldest first."""
    s = settings or load_settings(data_dir)
    q = s.query
    entries = list(RetrievalLog(s.retrieval_log_path, q.log_max_bytes, q.log_keep).read())
    return entries[-limit:] if limit else entries


__all__ = [
    "gc",
    "load_settings",
    "open_engine",
    "open_stores",
    "query_log",
    "rebuild_lexical",
    "serving",
    "status",
    "sync",
    "watch",
]
