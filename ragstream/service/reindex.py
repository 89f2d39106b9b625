"""Blue/green reindex commands for a local index and the HTTP admin routes.

`Maintainer` runs them against the stores a process already has open (`IndexSides`): the
`watch` or `serve` process that owns an embedded data dir, or a local index. Callers reach
it through `service.connect`, which opens the data dir itself when it can and otherwise
forwards each command to the endpoint the owning process recorded, so one command works
whether or not a `watch --serve` is running. The commands' request models
(`StartOptions`, `PromoteOptions`, `CleanupOptions`) live in `core.models` beside
`ReindexStatus`, so the remote client checks them without importing this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragstream.connectors.protocols import LexicalIndex
from ragstream.connectors.state import ReindexBook
from ragstream.connectors.stores import configured_live, drop_collection
from ragstream.core.models import CleanupOptions as CleanupOptions
from ragstream.core.models import PromoteOptions as PromoteOptions
from ragstream.core.models import ReindexProgress, ReindexStatus, SideCounts
from ragstream.core.models import StartOptions as StartOptions
from ragstream.core.settings import Settings
from ragstream.core.telemetry import span
from ragstream.flows import reindex as steps
from ragstream.flows.sides import IndexSides, Side
from ragstream.query.retrieve import FixedSide, Retriever

ProgressHandler = Callable[[ReindexProgress], None]


class Maintainer:
    """The reindex commands over one process's open sides.

    `kick` wakes the process's background backfill (in `watch`); without one, `start` only
    opens the new side and `run` (or `start --wait`) backfills in the caller's thread.
    """

    def __init__(
        self,
        sides: IndexSides,
        lexical: LexicalIndex,
        kick: Callable[[], None] | None = None,
    ) -> None:
        self.sides, self.lexical, self.kick = sides, lexical, kick

    @property
    def settings(self) -> Settings:
        return self.sides.settings

    def status(self, message: str = "") -> ReindexStatus:
        with self.sides.lock:
            live = self.sides.live
            sides = [live, *self.sides.others]
            counts = [
                SideCounts(
                    collection=s.collection,
                    embedder=s.embedder.version,
                    live=s.vectors.count("live"),
                    deleted=s.vectors.count("deleted"),
                    serving=s is live,
                )
                for s in sides
            ]
            record = self.sides.record
        lag = counts[0].live - counts[1].live if len(counts) > 1 else None
        return ReindexStatus(
            open=record is not None,
            embedder=live.embedder.version,
            collection=live.collection,
            record=record,
            sides=counts,
            lag=None if lag is None else max(lag, 0),
            message=message,
        )

    def start(
        self, embedder: str, *, wait: bool = False, on_progress: ProgressHandler | None = None
    ) -> ReindexStatus:
        steps.start(self.sides, embedder)
        if wait:
            return self.run(on_progress)
        if self.kick is not None:
            self.kick()
            return self.status("backfilling in the running process")
        return self.status("backfill not running: `reindex run` (or a `watch`) continues it")

    def run(self, on_progress: ProgressHandler | None = None) -> ReindexStatus:
        steps.backfill(
            self.sides, batch_size=self.settings.sync.embed_batch_size, on_progress=on_progress
        )
        return self.status("backfill complete")

    def promote(self, options: PromoteOptions | None = None) -> ReindexStatus:
        o = options or PromoteOptions()
        score = None
        if o.eval_dataset is not None:
            dataset = Path(o.eval_dataset)
            if not (dataset / "qrels" / f"{o.eval_split}.tsv").is_file():
                raise steps.ReindexError(f"no BEIR qrels/{o.eval_split}.tsv under {dataset}")

            def score(side: Side) -> float:
                return self._ndcg(side, dataset, o.eval_split, o.eval_limit_queries)

        margin = self.settings.reindex_eval_margin if o.eval_margin is None else o.eval_margin
        steps.promote(self.sides, eval_score=score, eval_margin=margin)
        return self.status("promoted: queries now use the new embedder")

    def _ndcg(self, side: Side, dataset: Path, split: str, limit: int | None) -> float:
        from ragstream.eval.beir import load_beir
        from ragstream.eval.evaluation import EvalConfig, run_eval

        _, queries, qrels = load_beir(dataset, split)
        judged = [q for q in queries if q in qrels][:limit]
        retriever = Retriever(FixedSide(side), self.lexical)
        with span("reindex.eval", collection=side.collection, queries=len(judged)):
            (row,) = run_eval(
                self.settings,
                {q: queries[q] for q in judged},
                qrels,
                [EvalConfig(name="hybrid-rrf")],
                retriever=retriever,
            )
        return row.ndcg_10

    def rollback(self) -> ReindexStatus:
        steps.rollback(self.sides)
        return self.status("rolled back: queries use the old embedder again")

    def cleanup(self, confirm: bool) -> ReindexStatus:
        if not confirm:
            raise steps.ReindexError("cleanup drops the retired side for good: confirm it")
        record = steps.finish(self.sides, self._drop, retire="old")
        return self.status(f"dropped {record.old.collection}")

    def abort(self) -> ReindexStatus:
        record = steps.finish(self.sides, self._drop, retire="new")
        return self.status(f"aborted; dropped {record.new.collection}")

    def _drop(self, collection: str) -> None:
        s = self.settings
        drop_collection(
            s.store.vector_backend,
            s.vectors_dir,
            s.store.index_name,
            collection,
            s.store.qdrant_url,
        )


def recorded_status(settings: Settings, message: str) -> ReindexStatus:
    """What can be said without opening the stores (they are held by another process)."""
    s = settings
    live = configured_live(s)
    record = ReindexBook(s.state_dir).load()
    return ReindexStatus(
        open=record is not None,
        embedder=live[1] if live else None,
        collection=live[0] if live else None,
        record=record,
        message=message,
    )
