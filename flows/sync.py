"""The sync dataflow: sources → read/parse → chunk/diff/embed/write → outcomes.

    ragstream sync PATH... [--workers N]     # catch up once
    ragstream watch PATH... [--workers N]    # catch up, then follow changes (recovery on)
    python -m bytewax.run ragstream.flows.sync:flow [-w N]   # watch, from settings
    python -m bytewax.run "ragstream.flows.sync:get_flow(watch=False)" -i I -a "h:p0;h:p1"

The shape, for any number of bytewax workers (threads) and processes:

    sources ─► key: bucket(doc_id) ─► parse ───────────────────► index ──► outcomes
    1 partition on the store         stateful_batch: every       FixedPartitionedSink,
    owner: watchers + catch-up       worker reads (through the   1 partition on the store
    scan (connectors/sources.py)     source) and parses its      owner: the single writer
                                     buckets (docling)

Why: an embedded data dir (Qdrant Edge, tantivy) can be opened by one process only, and the
catch-up scan needs the stores' fingerprints. So the source and the writer are single
partitions listed only by the process that holds the data dir's ingest lock (`StoreOwner`);
bytewax assigns each to a worker of that process, and no other process ever opens a store.
Keying the parse step by (a bucket of) the doc_id keeps each document's events in order end
to end (one source worker → one parse worker per doc → one writer; bytewax channels are
FIFO), which a plain `redistribute` would not.

Here: the store owner and its ingest lock, the bytewax adapters of the two steps, the flow,
recovery, and `run_sync` (one pass or a watch, with its totals). The steps themselves (parse;
chunk, diff, embed, write) live in `flows.indexer` and are testable without bytewax.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack, closing, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.errors import BytewaxRuntimeError
from bytewax.operators import StatefulBatchLogic
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.run import cli_main

from ragstream.connectors.fields import FieldCatalog
from ragstream.connectors.protocols import STALE_FINGERPRINT
from ragstream.connectors.source_input import (
    KnownDocs,
    KnownStamps,
    PendingRetries,
    ScanHandler,
    ScanSummary,
    SourceFeed,
    SourceFeedConfig,
)
from ragstream.connectors.sources import configured, path_filter_of, sources_of
from ragstream.connectors.vector_stores import StoreBusyError
from ragstream.core.errors import InvalidRequestError, RagstreamError
from ragstream.core.memory import release_free_heap
from ragstream.core.models import DocOutcome, FileEvent, SyncReport
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure
from ragstream.flows.indexer import DocReader, Indexer, ParsedWork
from ragstream.flows.reindex import BackgroundBackfill
from ragstream.flows.runtime import (
    Runtime,
    chunker_for,
    ocr_cache,
    ocr_options,
    open_runtime,
    parser_keys_of,
)
from ragstream.operators.remote_embed import EndpointHealth

OutcomeHandler = Callable[[DocOutcome], None]

# bytewax epoch = snapshot interval. Snapshots are a few bytes (every partition snapshots
# None: the stores are the truth), so the interval only bounds how much bookkeeping a resume
# replays; `BYTEWAX_SNAPSHOT_INTERVAL` (seconds, what `python -m bytewax.run -s` reads)
# overrides it.
DEFAULT_SNAPSHOT_INTERVAL = timedelta(seconds=10)
RECOVERY_PARTITIONS = 1  # one writer, one tiny state stream: more partitions buy nothing
# The parse step is keyed by a stable bucket of the doc_id, not the doc_id itself: a doc's
# events still share one key (order kept), bytewax still spreads keys over workers, and the
# recovery DB keeps at most one (empty) row per bucket instead of one per document ever seen.
PARSE_BUCKETS = 256
# After a write batch that embedded or copied at least this many chunks (one encode
# mini-batch), the writer hands the C heap's free pages back to the OS (`release_free_heap`):
# encode activations leave the heap fragmented, and without this the resident set grows with
# every batch. Smaller batches (a watched edit) skip it: their garbage is small and the trim
# would only add milliseconds to their freshness.
TRIM_MIN_CHUNKS = 64


class StoreOwner:
    """The one process of a bytewax cluster that owns the data dir, and its runtime.

    Ownership is an exclusive `flock` on `<state_dir>/ingest.lock`, tried once per process
    (the kernel drops it when the process dies, so it never goes stale). Only the owner lists
    the source and writer partitions, and the runtime (stores, embedder) is opened lazily, on
    first use, by the owner only: a `-p` process that does not own the dir just parses.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._mutex = threading.Lock()
        self._scope = ExitStack()
        self._owns: bool | None = None
        self._rt: Runtime | None = None

    @property
    def lock_path(self) -> Path:
        return self.settings.state_dir / "ingest.lock"

    def owns(self) -> bool:
        with self._mutex:
            if self._owns is None:
                self._owns = self._claim()
            return self._owns

    def _claim(self) -> bool:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._scope.callback(os.close, fd)  # closing the fd releases the lock
        return True

    def holder(self) -> str:
        """The pid recorded by the process holding the lock (for error messages)."""
        try:
            return self.lock_path.read_text().strip() or "?"
        except OSError:
            return "?"

    def runtime(self) -> Runtime:
        """The owner's runtime, opened on first use (thread-safe: every worker shares it)."""
        with self._mutex:
            if self._rt is None:
                if not self._owns:
                    raise StoreBusyError(
                        f"{self.settings.data_dir} is synced by another process "
                        f"(pid {self.holder()}, {self.lock_path}); this one may only parse"
                    )
                self._rt = self._scope.enter_context(open_runtime(self.settings))
            return self._rt

    def close(self) -> None:
        """Close the runtime (under its lock: a worker may still be finishing a batch), then
        release the ingest lock."""
        with self._mutex:
            rt, self._rt, self._owns = self._rt, None, None
        with rt.lock if rt is not None else nullcontext():
            self._scope.close()


