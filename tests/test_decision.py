"""The calibrated answerability decision (query/decision.py) and its fit
(ragstream/train/decision.py): pure properties, the shipped file, and clear errors."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.core.errors import ModelUnavailableError
from ragstream.operators.judge import BUNDLED, SupportJudge
from ragstream.query.decision import FEATURES, Decision, leg_leads, load_decision
from ragstream.train.decision import Reading, auc, ceiling, fit_decision, fit_logistic, rates

SHARE = st.floats(0.0, 1.0)


def signals(judge: float, dense: float, cov: float, union: float) -> dict[str, float]:
    return {"judge_best": judge, "dense_best": dense, "coverage_best": cov, "coverage_union": union}


def test_the_shipped_decision_fits_the_shipped_judge() -> None:
    decision = load_decision(BUNDLED)
    assert decision is not None
    assert decision.judge == json.loads((BUNDLED / "judge.json").read_text())["version"]
    raw = json.loads((BUNDLED / "decision.json").read_text())
    assert raw["features"] == list(FEATURES) and "train" in raw["fitted_on"]["split"]
    assert 0.0 < decision.floor < 1.0


@given(SHARE, SHARE, SHARE, SHARE, st.floats(0.0, 0.5))
@settings(max_examples=200, deadline=None)
def test_more_evidence_never_lowers_the_probability(
    judge: float, dense: float, cov: float, union: float, more: float
) -> None:
    """Every fitted weight is positive: a better reading of any signal cannot make the
    shipped decision less sure that the question is answerable."""
    decision = load_decision(BUNDLED)
    assert decision is not None and all(w > 0 for w in decision.weights)
    base = decision.probability(signals(judge, dense, cov, union))
    for i in range(4):
        better = [judge, dense, cov, union]
        better[i] = min(1.0, better[i] + more)
        assert decision.probability(signals(*better)) >= base - 1e-12


@given(st.lists(st.floats(0.01, 50.0), min_size=0, max_size=80))
def test_leads_are_at_least_one_when_the_best_leads(values: list[float]) -> None:
    leads = leg_leads([{"dense": v, "lexical": v} for v in values])
    assert leads["dense_lead"] == leads["lexical_lead"]
    assert leads["dense_lead"] >= 1.0 or len(values) <= 5


def test_fit_separates_and_keeps_the_share_it_is_asked_to() -> None:
    rng = np.random.default_rng(13)
    readings = [
        Reading(
            str(i),
            signals(*rng.uniform([0.3, 0.5, 0.5, 0.6], [1.0, 0.9, 1.0, 1.0])),
            signals(*rng.uniform([0.0, 0.2, 0.0, 0.2], [0.7, 0.6, 0.6, 0.8])),
        )
        for i in range(200)
    ]
    decision = fit_decision(readings, "judge-x", keep=0.9)
    kept, refused = rates(readings, decision)
    assert kept >= 0.9 and refused > 0.9
    # the floor alone keeps 90 %; the dense override adds answers, never costs refusals
    no_override = dataclasses.replace(decision, dense_override=1.01)
    assert 0.9 <= rates(readings, no_override)[0] <= 0.92
    assert rates(readings, no_override)[1] == refused
    assert fit_decision(readings, "judge-x", keep=0.9) == decision  # deterministic


def test_logistic_fit_matches_a_known_boundary() -> None:
    x = np.linspace(-3, 3, 61)[:, None]
    y = (x[:, 0] > 0.5).astype(float)
    y[::7] = 1 - y[::7]  # noise, so the optimum is finite
    w, b = fit_logistic(x, y, l2=0.01)
    assert abs(-b / w[0] - 0.5) < 0.3


def test_a_decision_for_another_judge_or_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    from ragstream.query.engine import _fitted_decision

    model = tmp_path / "judge"
    shutil.copytree(BUNDLED, model)
    raw = json.loads((model / "decision.json").read_text())
    (model / "decision.json").write_text(json.dumps({**raw, "judge": "judge-other"}))
    with pytest.raises(ModelUnavailableError, match="fitted with judge-other"):
        _fitted_decision(SupportJudge(model), "calibrated")
    assert _fitted_decision(SupportJudge(model), "rule") is None
    (model / "decision.json").write_text(json.dumps({**raw, "features": ["x"]}))
    with pytest.raises(ModelUnavailableError, match="cannot read the answerability decision"):
        load_decision(model)
    (model / "decision.json").unlink()
    assert load_decision(model) is None  # no file: the floor rule


def test_status_warns_when_the_decision_was_fitted_on_another_embedder(tmp_path: Path) -> None:
    from ragstream.core.settings import Settings
    from ragstream.operators.embed import load_embedder
    from ragstream.status import decision_warning

    shipped = load_decision(BUNDLED)
    assert shipped is not None  # fitted on the default embedder's cosines, and says so
    default = load_embedder(Settings().embedder).version.slug
    assert shipped.embedder == default
    model = tmp_path / "judge"
    shutil.copytree(BUNDLED, model)
    configured = Settings(data_dir=tmp_path, query={"judge": str(model)})
    assert decision_warning(configured, default) is None
    assert decision_warning(configured, None) is None  # no live collection yet
    warning = decision_warning(configured, "tuned-384-0123abcd")
    assert warning is not None and default in warning and "tuned-384-0123abcd" in warning
    assert str(model) in warning and "--judge COPY" in warning  # what to do about it
    rule = Settings(data_dir=tmp_path, query={"judge": str(model), "decision": "rule"})
    assert decision_warning(rule, "tuned-384-0123abcd") is None  # the rule reads no fit
    assert decision_warning(Settings(data_dir=tmp_path, query={"judge": "none"}), "x") is None
    raw = json.loads((model / "decision.json").read_text())
    (model / "decision.json").write_text(json.dumps({**raw, "embedder": ""}))
    assert decision_warning(configured, "tuned-384-0123abcd") is None  # not recorded
    (model / "decision.json").write_text("{not json")
    unreadable = decision_warning(configured, default)  # status reports it, never crashes
    assert unreadable is not None and "cannot read the answerability decision" in unreadable


def test_probability_is_a_logistic_of_the_standardized_features() -> None:
    d = Decision((0.0,) * 4, (1.0,) * 4, (1.0, 0.0, 0.0, 0.0), 0.0, 0.5, "judge-x")
    p = d.probability(signals(1.0 - 1e-3, 0.0, 0.0, 0.0))  # log(1.0) = 0
    assert p == pytest.approx(0.5)


def test_a_close_match_in_meaning_answers_whatever_the_probability() -> None:
    decision = load_decision(BUNDLED)
    assert decision is not None and 0.5 <= decision.dense_override < 1.0
    weak = signals(0.01, decision.dense_override, 0.1, 0.1)  # the judge reads it as unrelated
    assert decision.probability(weak) < decision.floor and decision.answers(weak)
    assert not decision.answers({**weak, "dense_best": decision.dense_override - 0.01})


def test_a_sure_judge_answers_whatever_the_other_signals_say() -> None:
    decision = load_decision(BUNDLED)
    assert decision is not None and decision.judge_override == 0.65  # the floor rule's
    terse = signals(decision.judge_override, 0.3, 0.1, 0.1)  # little term coverage
    assert decision.probability(terse) < decision.floor and decision.answers(terse)
    assert not decision.answers({**terse, "judge_best": decision.judge_override - 0.01})


SCORES = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30)


@given(SCORES, SCORES)
def test_auc_is_symmetric_and_matches_a_brute_force_count(
    pos: list[float], neg: list[float]
) -> None:
    value = auc(pos, neg)
    assert 0.0 <= value <= 1.0
    assert value + auc(neg, pos) == pytest.approx(1.0)
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    assert value == pytest.approx(wins / (len(pos) * len(neg)))


@given(SCORES, SCORES, SCORES, st.floats(0.5, 0.99))
def test_ceiling_answers_what_the_keep_needs_and_no_more_is_refused_than_the_floor_allows(
    evidence: list[float], unsupported: list[float], absent: list[float], keep: float
) -> None:
    total = len(evidence) + len(unsupported)
    need = max(0, int(np.ceil(keep * total - 1e-9)) - len(evidence))
    if need > len(unsupported):
        with pytest.raises(ValueError):
            ceiling(evidence, unsupported, absent, keep)
        return
    share, refused = ceiling(evidence, unsupported, absent, keep)
    assert share == pytest.approx(need / len(unsupported))
    if need:
        floor = sorted(unsupported, reverse=True)[need - 1]
        answered = sum(u >= floor for u in unsupported) + len(evidence)
        assert answered / total >= keep - 1e-9  # the floor keeps what the target asks
        assert refused == pytest.approx(sum(a < floor for a in absent) / len(absent))
    else:
        assert refused == 1.0


def test_ceiling_is_low_when_unsupported_questions_score_like_gold_removed_ones() -> None:
    """The issue-16 situation in miniature: 60 % evidence questions (sure), 40 % whose gold
    text holds no answer and scores like the gold-removed ones: keeping 90 % answered
    forces the floor down among the gold-removed scores."""
    rng = np.random.default_rng(3)
    like_absent = rng.uniform(0, 1, 400).tolist()
    share, refused = ceiling([1.0] * 600, like_absent, rng.uniform(0, 1, 1000).tolist())
    assert share == pytest.approx(0.75)
    assert 0.2 < refused < 0.3
