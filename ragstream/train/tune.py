"""`ragstream tune`: train a reranker for this index's corpus, offline, from its own
retrieval, with the one cross-encoder trainer the support judge uses.

1. Index the BEIR dataset's corpus into the data dir (incremental: an indexed corpus embeds
   nothing), and read the split's queries and qrels. Only that split: `tune` never opens
   another one (the test split stays unseen).
2. Mine: each query runs through the index's own hybrid retrieval; the chunks of its judged
   documents among the top candidates are positives, the best-ranked chunks of other
   documents are the hard negatives (what the reranker must learn to push down).
3. Hold out a seeded tenth of the queries; train on the rest (binary cross-entropy, the
   installed MiniLM as the starting point, `train.crossencoder`), keep the epoch whose
   held-out MRR@10 over the reranked candidates is best.
Label-free (`--self-supervised`, no queries or qrels read): the inverse cloze task over the
index's own chunks. A sentence of a sampled chunk is the query; that chunk with the sentence
taken out is its positive; the hybrid candidates of other documents are the negatives.

4. Export int8 ONNX into `<data_dir>/models/reranker-<version>/` with `reranker.json`; it is
   switched on by `query.reranker = <that dir>` and compared by `ragstream eval` (rows
   `+rerank(tuned)`). Nothing changes until a person switches it on.
"""

from __future__ import annotations

import itertools
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xxhash
from pydantic import BaseModel

from ragstream.core.settings import Settings
from ragstream.eval.beir import Qrels, Queries, doc_key, index_corpus, load_beir, load_corpus
from ragstream.eval.opened import opened
from ragstream.operators.chunk import embedding_text, split_sentences
from ragstream.query.rerank import RERANKER_META, OnnxReranker, blend
from ragstream.train.crossencoder import TrainConfig, export_onnx, train_cross_encoder

What = Literal["reranker", "embedder", "both"]
PRIOR_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # candidates for the blend with the fused rank
DEPTHS = (10, 20, 50)  # candidates for how many fused chunks it re-scores (cost grows with it)
SELF_SUPERVISED_QUERIES = 800  # about SciFact's train split: the same training budget
# Label-free runs cannot choose the blend: an inverse-cloze positive has no fused rank of its
# own (the index finds the chunk holding the sentence verbatim first), so held-out groups
# would always pick the fused order. They take the blend the supervised SciFact run chose.
SELF_SUPERVISED_BLEND = {"rerank_depth": 10, "prior_weight": 2.0}
RERANKER_CONFIG = TrainConfig(
    keep_layers=(0, 2, 4), labels=1, max_length=160, batch_size=16, epochs=2, learning_rate=7e-5
)
# `tune --reranker-size`: base is the default; small keeps 2 of MiniLM's 6 layers and reads
# 128 tokens, for CPUs where base re-scoring 50 candidates is over budget: faster, for less
# of base's gain (figures: docs/notes/tuning-scifact.md).
RERANKER_SIZES = {
    "base": RERANKER_CONFIG,
    "small": replace(RERANKER_CONFIG, keep_layers=(0, 3), max_length=128),
}


@dataclass(frozen=True)
class MineConfig:
    depth: int = 50  # fused candidates per query: what the reranker re-scores at query time
    positives: int = 2  # best-ranked chunks of judged documents per query
    negatives: int = 7  # best-ranked chunks of other documents per query (hard negatives)
    held_share: float = 0.1  # queries held out for early stopping
    seed: int = 13


@dataclass(frozen=True)
class Group:
    """One query's candidates in fused order: (reranker text, doc key, judged relevant)."""

    qid: str
    query: str
    candidates: list[tuple[str, str, bool]]
    # the candidates' content hashes, in the same order, when they are index chunks as
    # stored (their vectors can be read back instead of encoded again); empty otherwise
    hashes: tuple[str, ...] = ()