def make_indexer(rt: Runtime) -> Indexer:
    s = rt.settings
    return Indexer(
        sides=rt.sides,
        lexical=rt.lexical,
        dead_letters=rt.dead_letters,
        redactions=rt.redactions,
        chunker=lambda embedder: chunker_for(s, embedder),
        tenants={src.name: src.tenant for src in s.sources},
        max_file_bytes=s.sync.max_file_bytes,
        parse_timeout_s=s.sync.parse_timeout_s,
        batch_size=s.sync.embed_batch_size,
        lock=rt.lock.writers,
        gate=rt.lock.gate,
        situate=rt.situate,
        ocr=ocr_options(s),
        ocr_cache=ocr_cache(s),
        mirrored=s.mirrored(),
        sources=configured(s),
        fields=FieldCatalog(s.state_dir, s.parse.metadata_timezone),
    )


def known_stamps(rt: Runtime) -> KnownStamps:
    """The permission stamps the index holds per doc (what the catch-up scan compares)."""
    with rt.lock:
        return rt.vectors.live_doc_readers()


def known_docs(rt: Runtime, force: frozenset[str] = frozenset()) -> KnownDocs:
    """What the index holds per doc (file fingerprints), dead-lettered files included.

    A doc in `force` (`verify --repair`: its legs disagree, a point is retagged or copied)
    is known under a fingerprint no file has, so the scan re-reads it like a changed file."""
    with rt.lock:  # the writer, a backfill or a served query may be on another thread
        # a doc cut by another chunker config, or parsed under other OCR settings (settings
        # changed), is re-read: re-cut, or re-parsed (its unchanged chunks are kept)
        parser = parser_keys_of(rt.settings)
        known = dict(rt.vectors.live_doc_fingerprints(rt.chunker.key, parser))
        for did, fps in rt.dead_letters.fingerprints(parser).items():
            known.setdefault(did, fps)
        for did in force & known.keys():
            known[did] = {STALE_FINGERPRINT}
    return known


class _ParseLogic(StatefulBatchLogic[FileEvent, ParsedWork, None]):
    """Parses the events of one parse bucket on whichever worker bytewax routes it to.
    Discarded after every batch: it holds no state (its snapshot is an empty row)."""

    def __init__(self, reader: DocReader) -> None:
        self._reader = reader

    def on_batch(self, values: list[FileEvent]) -> tuple[Iterable[ParsedWork], bool]:
        return self._reader.parse_batch(values), StatefulBatchLogic.DISCARD

    def snapshot(self) -> None:
        return None


