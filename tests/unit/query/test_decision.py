"""The calibrated answerability decision (query/decision.py) and its fit
(ragstream/train/decision.py): pure properties, the shipped file beside the answer judge,
signal selection, and clear errors."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.core.answers import ChatMessage
from ragstream.core.errors import ModelUnavailableError
from ragstream.eval import kinds
from ragstream.eval.kinds import Reading as Reading_
from ragstream.operators.answer_judge import (
    ANSWER_JUDGE_FILE,
    BUNDLED_ANSWER_JUDGE,
    AnswerJudge,
)
from ragstream.query.decision import (
    HISTORY,
    SIGNALS,
    Decision,
    asked_after,
    leg_leads,
    load_decision,
)
from ragstream.train import kinds_fit
from ragstream.train.decision import (
    Reading,
    asked_alone,
    auc,
    ceiling,
    fit_decision,
    fit_labelled,
    fit_logistic,
    labelled_rates,
    rates,
)

BUNDLED = BUNDLED_ANSWER_JUDGE

SHARE = st.floats(0.0, 1.0)


def signals(judge: float, dense: float, cov: float, union: float) -> dict[str, float]:
    return {"judge_best": judge, "dense_best": dense, "coverage_best": cov, "coverage_union": union}


def test_the_shipped_decision_fits_the_shipped_answer_judge() -> None:
    decision = load_decision(BUNDLED)
    assert decision is not None
    assert decision.judge == json.loads((BUNDLED / ANSWER_JUDGE_FILE).read_text())["version"]
    raw = json.loads((BUNDLED / "decision.json").read_text())
    assert set(raw["features"]) <= set(SIGNALS) and "train" in raw["fitted_on"]["split"]
    # fitted on every kind of every train split, each cell's figures beside the dense row
    cells = raw["fitted_on"]["cells"]
    kinds = {name.split()[1] for name in cells}
    assert kinds == {"gold_removed", "adversarial", "off_topic", "conversational"}
    assert all(c["answerable"] > 0 and c["unanswerable"] > 0 for c in cells.values())
    assert all(w > 0 for w in decision.weights)
    assert 0.0 < decision.floor < 1.0


@given(SHARE, SHARE, SHARE, SHARE, st.floats(0.0, 0.5))
@settings(max_examples=200, deadline=None)
def test_more_evidence_never_lowers_the_probability(
    judge: float, dense: float, cov: float, union: float, more: float
) -> None:
    """Every signal enters the shipped decision with a positive weight (selection admits no
    other): reading any signal as stronger cannot make it less sure the question is
    answerable."""
    decision = load_decision(BUNDLED)
    assert decision is not None and any(f.startswith("judge_") for f in decision.features)
    assert all(w > 0 for w in decision.weights)
    base = {**signals(judge, dense, cov, union), "judge_top": judge, "named_coverage": cov}
    for name in decision.features:
        surer = {**base, name: min(1.0, base.get(name, 0.0) + more)}
        assert decision.probability(surer) >= decision.probability(base) - 1e-12


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
    from ragstream.query.models import fitted_decision

    model = tmp_path / "judge"
    shutil.copytree(BUNDLED, model)
    raw = json.loads((model / "decision.json").read_text())
    (model / "decision.json").write_text(json.dumps({**raw, "judge": "judge-other"}))
    with pytest.raises(ModelUnavailableError, match="fitted with judge-other"):
        fitted_decision(AnswerJudge(model), "calibrated")
    assert fitted_decision(AnswerJudge(model), "rule") is None
    (model / "decision.json").write_text(json.dumps({**raw, "features": ["x"]}))
    with pytest.raises(ModelUnavailableError, match="cannot read the answerability decision"):
        load_decision(model)
    (model / "decision.json").unlink()
    assert load_decision(model) is None  # no file: the floor rule


def test_status_warns_when_the_decision_reads_another_embedders_cosines_raw(
    tmp_path: Path,
) -> None:
    from ragstream.core.settings import Settings
    from ragstream.operators.embed import load_embedder
    from ragstream.service.status import decision_warning

    shipped = load_decision(BUNDLED)
    assert shipped is not None  # fitted on the default embedder's cosines, and says so
    default = load_embedder(Settings().embedder).version.slug
    assert shipped.embedder == default
    model = tmp_path / "judge"
    shutil.copytree(BUNDLED, model)
    scaled = Settings(data_dir=tmp_path, query={"answerable": {"judge": str(model)}})
    assert decision_warning(scaled, "tuned-384-0123abcd") is None  # read on the fit's scale
    configured = Settings(
        data_dir=tmp_path, query={"answerable": {"judge": str(model)}, "cosine_scale": False}
    )
    assert decision_warning(configured, default) is None
    assert decision_warning(configured, None) is None  # no live collection yet
    warning = decision_warning(configured, "tuned-384-0123abcd")
    assert warning is not None and default in warning and "tuned-384-0123abcd" in warning
    assert str(model) in warning and "--judge COPY" in warning  # what to do about it
    rule = Settings(
        data_dir=tmp_path, query={"answerable": {"judge": str(model), "decision": "rule"}}
    )
    assert decision_warning(rule, "tuned-384-0123abcd") is None  # the rule reads no fit
    off = Settings(data_dir=tmp_path, query={"answerable": {"judge": "none"}})
    assert decision_warning(off, "x") is None
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


def test_the_overrides_answer_whatever_the_probability() -> None:
    d = Decision((0.0,) * 4, (1.0,) * 4, (0.0,) * 4, -5.0, 0.5, "judge-x",
                 dense_override=0.7, judge_override=0.65)  # fmt: skip
    weak = signals(0.01, 0.3, 0.1, 0.1)
    assert d.probability(weak) < d.floor and not d.answers(weak)
    assert d.answers({**weak, "dense_best": 0.7}) and d.answers({**weak, "judge_best": 0.65})
    assert d.answers(weak, floor=0.0)  # a floor given per call replaces the fitted one


def asked(n: int, seed: int = 7) -> list[Reading_]:
    """Synthetic questions over three articles: `judge_best` separates the two kinds,
    `dense_best` is noise, a few answers were refused by the gate (no signals)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        yes = i % 2 == 0
        read = {
            "judge_best": float(rng.uniform(0.3, 1.0) if yes else rng.uniform(0.0, 0.6)),
            "dense_best": float(rng.uniform(0.3, 0.9)),
            # separates too, the wrong way round: less coverage, more answerable
            "coverage_union": float(rng.uniform(0.0, 0.7) if yes else rng.uniform(0.3, 1.0)),
        }
        kind = "answerable" if yes else "adversarial"
        out.append(Reading_(str(i), kind, "set", f"a{i % 3}", None if i % 37 == 0 else read))
    return out


