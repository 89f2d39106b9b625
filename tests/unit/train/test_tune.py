"""`ragstream tune --what reranker`: the pure parts (pair mining, MRR@10, the
held-out split) as functions, and one real run on a small SciFact train slice: mined from the
index's own hybrid candidates, trained with the shared trainer, exported to int8 ONNX,
versioned by its bytes, loadable as `query.reranker`, reproducible from the same command, and
named `+rerank(tuned)` by `ragstream eval`. It never opens another split.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import xxhash

from ragstream.eval.beir import beir_subset, load_beir, write_beir
from ragstream.query.rerank import OnnxReranker, blend, is_tuned, load_reranker
from ragstream.train import tune as tune_module
from ragstream.train.tune import (
    RERANKER_CONFIG,
    Group,
    MineConfig,
    _split,
    head_order,
    mrr10,
    training_pairs,
    tune_reranker,
)


def group(qid: str, labels: str) -> Group:
    """Candidates d0, d1, ... in fused order; `labels` marks the relevant ones with 1."""
    return Group(qid, f"q{qid}", [(f"text {i}", f"d{i}", x == "1") for i, x in enumerate(labels)])


def test_mrr10_is_the_first_relevant_document_rank() -> None:
    groups = [group("a", "1000"), group("b", "0010"), group("c", "0000")]
    assert mrr10(groups) == pytest.approx((1 + 1 / 3 + 0) / 3)
    # reordered by scores: b's relevant third candidate first, a's relevant one second
    scores = [[0.1, 0.9, 0.0, 0.0], [0.0, 0.0, 5.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    assert mrr10(groups, scores) == pytest.approx((1 / 2 + 1 + 0) / 3)


def test_mrr10_counts_documents_not_chunks_and_stops_at_ten() -> None:
    same_doc = Group("a", "q", [("t0", "x", False), ("t1", "x", False), ("t2", "y", True)])
    assert mrr10([same_doc]) == pytest.approx(1 / 2)  # two chunks of x are one document
    deep = Group("b", "q", [(f"t{i}", f"d{i}", i == 10) for i in range(12)])
    assert mrr10([deep]) == 0.0  # the 11th document is past the cut


def test_training_pairs_take_the_best_ranked_positives_and_hard_negatives() -> None:
    mine = MineConfig(positives=1, negatives=2)
    pairs = training_pairs([group("a", "0101000"), group("b", "0000")], mine)
    # b has no retrieved positive: it teaches nothing about ranking and is skipped
    assert pairs == [("qa", "text 1", 1.0), ("qa", "text 0", 0.0), ("qa", "text 2", 0.0)]


def test_head_order_reranks_the_head_and_keeps_the_tail_in_fused_order_below() -> None:
    keys = head_order([0.0, 5.0, 1.0, 9.0, 8.0], depth=3, weight=0.0)
    order = sorted(range(5), key=lambda i: -keys[i])
    assert order == [1, 2, 0, 3, 4]  # the head by score; 3 and 4 stay below, fused order
    assert head_order([2.0, 1.0], depth=5, weight=0.0) == blend([2.0, 1.0], 0.0)


def test_the_held_out_split_is_seeded_disjoint_and_complete() -> None:
    groups = [group(str(i), "1") for i in range(50)]
    fit, held = _split(groups, 0.1, 13)
    assert len(held) == 5 and {g.qid for g in fit} | {g.qid for g in held} == {
        g.qid for g in groups
    }
    assert not {g.qid for g in fit} & {g.qid for g in held}
    assert [g.qid for g in _split(list(reversed(groups)), 0.1, 13)[1]] == [g.qid for g in held]


@pytest.mark.slow
def test_tune_trains_a_versioned_onnx_reranker_from_the_train_split_only(
    tmp_path: Path, scifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, queries, qrels = load_beir(scifact_dir, "train")
    dataset = write_beir(tmp_path / "slice", *beir_subset(corpus, queries, qrels, 16, 20), "train")
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    splits: list[str] = []
    real_load = tune_module.load_beir

    def spy(folder: Path, split: str = "test") -> object:
        splits.append(split)
        return real_load(folder, split)

    monkeypatch.setattr(tune_module, "load_beir", spy)
    small = replace(RERANKER_CONFIG, epochs=1, max_length=64, batch_size=8)
    mine = MineConfig(depth=20, negatives=3, held_share=0.25)
    data = tmp_path / "data"
    report = tune_reranker(dataset, data, "train", mine=mine, config=small, progress=lambda _: None)
    assert splits == ["train"]  # the test split is never read
    model = Path(report.model_dir)
    assert model.parent == data / "models" and model.name == report.version
    onnx = (model / "model.onnx").read_bytes()
    assert report.version == "reranker-" + xxhash.xxh64(onnx).hexdigest()[:12]
    assert len(onnx) < 40 * 2**20  # int8: tens of MB at most
    meta = json.loads((model / "reranker.json").read_text())
    assert meta["tuned"] is True and meta["split"] == "train" and meta["max_length"] == 64
    assert meta["rerank_depth"] in (10, 20) and meta["prior_weight"] >= 0.0  # chosen on held
    assert report.fit_queries + report.held_queries == report.queries <= 16
    assert report.fit_pairs > report.fit_queries  # positives and hard negatives per query
    assert 0.0 <= report.held_mrr10_fused <= 1.0 and 0.0 <= report.held_mrr10_tuned <= 1.0

    reranker = load_reranker(str(model))
    assert isinstance(reranker, OnnxReranker) and is_tuned(str(model))
    assert (reranker.depth, reranker.prior_weight) == (meta["rerank_depth"], meta["prior_weight"])
    scores = reranker.score("what does the protein do?", ["a passage", "another passage"])
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)

    again = tune_reranker(dataset, data, "train", mine=mine, config=small, progress=lambda _: None)
    assert again.version == report.version  # same data, same seed, same command: same model

    # label-free: inverse-cloze queries from the index's chunks; no queries or qrels read
    free = tune_reranker(
        dataset, data, "train", mine=mine, config=small, limit_queries=10,
        self_supervised=True, progress=lambda _: None,
    )  # fmt: skip
    assert splits == ["train", "train"] and free.self_supervised and free.split.startswith("none")
    assert free.queries == 10 and free.held_mrr10_fused == 1.0  # the chunk holds the sentence
    assert (free.rerank_depth, free.prior_weight) == (10, 2.0)  # the supervised run's blend
    assert free.version != report.version and (Path(free.model_dir) / "model.onnx").is_file()

    from ragstream.core.settings import Settings
    from ragstream.eval.evaluation import default_configs, pipeline_config

    tuned = Settings(data_dir=data, query={"reranker": str(model)})
    names = [c.name for c in default_configs(tuned)]
    assert "hybrid-rrf+rerank(tuned)" in names and "hybrid-dbsf+rerank(tuned)" in names
    assert pipeline_config(tuned).name == "hybrid-rrf+rerank(tuned)"