class _IndexPartition(StatefulSinkPartition[ParsedWork, None]):
    def __init__(self, rt: Runtime, handler: OutcomeHandler) -> None:
        self._rt, self._indexer, self._handler = rt, make_indexer(rt), handler

    def write_batch(self, values: list[ParsedWork]) -> None:
        outcomes = self._indexer.index_batch(values)
        if sum(o.chunks_embedded + o.chunks_reused for o in outcomes) >= TRIM_MIN_CHUNKS:
            release_free_heap()  # the batch's garbage is gone before anyone looks
        for outcome in outcomes:
            self._handler(outcome)

    def snapshot(self) -> None:
        return None  # the stores are the truth; delivery is at-least-once, writes idempotent

    def close(self) -> None:
        """bytewax closes a sink partition only when the input ended: a finished pass."""
        self._rt.sync_state.mark(time.time())


class IndexSink(FixedPartitionedSink[ParsedWork, None]):
    """The single writer (chunk → diff → embed → write): one partition, listed only by the
    store owner, so every parsed document of every worker and process is written there."""

    PART = "index"

    def __init__(self, owner: StoreOwner, handler: OutcomeHandler) -> None:
        self._owner, self._handler = owner, handler

    def list_parts(self) -> list[str]:
        return [self.PART] if self._owner.owns() else []

    def part_fn(self, item_key: str) -> int:
        return 0

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _IndexPartition:
        return _IndexPartition(self._owner.runtime(), self._handler)


def sync_partition(s: Settings) -> tuple[int, int]:
    """(index, count) of this sync replica's share of the documents, checked: a partitioned
    ingest needs one store that every replica writes and every query reads, for both legs
    (a Qdrant server with the sparse BM25 leg); embedded stores have one owner."""
    index, count = s.sync.partition_index, s.sync.partition_count
    if index >= count:
        raise InvalidRequestError(f"sync partition {index} of {count}: the index must be < count")
    if count > 1 and (s.store.vector_backend != "qdrant" or s.lexical != "sparse"):
        raise InvalidRequestError(
            f"sync partitions ({count}) need one shared store for both legs: store.vector_backend "
            f"'qdrant' with a server URL and the sparse BM25 leg (this data dir: "
            f"{s.store.vector_backend} + {s.lexical}); the embedded stores have a single owner"
        )
    return index, count


def build_flow(
    owner: StoreOwner,
    *,
    watch: bool,
    on_outcome: OutcomeHandler,
    on_scan: ScanHandler = lambda summary: None,
    allow_mass_delete: bool = False,
    force: frozenset[str] = frozenset(),
) -> tuple[Dataflow, SourceFeed]:
    """The dataflow and its input (whose `close` stops the watchers on an abrupt stop).
    Opens nothing: the owner's runtime opens when bytewax builds the owner's partitions."""
    s = owner.settings
    retries = PendingRetries() if watch else None
    cfg = SourceFeedConfig(
        sources=tuple(sources_of(s)),
        path_filter=path_filter_of(s),
        watch=watch,
        debounce_s=s.sync.debounce_ms / 1000,
        settle_s=s.sync.settle_ms / 1000,
        batch_size=s.sync.ingest_batch_docs,
        max_delete_fraction=s.sync.mass_delete_fraction,
        min_docs_for_guard=s.sync.mass_delete_min_docs,
        allow_mass_delete=allow_mass_delete,
        partition=sync_partition(s),
        retries=retries,
    )
    stamps = (lambda: known_stamps(owner.runtime())) if s.mirrored() else None
    source = SourceFeed(
        cfg, lambda: known_docs(owner.runtime(), force), on_scan, owns=owner.owns, stamps=stamps
    )
    reader = DocReader(
        s.sync.max_file_bytes, s.sync.parse_timeout_s, ocr_options(s), ocr_cache(s), configured(s)
    )
    flow = Dataflow("ragstream_sync")
    events = op.input("folders", flow, source)
    by_doc = op.key_on("by_doc", events, parse_key)
    parsed = op.stateful_batch("parse", by_doc, lambda resume: _ParseLogic(reader))
    op.output("index", parsed, IndexSink(owner, _retrying(on_outcome, retries)))
    return flow, source