class TuneReport(BaseModel):
    """What `ragstream tune --json` prints (and writes as the model's `reranker.json`)."""

    what: str
    self_supervised: bool = False
    dataset: str
    split: str
    version: str
    model_dir: str
    queries: int
    fit_queries: int
    held_queries: int
    fit_pairs: int
    held_mrr10_fused: float  # held-out queries: MRR@10 of the index's fused order
    held_mrr10_reranker: float  # the same candidates ordered by the tuned model alone (ONNX)
    prior_weight: float  # the blend with the fused rank chosen on them (query.rerank.blend)
    rerank_depth: int  # and how many fused candidates it re-scores, chosen with it
    held_mrr10_tuned: float  # ordered as the product will: the model blended (prior_weight)
    mine_seconds: float
    train_seconds: float
    max_length: int
    tuned: bool = True
    config: dict[str, Any]
    switch_on: str  # the setting that turns it on


def mine_groups(
    settings: Settings, queries: Queries, qrels: Qrels, depth: int, on_step: Steps | None = None
) -> list[Group]:
    """Each judged query's top `depth` fused candidates, labelled by the qrels."""
    groups = []
    with opened(settings) as engine:
        retriever = engine.retriever
        for done, (qid, text) in enumerate(queries.items(), 1):
            if on_step is not None:
                on_step(done, len(queries))
            relevant = {d for d, rel in qrels.get(qid, {}).items() if rel > 0}
            if not relevant:
                continue
            found = retriever.retrieve(text, n=depth).candidates[:depth]
            cands = [
                (
                    embedding_text(c.chunk.context, c.chunk.text),
                    doc_key(c.chunk.doc_id),
                    doc_key(c.chunk.doc_id) in relevant,
                )
                for c in found
            ]
            groups.append(Group(qid, text, cands, tuple(c.chunk.content_hash for c in found)))
    return groups


def cloze_groups(
    settings: Settings, n: int, depth: int, seed: int, on_step: Steps | None = None
) -> list[Group]:
    """Up to `n` inverse-cloze queries from a seeded sample of the index's live chunks: a
    sentence of 8-40 words is the query, its chunk without it the one positive, candidates
    of the same document left out (their relevance is unknown)."""
    groups: list[Group] = []
    with opened(settings) as engine:
        retriever = engine.retriever
        chunks = sorted(
            (c for page in retriever.vectors.live_pages() for c in page), key=lambda c: c.point_id
        )
        rng = random.Random(seed)
        rng.shuffle(chunks)
        for chunk in chunks:
            if len(groups) >= n:
                break
            sentences = split_sentences(chunk.text)
            fit = [s for s in sentences if 8 <= len(s.split()) <= 40]
            if len(sentences) < 2 or not fit:
                continue
            query = rng.choice(fit)
            rest = " ".join(s for s in sentences if s != query)
            positive = (embedding_text(chunk.context, rest), chunk.doc_id, True)
            cands = [positive]
            for c in retriever.retrieve(query, n=depth).candidates[:depth]:
                if c.chunk.doc_id != chunk.doc_id:
                    cands.append(
                        (embedding_text(c.chunk.context, c.chunk.text), c.chunk.doc_id, False)
                    )
            # the positive where the index ranked its chunk (first when the sentence found it)
            groups.append(Group(chunk.point_id, query, cands))
            if on_step is not None:
                on_step(len(groups), n)
    return groups


def training_pairs(groups: Sequence[Group], mine: MineConfig) -> list[tuple[str, str, float]]:
    """Positives (judged chunks, best-ranked first) and hard negatives per query; a query
    whose judged documents were not retrieved teaches nothing about ranking: skipped."""
    pairs = []
    for g in groups:
        pos = [t for t, _, rel in g.candidates if rel][: mine.positives]
        if not pos:
            continue
        neg = [t for t, _, rel in g.candidates if not rel][: mine.negatives]
        pairs += [(g.query, t, 1.0) for t in pos] + [(g.query, t, 0.0) for t in neg]
    return pairs


