"""The answerability decision in a conversation: a question asked after earlier turns is
read by the decision's conversation member (query/decision.py `Decision.reading`), and
the engine records how many turns came before it, on a real index with the real answer
judge (the volcano notes of the conversation tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragstream.core.answers import ChatRequest, QueryRequest
from ragstream.core.settings import Settings
from ragstream.operators.answer_judge import BUNDLED_ANSWER_JUDGE
from ragstream.query.decision import HISTORY
from ragstream.query.engine import QueryEngine
from tests.unit.query.test_conversation import (
    FOLLOW_UP,
    volcano_settings,  # noqa: F401 (the fixture)
)
from tests.unit.query.test_conversation import HISTORY as TURNS

QUESTION = TURNS[0]["content"]


def judged_by(settings: Settings, tmp_path: Path, floor: float) -> Settings:
    """`settings` with a copy of the shipped answer judge whose decision's conversation
    member has the floor `floor` (1.0: it refuses every question asked after other turns)."""
    model = tmp_path / "judge"
    shutil.copytree(BUNDLED_ANSWER_JUDGE, model)
    raw = json.loads((model / "decision.json").read_text())
    raw["conversation"] = {**raw["conversation"], "floor": floor}
    (model / "decision.json").write_text(json.dumps(raw))
    answerable = settings.query.answerable.model_copy(update={"judge": str(model)})
    query = settings.query.model_copy(update={"answerable": answerable})
    return settings.model_copy(update={"query": query})


def test_a_follow_up_is_read_by_the_conversation_member_and_a_question_alone_is_not(
    volcano_settings: Settings,  # noqa: F811
    tmp_path: Path,
) -> None:
    follow_up = [*TURNS, {"role": "user", "content": FOLLOW_UP}]
    with QueryEngine.open(judged_by(volcano_settings, tmp_path / "shut", 1.0)) as shut:
        refused = shut.chat(ChatRequest.model_validate({"messages": follow_up}))
        alone = shut.answer(QueryRequest(query=QUESTION))
        first = shut.chat(ChatRequest.model_validate({"messages": TURNS[:1]}))
    assert refused.refusal is not None and refused.refusal.reason == "not_answerable"
    assert refused.answerability is not None
    assert refused.answerability.signals[HISTORY] == 1.0
    assert refused.answerability.floor == 1.0  # the member's floor, not the decision's
    for answer in (alone, first):  # no earlier turn: the decision itself reads it
        assert answer.refusal is None, answer.refusal
        assert answer.answerability is not None
        assert answer.answerability.signals[HISTORY] == 0.0
        assert answer.answerability.floor < 1.0
    with QueryEngine.open(judged_by(volcano_settings, tmp_path / "open", 0.0)) as open_:
        answered = open_.chat(ChatRequest.model_validate({"messages": follow_up}))
    assert answered.refusal is None, answered.refusal
    assert "1,281" in answered.text


@pytest.mark.parametrize("floor", [None, 0.999])
def test_a_floor_set_in_settings_holds_in_a_conversation_too(
    volcano_settings: Settings,  # noqa: F811
    floor: float | None,
) -> None:
    answerable = volcano_settings.query.answerable.model_copy(update={"decision_floor": floor})
    query = volcano_settings.query.model_copy(update={"answerable": answerable})
    follow_up = [*TURNS, {"role": "user", "content": FOLLOW_UP}]
    with QueryEngine.open(volcano_settings.model_copy(update={"query": query})) as engine:
        answer = engine.chat(ChatRequest.model_validate({"messages": follow_up}))
    assert answer.answerability is not None
    if floor is None:  # the shipped member's own floor answers the follow-up
        assert answer.refusal is None and "1,281" in answer.text
    else:
        assert answer.answerability.floor == floor and answer.refusal is not None