def _retrying(on_outcome: OutcomeHandler, retries: PendingRetries | None) -> OutcomeHandler:
    """`on_outcome`, first handing a pending document back to the watching source."""
    if retries is None:
        return on_outcome

    def handle(outcome: DocOutcome) -> None:
        if outcome.pending:
            retries.add(outcome.doc_id)
        else:
            retries.done(outcome.doc_id)
        on_outcome(outcome)

    return handle


def parse_key(event: FileEvent) -> str:
    """The doc's parse bucket: the same in every process (crc32, never the salted `hash`)."""
    return f"{zlib.crc32(event.doc_id.encode()) % PARSE_BUCKETS:03d}"


def snapshot_interval() -> timedelta:
    raw = os.environ.get("BYTEWAX_SNAPSHOT_INTERVAL")
    return timedelta(seconds=float(raw)) if raw else DEFAULT_SNAPSHOT_INTERVAL


def recovery_config(settings: Settings) -> RecoveryConfig:
    """bytewax recovery under `<data_dir>/recovery/` (`part-0.sqlite3`), created on first use
    like `python -m bytewax.recovery D/recovery 1`. Deleting it loses nothing: the catch-up
    scan re-derives all pending work from the stores."""
    db = settings.data_dir / "recovery"
    if not any(db.glob("part-*.sqlite3")):
        db.mkdir(parents=True, exist_ok=True)
        init_db_dir(db, RECOVERY_PARTITIONS)
    # backup_interval 0: a snapshot is garbage-collected as soon as a newer one is committed
    # (nobody copies recovery partitions off this machine)
    return RecoveryConfig(db, backup_interval=timedelta(0))


def execute(flow: Dataflow, *, workers: int = 1, recovery: RecoveryConfig | None = None) -> None:
    """Run the flow here with `workers` bytewax worker threads (what `bytewax.run -w` does).

    Ctrl-C always surfaces as KeyboardInterrupt: with one worker bytewax runs Python code on
    this thread and wraps the interrupt in a BytewaxRuntimeError.
    """
    try:
        cli_main(
            flow,
            workers_per_process=workers,
            epoch_interval=snapshot_interval(),
            recovery_config=recovery,
        )
    except BytewaxRuntimeError as err:
        cause: BaseException | None = err
        while cause is not None:
            if isinstance(cause, KeyboardInterrupt):
                raise KeyboardInterrupt from err
            if isinstance(cause, RagstreamError):  # a user error, as raised: one line for it
                raise cause.with_traceback(cause.__traceback__) from None
            cause = cause.__cause__
        raise


