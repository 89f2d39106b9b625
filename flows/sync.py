"""The sync dataflow: folders → read/parse → chunk/diff/embed/write → outcomes.

    python -m bytewax.run flows.sync:flow      # watch forever, sources from settings
    ragstream sync PATH... / ragstream watch PATH...

The flow file only wires steps; the steps live in `flows.indexer` and are testable alone.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

from connectors.fs import (
    FolderSource,
    FolderSourceConfig,
    KnownDocs,
    PathFilter,
    ScanHandler,
    ScanSummary,
)
from core.models import DocOutcome, SyncReport
from core.settings import Settings
from flows.indexer import Indexer
from flows.reindex import BackgroundBackfill
from flows.runtime import Runtime, chunker_for, open_runtime

OutcomeHandler = Callable[[DocOutcome], None]
_PROCESS_SCOPE = ExitStack()  # keeps the runtime of `flows.sync:flow` open for the process


class _CallbackPartition(StatelessSinkPartition[DocOutcome]):
    def __init__(self, handler: OutcomeHandler) -> None:
        self._handler = handler

    def write_batch(self, items: list[DocOutcome]) -> None:
        for item in items:
            self._handler(item)


class OutcomeSink(DynamicSink[DocOutcome]):
    """Delivers per-document outcomes to a callback (report, progress bar, status)."""

    def __init__(self, handler: OutcomeHandler) -> None:
        self._handler = handler

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _CallbackPartition:
        return _CallbackPartition(self._handler)


def make_indexer(rt: Runtime) -> Indexer:
    s = rt.settings
    return Indexer(
        sides=rt.sides,
        lexical=rt.lexical,
        dead_letters=rt.dead_letters,
        redactions=rt.redactions,
        chunker=lambda embedder: chunker_for(s, embedder),
        tenants={src.name: src.tenant for src in s.sources},
        max_file_bytes=s.max_file_bytes,
        parse_timeout_s=s.parse_timeout_s,
        batch_size=s.embed_batch_size,
        lock=rt.lock,
    )


def known_docs(rt: Runtime) -> KnownDocs:
    """What the index holds per doc (file fingerprints), dead-lettered files included."""
    known = dict(rt.vectors.live_doc_fingerprints())
    for did, fps in rt.dead_letters.fingerprints().items():
        known.setdefault(did, fps)
    return known


def build_flow(
    rt: Runtime,
    *,
    watch: bool,
    on_outcome: OutcomeHandler,
    on_scan: ScanHandler = lambda summary: None,
    allow_mass_delete: bool = False,
) -> Dataflow:
    s = rt.settings
    indexer = make_indexer(rt)
    cfg = FolderSourceConfig(
        sources=tuple(s.sources),
        path_filter=PathFilter(tuple(s.include), tuple(s.exclude)),
        watch=watch,
        debounce_s=s.debounce_ms / 1000,
        batch_size=s.ingest_batch_docs,
        max_delete_fraction=s.mass_delete_fraction,
        min_docs_for_guard=s.mass_delete_min_docs,
        allow_mass_delete=allow_mass_delete,
    )
    flow = Dataflow("ragstream_sync")
    events = op.input("folders", flow, FolderSource(cfg, lambda: known_docs(rt), on_scan))
    parsed = op.flat_map_batch("parse", events, indexer.parse_batch)
    outcomes = op.flat_map_batch("index", parsed, indexer.index_batch)
    op.output("outcomes", outcomes, OutcomeSink(on_outcome))
    return flow


def run_sync(
    settings: Settings,
    *,
    watch: bool = False,
    allow_mass_delete: bool = False,
    on_outcome: OutcomeHandler | None = None,
    on_scan: ScanHandler | None = None,
    alongside: Callable[[Runtime], AbstractContextManager[object]] | None = None,
) -> SyncReport:
    """Run the flow in this process (one worker) and return the totals of the pass.

    `alongside` is entered with the open runtime for as long as the flow runs: the face
    uses it to serve queries from the same stores (`watch --serve`), since one process
    owns an embedded data dir.
    """
    report = SyncReport()
    started = time.time()

    def handle(outcome: DocOutcome) -> None:
        report.add(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    def scanned(summary: ScanSummary) -> None:
        report.docs_seen += summary.files_seen
        report.guard = summary.guard or report.guard
        if on_scan is not None:
            on_scan(summary)

    with ExitStack() as scope:
        rt = scope.enter_context(open_runtime(settings))
        if watch:  # a long-running process finishes (or repairs) an open reindex's backfill
            rt.backfill = scope.enter_context(
                BackgroundBackfill(rt.sides, settings.embed_batch_size)
            )
        scope.enter_context((alongside or _nothing)(rt))
        flow = build_flow(
            rt, watch=watch, on_outcome=handle, on_scan=scanned, allow_mass_delete=allow_mass_delete
        )
        try:
            run_main(flow)
        finally:  # a failed pass (e.g. a store outage) keeps its own error: no store call here
            report.seconds = round(time.time() - started, 3)
        rt.sync_state.mark(time.time())
        report.chunks_live = rt.vectors.count("live")
    return report


def _nothing(rt: Runtime) -> AbstractContextManager[object]:
    return nullcontext()


def __getattr__(name: str) -> Any:
    """`flows.sync:flow` for `python -m bytewax.run`: a watching flow built from settings.

    Built lazily so importing this module stays cheap; the runtime stays open for the
    life of the process (bytewax owns the loop and exits the process when it stops).
    """
    if name != "flow":
        raise AttributeError(name)
    settings = Settings()
    rt = _PROCESS_SCOPE.enter_context(open_runtime(settings))
    atexit.register(_PROCESS_SCOPE.close)
    return build_flow(rt, watch=True, on_outcome=lambda o: print(o.model_dump_json(), flush=True))