def test_a_gate_refusal_counts_as_refused_when_the_floor_is_fitted() -> None:
    questions = asked(240)
    pos = [a.signals for a in questions if a.answerable]
    neg = [a.signals for a in questions if not a.answerable]
    decision = fit_labelled(pos, neg, "judge-x", ["judge_best"], keep=0.9)
    kept, refused = labelled_rates(pos, neg, decision)
    assert kept >= 0.9 and refused > 0.5
    assert decision.features == ("judge_best",)
    assert labelled_rates([None], [None], decision) == (0.0, 1.0)


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


def test_the_coverage_rule_refuses_text_that_holds_few_of_the_questions_words() -> None:
    d = Decision((0.0,) * 4, (1.0,) * 4, (0.0,) * 4, 5.0, 0.5, "judge-x",
                 coverage_floor=0.35, coverage_dense=0.45)  # fmt: skip
    sure = signals(0.9, 0.3, 0.2, 0.2)  # a sure judge, but few words found, far in meaning
    assert d.probability(sure) > d.floor and not d.answers(sure)
    assert d.answers({**sure, "coverage_best": 0.35}) and d.answers({**sure, "dense_best": 0.45})


def test_the_fitted_coverage_rule_costs_no_answerable_question() -> None:
    rng = np.random.default_rng(5)
    pos = [signals(*rng.uniform([0.3, 0.4, 0.4, 0.4], [1.0, 0.9, 1.0, 1.0])) for _ in range(200)]
    near = [signals(*rng.uniform([0.0, 0.4, 0.4, 0.4], [0.8, 0.9, 1.0, 1.0])) for _ in range(150)]
    off = [signals(*rng.uniform([0.3, 0.2, 0.0, 0.0], [1.0, 0.4, 0.3, 0.3])) for _ in range(150)]
    plain = fit_labelled(pos, [*near, *off], "judge-x", ["judge_best"], keep=0.9)
    ruled = fit_labelled(
        pos, [*near, *off], "judge-x", ["judge_best"], keep=0.9, coverage_rule=True
    )
    assert (plain.coverage_floor, plain.coverage_dense) == (0.0, 1.01)
    assert ruled.coverage_floor > 0.0
    before, after = (
        labelled_rates(pos, [*near, *off], plain),
        labelled_rates(pos, [*near, *off], ruled),
    )
    assert after[0] == before[0] and after[1] > before[1]
    assert labelled_rates(pos, off, ruled)[1] > 0.9  # the off-topic ones, caught by the rule


