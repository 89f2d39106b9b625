"""The shared trainer and the judge's training data: rules, splits, labels, and a tiny real
training run through export to the ONNX form the product loads."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.eval.negate import negate, questions
from ragstream.train.judge_data import (
    CONTRADICTS,
    SUPPORTS,
    UNRELATED,
    Claim,
    Neighbours,
    claim_pairs,
    evidence_sentences,
    is_holdout,
    load_claims,
)

WORDS = st.text(alphabet="abcdefghij ", min_size=1, max_size=60)


@given(WORDS)
def test_negate_always_changes_a_statement(text: str) -> None:
    if text.strip():
        assert negate(text) != text.strip()
        assert negate(text) == negate(text)


@pytest.mark.parametrize(
    ("statement", "negated"),
    [
        ("Vitamin D levels are associated with mortality.",
         "Vitamin D levels are not associated with mortality."),
        ("The drug cannot cross the blood-brain barrier.",
         "The drug can cross the blood-brain barrier."),
        ("Obesity increases the risk of diabetes.", "Obesity decreases the risk of diabetes."),
        ("No difference was observed.", "Some difference was observed."),
    ],
)  # fmt: skip
def test_negation_rules(statement: str, negated: str) -> None:
    assert negate(statement) == negated


def test_questions_ask_what_the_claim_states() -> None:
    asked = questions("Aspirin is effective against headaches.")
    assert asked == [
        "Is it true that aspirin is effective against headaches?",
        "Is aspirin effective against headaches?",
        "What is effective against headaches?",
    ]
    assert questions("") == []


def test_the_holdout_split_is_stable_and_about_fifteen_percent(scifact_dir: Path) -> None:
    claims = load_claims(scifact_dir.parent / "scifact-claims" / "claims_train.jsonl")
    held = [c.id for c in claims if is_holdout(c.id)]
    assert len(claims) == 809 and 0.10 < len(held) / len(claims) < 0.20
    assert held == [c.id for c in claims if is_holdout(c.id)]


def test_evidence_ids_tolerate_a_one_sentence_shift() -> None:
    sentences = ["Background.", "Methods were standard.", "Aspirin lowered stroke risk by half."]
    assert evidence_sentences("Aspirin lowers stroke risk.", sentences, [1]) == [2]
    assert evidence_sentences("Aspirin lowers stroke risk.", sentences, [2]) == [2]
    assert evidence_sentences("anything", sentences, [7]) == []


DOCS = {
    "1": ("Aspirin trial", ["We ran a trial.", "Aspirin reduced stroke risk in adults.",
                            "Adverse events were rare."]),
    "2": ("Statins", ["Statins lowered cholesterol.", "Stroke risk was not measured."]),
    "3": ("Bread", ["Bread needs flour and yeast."]),
}  # fmt: skip


def test_claim_pairs_label_each_kind() -> None:
    claim = Claim(1, "Aspirin reduces stroke risk.", {"1": [([1], "SUPPORT")]}, ["1"])
    rng = random.Random(0)
    pairs = claim_pairs(claim, DOCS, Neighbours(DOCS), rng, sorted(DOCS))
    by_kind = {p.kind.removesuffix("_asked"): p for p in pairs}
    assert by_kind["support"].label == SUPPORTS
    assert by_kind["support"].premise == "Aspirin reduced stroke risk in adults."
    assert by_kind["negated_claim"].label == CONTRADICTS
    assert by_kind["negated_claim"].statement == "Aspirin increases stroke risk."
    assert by_kind["copy"].label == SUPPORTS and by_kind["negated_copy"].label == CONTRADICTS
    neighbours = [p for p in pairs if p.kind.startswith("neighbour")]
    assert neighbours and all(p.label == UNRELATED for p in neighbours)
    assert all("Aspirin reduced" not in p.premise for p in neighbours)  # never the cited doc
    contra = Claim(2, "Aspirin raises stroke risk.", {"1": [([1], "CONTRADICT")]}, ["1"])
    labels = {p.kind.removesuffix("_asked"): p.label for p in claim_pairs(
        contra, DOCS, Neighbours(DOCS), rng, sorted(DOCS))}  # fmt: skip
    assert labels["contradict"] == CONTRADICTS


@pytest.mark.slow
def test_a_tiny_training_run_exports_a_loadable_deterministic_judge(tmp_path: Path) -> None:
    """The trainer end to end on a 1-layer model: train, keep the best epoch, export int8
    ONNX, load it as the product does; the same seed gives the same weights."""
    from ragstream.operators.judge import SupportJudge
    from ragstream.train.crossencoder import TrainConfig, export_onnx, train_cross_encoder

    fit = [(f"sentence {i} about cats", f"claim {i} about cats", float(i % 3)) for i in range(24)]
    config = TrainConfig(keep_layers=(0,), epochs=2, batch_size=8, max_length=32)
    records = []
    for run in ("a", "b"):
        records.append(train_cross_encoder(fit, fit[:6], config, tmp_path / run, progress=str))
    assert [h["epoch"] for h in records[0]["history"]] == [1, 2]
    assert records[0]["history"] == records[1]["history"]  # same seed, same training
    onnx = export_onnx(tmp_path / "a", tmp_path / "judge" / "model.onnx")
    assert onnx.stat().st_size < 20 * 2**20
    judge = SupportJudge(tmp_path / "judge")
    probs = judge.probabilities([("a cat", "a claim")] * 3)
    assert probs.shape == (3, 3) and np.allclose(probs.sum(axis=1), 1, atol=1e-4)