def run_sync(
    settings: Settings,
    *,
    watch: bool = False,
    workers: int = 1,
    recovery: bool | None = None,
    allow_mass_delete: bool = False,
    on_outcome: OutcomeHandler | None = None,
    on_scan: ScanHandler | None = None,
    force: frozenset[str] = frozenset(),
    alongside: Callable[[Runtime], AbstractContextManager[object]] | None = None,
) -> SyncReport:
    """Run the flow in this process (`workers` bytewax threads) and return the pass's totals.

    `recovery` (default: on for `watch`) keeps bytewax recovery under `<data_dir>/recovery/`.
    `force` names docs the catch-up scan re-reads even though their fingerprints match
    (`verify --repair`). `alongside` is entered with the open runtime for as long as the
    flow runs: the face uses it to serve queries from the same stores (`watch --serve`),
    since one process owns an embedded data dir.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    tally = _Tally(SyncReport(), on_outcome, on_scan)
    report = tally.report
    started = time.time()
    with ExitStack() as scope:
        owner = _claimed_owner(scope, settings)
        flow, source = build_flow(
            owner,
            watch=watch,
            on_outcome=tally.outcome,
            on_scan=tally.scanned,
            allow_mass_delete=allow_mass_delete,
            force=force,
        )
        scope.callback(source.close)
        source.start_listing()  # a store's listing overlaps the stores opening
        rt = owner.runtime()
        endpoints = _endpoints(rt)
        tokens_before = sum(h.tokens_sent for h in endpoints)
        if watch:  # a long-running process finishes (or repairs) an open reindex's backfill
            rt.backfill = scope.enter_context(
                BackgroundBackfill(rt.sides, settings.sync.embed_batch_size)
            )
        scope.enter_context((alongside or _nothing)(rt))
        use_recovery = watch if recovery is None else recovery
        try:
            execute(
                flow, workers=workers, recovery=recovery_config(settings) if use_recovery else None
            )
        finally:  # a failed pass (e.g. a store outage) keeps its own error: no store call here
            report.seconds = round(time.time() - started, 3)
        report.chunks_live = rt.vectors.count("live")
        report.embed_tokens = sum(h.tokens_sent for h in endpoints) - tokens_before
    return report


def _endpoints(rt: Runtime) -> set[EndpointHealth]:
    """The remote embedding endpoints of every open side, each once (none for local models)."""
    sides = (rt.sides.live, *rt.sides.others)
    return {s.embedder.endpoint for s in sides if s.embedder.endpoint is not None}


class _Tally:
    """A pass's totals, added to by the writer and the source (maybe on different workers),
    each outcome and scan summary also handed to the caller's handler."""

    def __init__(
        self, report: SyncReport, on_outcome: OutcomeHandler | None, on_scan: ScanHandler | None
    ) -> None:
        self.report, self._on_outcome, self._on_scan = report, on_outcome, on_scan
        self._lock = threading.Lock()

    def outcome(self, outcome: DocOutcome) -> None:
        with self._lock:
            self.report.add(outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def scanned(self, summary: ScanSummary) -> None:
        with self._lock:
            self.report.docs_seen += summary.files_seen
            self.report.guard = summary.guard or self.report.guard
        if self._on_scan is not None:
            self._on_scan(summary)


def _claimed_owner(scope: ExitStack, settings: Settings) -> StoreOwner:
    """The store owner of this process, closed with `scope`; StoreBusyError when another
    process already syncs the data dir."""
    owner = scope.enter_context(closing(StoreOwner(settings)))
    if not owner.owns():
        raise StoreBusyError(
            f"{settings.data_dir} is already synced by another process (pid "
            f"{owner.holder()}, {owner.lock_path}); stop it first"
        )
    return owner


def _nothing(rt: Runtime) -> AbstractContextManager[object]:
    return nullcontext()


def _print_outcome(outcome: DocOutcome) -> None:
    print(outcome.model_dump_json(), flush=True)


def get_flow(watch: bool = True) -> Dataflow:
    """The flow for `python -m bytewax.run` (any `-w`, `-i/-a`): sources from settings, one
    JSON outcome per line on the owner's stdout.

    Each process of a cluster builds this; the one that wins the ingest lock owns the stores
    (opened lazily, closed at exit) and the others only parse. Recovery is bytewax.run's own
    `-r D/recovery -s SECONDS -b 0` (init once: `python -m bytewax.recovery D/recovery 1`).
    """
    settings = Settings()
    configure(
        settings.telemetry.exporter, settings.telemetry.otlp_endpoint
    )  # parse spans everywhere
    owner = StoreOwner(settings)
    flow, source = build_flow(owner, watch=watch, on_outcome=_print_outcome)
    atexit.register(owner.close)
    atexit.register(source.close)  # atexit is LIFO: watchers stop before the stores close
    if not owner.owns():
        print(
            f"ragstream: {settings.data_dir} is owned by pid {owner.holder()}; "
            f"process {os.getpid()} parses only",
            file=sys.stderr,
            flush=True,
        )
    return flow


def __getattr__(name: str) -> Any:
    """`ragstream.flows.sync:flow` for `python -m bytewax.run`: a watching flow built from settings.

    Built lazily so importing this module stays cheap.
    """
    if name != "flow":
        raise AttributeError(name)
    return get_flow(watch=True)