def mrr10(groups: Sequence[Group], scores: Sequence[Sequence[float]] | None = None) -> float:
    """Document-level MRR@10 over the groups, in fused order or ordered by `scores`."""
    total = 0.0
    for i, g in enumerate(groups):
        order = list(range(len(g.candidates)))
        if scores is not None:
            order = sorted(order, key=lambda j: (-scores[i][j], j))
        docs: list[str] = []
        for j in order:
            _, doc, rel = g.candidates[j]
            if doc in docs:
                continue
            docs.append(doc)
            if rel:
                total += 1.0 / len(docs) if len(docs) <= 10 else 0.0
                break
            if len(docs) >= 10:
                break
    return total / max(1, len(groups))


def head_order(scores: Sequence[float], depth: int, weight: float) -> list[float]:
    """Ordering keys as the product ranks: the first `depth` candidates by the blend, then
    the rest in fused order below them."""
    head = blend(scores[:depth], weight)
    floor = min(head, default=0.0)
    return head + [floor - 1.0 - i for i in range(len(scores) - len(head))]


def choose_blend(held: Sequence[Group], reranker: OnnxReranker) -> dict[str, Any]:
    """The depth and blend weight with the best held-out MRR@10 (the cheapest, then the
    smallest weight on a tie), with the figures of the model alone and blended."""
    raw = [reranker.score(g.query, [t for t, _, _ in g.candidates]) for g in held]
    grid = [(d, w) for d in DEPTHS for w in PRIOR_WEIGHTS]
    figures = {(d, w): mrr10(held, [head_order(s, d, w) for s in raw]) for d, w in grid}
    depth, weight = max(grid, key=lambda dw: (figures[dw], -dw[0], -dw[1]))
    return {
        "rerank_depth": depth,
        "prior_weight": weight,
        "held_mrr10_reranker": round(figures[(max(DEPTHS), 0.0)], 4),
        "held_mrr10_tuned": round(figures[(depth, weight)], 4),
    }


def _split(groups: list[Group], share: float, seed: int) -> tuple[list[Group], list[Group]]:
    order = sorted(groups, key=lambda g: g.qid)
    random.Random(seed).shuffle(order)
    cut = max(1, round(len(order) * share))
    return order[cut:], order[:cut]


def _held_scorer(held: Sequence[Group]) -> Callable[[Any, Sequence[Any]], float]:
    """The trainer's early-stopping figure: held-out MRR@10 after reranking by the logits."""
    sizes = [len(g.candidates) for g in held]

    def score(logits: Any, _pairs: Sequence[Any]) -> float:
        flat = np.asarray(logits)[:, 0]
        cut = np.cumsum([0, *sizes])
        return mrr10(held, [flat[a:b].tolist() for a, b in itertools.pairwise(cut)])

    return score


@dataclass(frozen=True)
class Mined:
    """What every tuned model learns from: the queries' candidates from this index."""

    groups: list[Group]
    split: str  # the split read ("none (self-supervised)" when no queries were)
    dataset: str
    seconds: float
    settings: Settings  # the data dir's, as the index was read
    self_supervised: bool = False


Steps = Callable[[int, int], None]  # (done, total): a progress bar


def mine_index(
    dataset_dir: Path,
    data_dir: Path,
    split: str,
    config: MineConfig,
    *,
    limit_queries: int | None = None,
    self_supervised: bool = False,
    on_step: Steps | None = None,
) -> Mined:
    """Index the dataset's corpus (incrementally) and mine its queries' hybrid candidates
    (or make inverse-cloze queries from the index's chunks when `self_supervised`)."""
    started = time.perf_counter()
    if self_supervised:
        settings = index_corpus(load_corpus(dataset_dir), data_dir)
        n = limit_queries or SELF_SUPERVISED_QUERIES
        groups = cloze_groups(settings, n, config.depth, config.seed, on_step=on_step)
        split = "none (self-supervised)"
    else:
        corpus, queries, qrels = load_beir(dataset_dir, split)
        judged = [q for q in queries if q in qrels][:limit_queries]
        settings = index_corpus(corpus, data_dir)
        wanted = {q: queries[q] for q in judged}
        groups = mine_groups(settings, wanted, qrels, config.depth, on_step=on_step)
    seconds = time.perf_counter() - started
    return Mined(groups, split, Path(dataset_dir).name, seconds, settings, self_supervised)


