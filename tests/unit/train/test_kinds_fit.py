"""The decision's fit over every kind of unanswerable question (ragstream/train/kinds_fit.py)
and the verdict a replay of recorded signals reaches (query/answerable.py `answers_from`)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.eval.kinds import Reading
from ragstream.query.answerable import Asked, Limits, answers_from, judge
from ragstream.query.decision import Decision
from ragstream.train import kinds_fit
from tests.unit.query.test_answerable import CORPUS, chunk, corpus_freqs

KIND = st.sampled_from(["gold_removed", "adversarial", "off_topic", "conversational"])
CELL = st.tuples(st.sampled_from(["squad", "scifact", "mtrag"]), KIND)


@given(st.lists(CELL, min_size=1, max_size=40), st.integers(1, 5))
def test_every_negative_kind_weighs_the_same_and_the_answerable_all_of_them(
    negatives: list[tuple[str, str]], positives_per_set: int
) -> None:
    sets = sorted({d for d, _ in negatives})
    rows = [
        Reading(f"p{d}{i}", "answerable", d, "g", {})
        for d in sets
        for i in range(positives_per_set)
    ]
    rows += [Reading(f"n{i}", k, d, "g", {}) for i, (d, k) in enumerate(negatives)]
    w = kinds_fit.cell_weights(rows)
    kinds = {k for _, k in negatives}
    for kind in kinds:
        assert np.isclose(sum(x for r, x in zip(rows, w, strict=True) if r.kind == kind), 1.0)
    per_set = [
        sum(x for r, x in zip(rows, w, strict=True) if r.answerable and r.dataset == d)
        for d in sets
    ]
    assert np.allclose(per_set, len(kinds) / len(sets))


def synthetic(seed: int = 13) -> list[Reading]:
    """Readings where `dense_best` tells natural negatives apart, `judge_best` the
    adversarial ones, and `coverage_union` is noise."""
    rng = random.Random(seed)
    rows = []
    for d in ("squad", "mtrag"):
        for i in range(120):
            group = f"{d}-{i % 12}"
            rows.append(Reading(f"{d}{i}", "answerable", d, group, {
                "dense_best": rng.gauss(0.6, 0.1), "judge_best": rng.uniform(0.3, 0.99),
                "coverage_union": rng.random()}))  # fmt: skip
            rows.append(Reading(f"{d}{i}-g", "gold_removed", d, group, {
                "dense_best": rng.gauss(0.35, 0.1), "judge_best": rng.uniform(0.01, 0.9),
                "coverage_union": rng.random()}))  # fmt: skip
            if d == "squad":
                rows.append(Reading(f"{d}{i}-a", "adversarial", d, group, {
                    "dense_best": rng.gauss(0.6, 0.1), "judge_best": rng.uniform(0.01, 0.4),
                    "coverage_union": rng.random()}))  # fmt: skip
    return rows


def test_selection_keeps_what_each_kind_needs_and_drops_noise() -> None:
    rows = synthetic()
    names, steps = kinds_fit.select(rows, "J", ["dense_best", "judge_best", "coverage_union"])
    assert set(names) == {"dense_best", "judge_best"}
    assert all(
        b.criterion >= a.criterion + kinds_fit.MIN_GAIN for a, b in itertools.pairwise(steps)
    )
    fitted = kinds_fit.weighted_decision(rows, names, "J", kinds_fit.cell_weights(rows))
    assert all(w > 0 for w in fitted.weights)
    held = kinds_fit.cell_auc(rows, kinds_fit.held_out(rows, names, "J"))
    alone = kinds_fit.cell_auc(rows, kinds_fit.scores(rows, lambda s: s["dense_best"]))
    assert held[("squad", "adversarial")] > alone[("squad", "adversarial")] + 0.2


def test_a_group_is_never_split_across_folds() -> None:
    rows = synthetic()
    folds: dict[tuple[str, str], set[int]] = {}
    for r in rows:
        folds.setdefault((r.dataset, r.group), set()).add(kinds_fit.fold_of(r))
    assert all(len(f) == 1 for f in folds.values())
    assert len({f for fs in folds.values() for f in fs}) > 1


@given(st.floats(0.5, 0.99))
@settings(max_examples=25, deadline=None)
def test_the_floor_keeps_the_share_of_every_data_set_it_is_asked_to(keep: float) -> None:
    rows = synthetic()
    fitted = kinds_fit.weighted_decision(rows, ["dense_best"], "J", kinds_fit.cell_weights(rows))
    floor = kinds_fit.floor_for(rows, fitted, keep)
    answered = {}
    for d in ("squad", "mtrag"):
        pos = [r for r in rows if r.answerable and r.dataset == d]
        answered[d] = sum(fitted.probability(r.signals or {}) >= floor for r in pos) / len(pos)
    assert sum(answered.values()) / 2 >= keep - 1e-9
    higher = kinds_fit.floor_for(rows, fitted, min(0.999, keep + 0.05))
    assert higher <= floor


def test_a_gate_refusal_is_refused_by_every_floor() -> None:
    rows = [*synthetic()[:30], Reading("x", "answerable", "squad", "g", None)]
    values = kinds_fit.scores(rows, lambda s: s["dense_best"])
    assert values[-1] == float("-inf")


SIGNALS = st.fixed_dictionaries({
    "judge_best": st.floats(0, 1), "dense_best": st.floats(0, 1),
    "coverage_best": st.floats(0, 1), "question_terms": st.sampled_from([0.0, 1.0, 3.0]),
    "unseen_term_share": st.sampled_from([0.0, 0.5, 1.0]), "answer_type_match": st.floats(0, 1),
})  # fmt: skip


@given(SIGNALS, st.floats(0, 0.6), st.floats(0.3, 1.0))
def test_the_replayed_verdict_is_monotone_in_the_evidence(
    signals: dict[str, float], floor: float, dense_floor: float
) -> None:
    decision = Decision((0.5, -1.0), (0.2, 1.0), (1.0, 1.0), 0.0, 0.5, "J",
                        features=("dense_best", "judge_best"))  # fmt: skip
    limits = Limits(floor=floor, dense_floor=dense_floor)
    more = {**signals, "judge_best": min(1.0, signals["judge_best"] + 0.2)}
    assert answers_from(more, limits, decision) >= answers_from(signals, limits, decision)


def test_the_replayed_verdict_is_the_engines() -> None:
    class Scorer:
        version = "fake"

        def holds(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
            return np.array([0.9 if "chunker" in p else 0.05 for _, p in pairs])

    chunks = [chunk(t) for t in CORPUS]
    decision = Decision((0.5, -1.0), (0.2, 1.0), (1.0, 1.0), 0.0, 0.5, "J",
                        features=("dense_best", "judge_best"))  # fmt: skip
    for question in ("What does the hybrid chunker do?", "What is the capital of Mongolia?",
                     "Which formats does Docling convert?"):  # fmt: skip
        for dense in (0.1, 0.45, 0.8):
            for limits in (Limits(), Limits(0.5, 0.5), Limits(0.2, 0.9, decision_floor=0.7)):
                asked = Asked(question, chunks, corpus_freqs(CORPUS), dense)
                for d in (None, decision):
                    verdict, _ = judge(asked, limits, Scorer(), d)
                    assert answers_from(verdict.signals, limits, d) == verdict.answerable


def test_the_direction_at_the_floor_refuses_at_least_what_the_logistic_fit_does() -> None:
    """Weights chosen for the tail (where 90 % of the answerable readings are kept) refuse no
    fewer unanswerable readings there than the logistic fit's, stay non-negative, and the
    result is still a probability whose floor keeps what it is asked to."""
    rows = synthetic(5)
    names = ["dense_best", "judge_best"]
    tail = kinds_fit.at_the_floor(rows, names, "J")
    bulk = kinds_fit.logistic(rows, names, "J")
    assert all(w >= 0 for w in tail.weights) and tail.features == tuple(names)

    def refused(d: Decision) -> float:
        return float(
            np.mean(
                list(kinds_fit.cell_refused(rows, kinds_fit.scores(rows, d.probability)).values())
            )
        )

    assert refused(tail) >= refused(bulk) - 0.01
    probabilities = kinds_fit.scores(rows, tail.probability)
    assert all(0.0 < p < 1.0 for p in probabilities)
    floor = kinds_fit.floor_for(rows, tail, 0.9)
    kept = [tail.probability(r.signals or {}) >= floor for r in rows if r.answerable]
    assert sum(kept) / len(kept) >= 0.9 - 1e-9