def conversational(floor: float) -> Decision:
    """A decision whose conversation member reads the best cosine alone at `floor`."""
    member = Decision((0.5,), (0.1,), (1.0,), 0.0, floor, "judge-x", features=("dense_best",))
    alone = Decision((0.0,) * 4, (1.0,) * 4, (1.0, 0.0, 0.0, 0.0), 0.0, 0.5, "judge-x")
    return dataclasses.replace(alone, conversation=member)


@given(SHARE, SHARE, SHARE, SHARE, st.integers(0, 6))
def test_a_question_asked_after_earlier_turns_is_read_by_the_conversation_member(
    judge: float, dense: float, cov: float, union: float, turns: int
) -> None:
    d = conversational(0.6)
    assert d.conversation is not None
    alone = signals(judge, dense, cov, union)
    asked = {**alone, HISTORY: float(turns)}
    own = d.conversation if turns else dataclasses.replace(d, conversation=None)
    assert d.reading(asked) is (d.conversation if turns else d)
    assert d.probability(asked) == own.probability(asked)
    assert d.answers(asked) == own.answers(asked)
    assert d.answers(asked, 0.2) == own.answers(asked, 0.2)  # a floor set holds for both
    assert d.probability(alone) == dataclasses.replace(d, conversation=None).probability(alone)


def test_the_conversation_member_survives_the_file_and_the_engine_records_its_turns(
    tmp_path: Path,
) -> None:
    d = conversational(0.6)
    (tmp_path / "decision.json").write_text(json.dumps(d.to_json()))
    assert load_decision(tmp_path) == d
    member = d.to_json()["conversation"]
    assert isinstance(member, dict)
    (tmp_path / "decision.json").write_text(json.dumps({**d.to_json(), "conversation": {
        **member, "features": ["x"]}}))  # fmt: skip
    with pytest.raises(ModelUnavailableError, match="cannot read the answerability decision"):
        load_decision(tmp_path)
    user, bot = ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")
    assert asked_after([]) == {HISTORY: 0.0}
    assert asked_after([user, bot, user, bot]) == {HISTORY: 2.0}


def test_the_shipped_decision_reads_a_conversation_with_its_own_member() -> None:
    decision = load_decision(BUNDLED)
    assert decision is not None and decision.conversation is not None
    member = decision.conversation
    assert member.judge == decision.judge and member.embedder == decision.embedder
    assert all(w > 0 for w in member.weights) and 0.0 < member.floor < 1.0
    raw = json.loads((BUNDLED / "decision.json").read_text())
    cells = raw["fitted_on"]["conversation"]["cells"]
    assert {name.split()[1] for name in cells} == {"gold_removed", "conversational"}


def test_the_decision_for_questions_alone_never_fits_a_chats_readings_again() -> None:
    def read(qid: str, kind: str, dataset: str, turns: int) -> Reading_:
        return Reading_(qid, kind, dataset, qid, {"dense_best": 0.5, HISTORY: turns})

    tasks = [("t1", "answerable", 0), ("t2", "answerable", 2), ("t3", "conversational", 1)]
    tasks += [("t4", "conversational", 0), ("t5", "gold_removed", 3)]
    readings = [read(q, k, "mtrag", 0) for q, k, _ in tasks]  # the last turns alone
    readings += [read(q, k, kinds.CHAT, n) for q, k, n in tasks]  # the same, in their chat
    readings.append(Reading_("t6", "answerable", kinds.CHAT, "t6", None))  # gate refusal
    alone = asked_alone(readings)
    assert {r.dataset for r in alone} == {"mtrag"}
    assert sorted(r.qid for r in alone) == ["t1", "t2", "t3", "t4", "t5"]
    member = [r for r in readings if kinds.in_conversation(r)]
    assert sorted(r.qid for r in member) == ["t2", "t3", "t5"]
    assert {c[0] for c in kinds_fit.cells(alone)} == {"mtrag"}