def tune_reranker(
    dataset_dir: Path,
    data_dir: Path,
    split: str = "train",
    *,
    mine: MineConfig | None = None,
    config: TrainConfig = RERANKER_CONFIG,
    limit_queries: int | None = None,
    self_supervised: bool = False,
    mined: Mined | None = None,
    progress: Callable[[str], None] = print,
    on_step: Callable[[str], Steps | None] = lambda _phase: None,
) -> TuneReport:
    """Mine (or make label-free queries; or take `mined`), train, export; see the module
    docstring. `on_step(phase)` gives the progress bar of a phase ("mine", "reranker")."""
    mine = mine or MineConfig(seed=config.seed)
    if mined is None:
        mined = mine_index(
            dataset_dir, data_dir, split, mine, limit_queries=limit_queries,
            self_supervised=self_supervised, on_step=on_step("mine"),
        )  # fmt: skip
        progress(f"mined {len(mined.groups)} queries ({mined.seconds:.0f} s)")
    groups, split, mine_s = mined.groups, mined.split, mined.seconds
    self_supervised = mined.self_supervised
    fit_groups, held = _split(groups, mine.held_share, mine.seed)
    fit = training_pairs(fit_groups, mine)
    held_pairs = [(g.query, t, float(rel)) for g in held for t, _, rel in g.candidates]
    record, version, out = _train_and_export(
        fit, held_pairs, held, config, data_dir, progress, on_step("reranker")
    )
    report = TuneReport(
        what="reranker",
        self_supervised=self_supervised,
        dataset=mined.dataset,
        split=split,
        version=version,
        model_dir=str(out),
        queries=len(groups),
        fit_queries=len(fit_groups),
        held_queries=len(held),
        fit_pairs=len(fit),
        held_mrr10_fused=round(mrr10(held), 4),
        held_mrr10_reranker=0.0,
        prior_weight=0.0,
        rerank_depth=mine.depth,
        held_mrr10_tuned=0.0,
        mine_seconds=round(mine_s, 1),
        train_seconds=float(record["train_seconds"]),
        max_length=config.max_length,
        config={"train": asdict(config), "mine": asdict(mine), "history": record["history"]},
        switch_on=f"RAGSTREAM_QUERY__RERANKER={out}",
    )
    (out / RERANKER_META).write_text(report.model_dump_json(indent=2) + "\n")
    chosen = choose_blend(held, OnnxReranker(out))
    if self_supervised:  # the model alone is still measured; the blend is not chosen here
        chosen |= SELF_SUPERVISED_BLEND | {"held_mrr10_tuned": chosen["held_mrr10_reranker"]}
    report = report.model_copy(update=chosen)
    (out / RERANKER_META).write_text(report.model_dump_json(indent=2) + "\n")
    return report


def _train_and_export(
    fit: list[tuple[str, str, float]],
    held_pairs: list[tuple[str, str, float]],
    held: Sequence[Group],
    config: TrainConfig,
    data_dir: Path,
    progress: Callable[[str], None],
    on_step: Steps | None,
) -> tuple[dict[str, Any], str, Path]:
    """Train on `fit` (early stopping on the held-out groups' MRR@10), export int8 ONNX into
    `<data_dir>/models/<version>/` (replacing one of that version); (record, version, dir)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "model"
        record = train_cross_encoder(
            fit, held_pairs, config, work, score=_held_scorer(held), progress=progress,
            on_step=on_step,
        )  # fmt: skip
        staged = Path(tmp) / "onnx"
        onnx_path = export_onnx(work, staged / "model.onnx")
        version = "reranker-" + xxhash.xxh64(onnx_path.read_bytes()).hexdigest()[:12]
        out = data_dir / "models" / version
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, out)
    return record, version, out
