"""The refusal rules of the query path (query/refusal.py): pure inputs in, a `Refusal` or
None out, at and on either side of each boundary; and one set of models shared by engines."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from ragstream.core.answers import Answerability, Claim
from ragstream.core.settings import AnswerableSettings, QuerySettings, Settings
from ragstream.query.answerable import Limits
from ragstream.query.refusal import (
    declined_answer,
    gate,
    low_grounding,
    names_to_check,
    no_answer,
    not_answerable,
    unnamed,
    wordless,
)
from ragstream.query.rerank import Reranked
from ragstream.query.retrieve import Candidate
from tests.unit.query.test_answerable import chunk


def ranked(dense: float | None = None, rerank: float | None = None) -> Reranked:
    scores = {"dense": dense} if dense is not None else {}
    candidate = Candidate(chunk=chunk("Some text."), score=0.1, ranks={}, scores=scores)
    return Reranked(candidate=candidate, rerank_score=rerank)


def test_wordless_refuses_a_question_without_letters() -> None:
    refused = wordless("123 ?!")
    assert refused is not None
    assert (refused.reason, refused.check) == ("insufficient_evidence", "gate")
    assert wordless("x?") is None


def test_gate_refuses_below_its_floor_and_passes_at_it() -> None:
    assert gate([ranked(dense=0.25)], rerank_floor=0.0, dense_floor=0.25) is None
    low = gate([ranked(dense=0.24)], rerank_floor=0.0, dense_floor=0.25)
    assert low is not None and (low.check, low.best_score) == ("gate", 0.24)
    # a rerank score, when any candidate has one, is the evidence
    assert gate([ranked(dense=0.1, rerank=0.5)], rerank_floor=0.5, dense_floor=0.25) is None
    under = gate([ranked(dense=0.9, rerank=0.4)], rerank_floor=0.5, dense_floor=0.25)
    assert under is not None and under.best_score == 0.4
    nothing = gate([], rerank_floor=0.0)
    assert nothing is not None and nothing.best_score is None
    assert "no candidate passages" in nothing.detail


def verdict(answerable: bool, **signals: float) -> Answerability:
    base = {"coverage_best": 0.8, "question_terms": 3.0, "unseen_term_share": 0.0}
    return Answerability(score=0.3, answerable=answerable, floor=0.4, signals=base | signals)


LIMITS = Limits(floor=0.5, dense_floor=0.5, judge_floor=0.65)


def test_not_answerable_is_none_for_an_answerable_verdict() -> None:
    said_yes = verdict(True, coverage_best=0.0, unseen_term_share=1.0)
    assert not_answerable(said_yes, LIMITS, dense=0.0, read=4, calibrated=True) is None


def test_not_answerable_names_the_signal_that_failed() -> None:
    def detail(v: Answerability, dense: float, calibrated: bool = True) -> str:
        refused = not_answerable(v, LIMITS, dense=dense, read=4, calibrated=calibrated)
        assert refused is not None
        assert (refused.reason, refused.check, refused.best_score) == (
            "not_answerable",
            "decision",
            v.score,
        )
        return refused.detail

    unknown = verdict(False, unseen_term_share=1.0)
    assert detail(unknown, 0.49).startswith("none of the question's terms occurs")
    assert "best cosine 0.49, enough: 0.50" in detail(unknown, 0.49)
    assert detail(verdict(False, question_terms=0.0), 0.2).startswith("none of the question's")
    # close in meaning (at the floor): not the unknown-terms reason
    assert detail(unknown, 0.5).startswith("no retrieved sentence answers")
    uncovered = verdict(False, coverage_best=0.49)
    assert detail(uncovered, 0.49).startswith("the retrieved text covers 49%")
    assert detail(verdict(False, coverage_best=0.5), 0.49).startswith("no retrieved sentence")
    judged = verdict(False, judge_best=0.12)
    assert "the best scores 0.12" in detail(judged, 0.3)
    assert "all signals together give 0.30 (minimum 0.40)" in detail(judged, 0.3)
    assert "(minimum 0.65; 4 sentences read)" in detail(judged, 0.3, calibrated=False)


def test_declined_answer_refuses_only_a_reply_that_declines() -> None:
    refused = declined_answer("NOT_ANSWERABLE: the sources do not say.")
    assert refused is not None
    assert (refused.reason, refused.check) == ("not_answerable", "generator")
    assert refused.detail == "the generator found no answer in the sources: the sources do not say."
    assert declined_answer("The sources do not mention X, but Y holds [S1].") is None
    assert declined_answer("") is None


def claim() -> Claim:
    return Claim(text="It holds [S1].", cids=["S1"], supported=True, score=0.9)


def test_no_answer_refuses_an_answer_without_claims() -> None:
    judged = no_answer([], judged=True, scores=[0.2, 0.7])
    assert judged is not None
    assert (judged.reason, judged.check, judged.best_score) == ("not_answerable", "generator", 0.7)
    unjudged = no_answer([], judged=False, scores=[])
    assert unjudged is not None
    assert (unjudged.reason, unjudged.best_score) == ("insufficient_evidence", None)
    assert no_answer([claim()], judged=True, scores=[0.7]) is None


def test_low_grounding_refuses_below_the_minimum_when_set_to_refuse() -> None:
    low = low_grounding(0.49, min_grounding=0.5, on_low="refuse")
    assert low is not None
    assert (low.reason, low.check, low.best_score) == ("unsupported_answer", "grounding", 0.49)
    assert low.detail.startswith("only 49% of the answer's claims are supported")
    assert low_grounding(0.5, min_grounding=0.5, on_low="refuse") is None
    assert low_grounding(0.1, min_grounding=0.5, on_low="flag") is None


def test_the_names_rule_looks_for_names_only_when_on_and_not_close_in_meaning() -> None:
    question = "What is the currency of Japan?"
    on = {"named_floor": 0.5, "answerable_dense": 0.5}
    assert names_to_check(question, dense_best=0.49, **on) == ["japan"]
    assert names_to_check(question, dense_best=0.5, **on) == []
    assert names_to_check(question, named_floor=0.0, dense_best=0.0, answerable_dense=0.5) == []
    assert names_to_check("what is a functional currency?", dense_best=0.0, **on) == []


def test_unnamed_refuses_when_too_few_names_are_mentioned() -> None:
    names = ["bern", "switzerland"]
    # half of them mentioned: enough at a floor of 0.5, not above it
    assert unnamed(names, ["bern"], named_floor=0.5, answered=0.8) is None
    refused = unnamed(names, ["bern"], named_floor=0.51, answered=0.8)
    assert refused is not None
    assert (refused.reason, refused.check, refused.best_score) == ("not_answerable", "names", 0.8)
    assert refused.detail == (
        "the question asks about bern, which the documents the answer cites never mention"
    )
    assert unnamed(names, [], named_floor=1.0, answered=None) is None


@pytest.mark.slow  # loads both judges, twice
def test_engines_built_from_one_set_of_models_share_them(tmp_path: Path) -> None:
    from ragstream.operators.answer_judge import BUNDLED_ANSWER_JUDGE
    from ragstream.operators.judge import BUNDLED
    from ragstream.query import pipelines
    from ragstream.query.engine import QueryEngine
    from ragstream.query.models import QueryModels
    from ragstream.query.retrieve import Retriever

    # the shipped models by another path: "bundled" (or its own path) is one copy a process
    (tmp_path / "judge").symlink_to(BUNDLED, target_is_directory=True)
    (tmp_path / "answer_judge").symlink_to(BUNDLED_ANSWER_JUDGE, target_is_directory=True)
    query = QuerySettings(
        judge=str(tmp_path / "judge"),
        answerable=AnswerableSettings(judge=str(tmp_path / "answer_judge")),
        log_queries=False,
    )
    settings = Settings(data_dir=tmp_path / "data", query=query)
    retriever = cast(Retriever, object())  # the constructor only keeps it
    models = QueryModels.load(settings)
    assert models.answer_judge is not None and models.support_judge is not None
    assert models.decision is not None  # the fitted one beside the answer judge
    first, second = (
        QueryEngine(settings, retriever, models),
        QueryEngine(settings, retriever, models),
    )
    for name in ("reranker", "support_judge", "answer_judge", "decision"):
        assert getattr(first, name) is getattr(second, name) is getattr(models, name)
    assert QueryEngine(settings, retriever, first.models).answer_judge is models.answer_judge
    own = QueryEngine(settings, retriever)  # no models given: it loads its own
    assert own.answer_judge is not models.answer_judge
    assert own.support_judge is not models.support_judge
    # the order in which an answer's stages run, and so its refusals apply
    stages = [stage.name for stage in pipelines.ANSWER]
    assert stages == ["rank", "answerable", "generate", "cite", "names"]
