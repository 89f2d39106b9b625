"""Keeping an embedded index equal to its folders, and its upkeep: `sync` (catch up once),
`watch` (catch up, then follow every change), `watch_serving` (the same, serving queries
from the flow's own stores beside it), `gc` (purge old tombstones),
`rebuild_lexical` (BM25 from the vector store), `status` (counts, no model) and
`query_log` (the retrieval log)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

from ragstream.connectors.lexical import section_contexts
from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.connectors.source_input import ScanHandler
from ragstream.connectors.stores import open_lexical_index
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import DocOutcome, StatusReport, SyncReport
from ragstream.core.settings import Settings, load_settings
from ragstream.flows.runtime import Runtime
from ragstream.flows.sources import with_folders
from ragstream.flows.sync import OutcomeHandler, run_sync
from ragstream.query.retrieve import no_index
from ragstream.service import snapshots
from ragstream.service.audit import scheduled_verify
from ragstream.service.feed import OutcomeFeed
from ragstream.service.status import status_report
from ragstream.service.stores import live_vectors, open_live

Alongside = Callable[[Runtime], AbstractContextManager[object]]
# what serves a running flow's stores (an HTTP server, given the outcomes to publish),
# yielding its URL: the face passes it in, so this floor composes serving beside the flow
ServeBeside = Callable[[Runtime, OutcomeFeed], AbstractContextManager[str]]


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
    chosen = with_folders(settings or load_settings(data_dir), paths)
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
    alongside: Alongside | None = None,
    workers: int = 1,
) -> SyncReport:
    """Catch up, then follow every change until interrupted (bytewax recovery on, under
    `<data_dir>/recovery/`). `alongside(runtime)` runs beside the flow (an HTTP server over
    its stores); the scheduled audit runs when `verify.every_s` is set, scheduled snapshots
    when `snapshot.every` is."""
    chosen = with_folders(settings or load_settings(data_dir), paths)

    @contextmanager
    def beside(rt: Runtime) -> Iterator[None]:
        with ExitStack() as scope:
            if chosen.verify.every_s > 0:
                scope.enter_context(scheduled_verify(rt, chosen))
            if chosen.snapshot.every > 0:
                scope.enter_context(snapshots.scheduled(rt, chosen))
            if alongside is not None:
                scope.enter_context(alongside(rt))
            yield

    return run_sync(
        chosen,
        watch=True,
        workers=workers,
        allow_mass_delete=allow_mass_delete,
        on_outcome=on_outcome,
        alongside=beside,
    )


def watch_serving(
    paths: Sequence[str | Path],
    serve_beside: ServeBeside,
    *,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
    allow_mass_delete: bool = False,
    on_outcome: OutcomeHandler | None = None,
    workers: int = 1,
) -> SyncReport:
    """`watch`, with `serve_beside(runtime, feed)` answering queries from the flow's own
    stores (one process owns an embedded data dir); every outcome is published to `feed`
    (the console's Live page) before `on_outcome` sees it."""
    feed = OutcomeFeed()

    def published(outcome: DocOutcome) -> None:
        feed.publish(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    return watch(
        paths,
        settings=settings,
        data_dir=data_dir,
        allow_mass_delete=allow_mass_delete,
        on_outcome=published,
        alongside=lambda rt: serve_beside(rt, feed),
        workers=workers,
    )


def status(*, settings: Settings | None = None, data_dir: str | Path | None = None) -> StatusReport:
    """Counts and versions straight from the stores; loads no model."""
    s = settings or load_settings(data_dir)
    with open_live(s) as live:
        if live is None:
            return status_report(s, None, None)
        return status_report(s, (live[0], live[1]), live[2])


def gc(
    *,
    retention_s: float | None = None,
    settings: Settings | None = None,
    data_dir: str | Path | None = None,
) -> dict[str, int]:
    """Hard-delete tombstones older than the retention window in both stores."""
    s = settings or load_settings(data_dir)
    cutoff = time.time() - (s.sync.gc_retention_s if retention_s is None else retention_s)
    purged = {"vectors": 0, "lexical": 0}
    with live_vectors(s) as live:
        if live is not None:
            purged["vectors"] = live[1].gc(cutoff)
    if s.lexical != "sparse":  # the sparse leg's vectors go with their points
        with closing(open_lexical_index(s.lexical, s.lexical_dir)) as lexical:
            purged["lexical"] = lexical.gc(cutoff)
            lexical.commit()
    return purged


def optimize(
    *, settings: Settings | None = None, data_dir: str | Path | None = None
) -> dict[str, Any]:
    """Build the live collection's HNSW graph (embedded Qdrant Edge; a server optimizes by
    itself): minutes per 100k chunks, run while nothing serves the data dir. Searches then
    walk the graph instead of scanning every point, which a broad metadata filter needs at
    scale (docs/guide/filters.md)."""
    s = settings or load_settings(data_dir)
    with live_vectors(s) as live:
        if live is None:
            raise no_index(s)
        collection, vectors = live[0], live[1]
        started = time.monotonic()
        vectors.optimize()
        points = vectors.count("live")
    return {
        "collection": collection,
        "live_points": points,
        "seconds": round(time.monotonic() - started, 1),
    }


def rebuild_lexical(*, settings: Settings | None = None, data_dir: str | Path | None = None) -> int:
    """Rebuild the lexical index from the live chunks the vector store holds (the truth).

    For a lost or corrupted lexical dir, or after a change to what BM25 indexes. Tombstones
    are not carried over (they are invisible to search anyway). Returns chunks indexed.
    """
    s = settings or load_settings(data_dir)
    if s.lexical == "sparse":
        raise InvalidRequestError(
            "store.lexical_backend = 'sparse': the BM25 leg is part of the vector store's points, "
            "there is no separate index to rebuild"
        )
    with live_vectors(s) as live:
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
