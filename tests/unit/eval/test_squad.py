"""SQuAD 2.0-format question sets (ragstream/eval/squad.py), the answer judge's training
pairs built from them (ragstream/train/answer_judge_data.py), and the pure figures of the
SQuAD answer evaluation (ragstream/eval/squad_eval.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.eval.squad import (
    SquadQuestion,
    contains_answer,
    f1_score,
    holds_out,
    load_squad,
    normalize_answer,
    paragraph_id,
    squad_file,
)
from ragstream.eval.squad_eval import auc, first_sentence, refused_at
from ragstream.train.answer_judge_data import (
    ANSWER,
    GOLD_REMOVED,
    NOT_ANSWER,
    answer_sentences,
    question_pairs,
)
from ragstream.train.decision import auc as pairwise_auc

SCORES = st.lists(st.floats(-5.0, 5.0, allow_nan=False), min_size=1, max_size=30)


def test_the_shared_set_splits_by_article_as_its_readme_says(squad_dir: Path) -> None:
    train, test = load_squad(squad_dir, "train"), load_squad(squad_dir, "test")
    assert (len(train.corpus), len(train.questions)) == (464, 4282)
    assert sum(q.answerable for q in train.questions) == 1994
    assert (len(test.corpus), len(test.questions)) == (182, 1796)
    assert sum(q.answerable for q in test.questions) == 916
    assert not {q.article for q in train.questions} & {q.article for q in test.questions}
    # every answerable question's gold span is in its paragraph, where SQuAD says it is
    for q in test.questions[:300]:
        text = test.corpus[q.paragraph]["text"]
        for answer, start in zip(q.answers, q.starts, strict=False):
            assert text[start : start + len(answer)] == answer
    assert set(test.qrels()) == {q.id for q in test.questions if q.answerable}


def test_a_file_a_folder_and_a_beir_folder_are_told_apart(squad_dir: Path, tmp_path: Path) -> None:
    assert squad_file(squad_dir) == squad_dir / "dev-v2.0-half.json"
    assert squad_file(squad_dir / "dev-v2.0-half.json") == squad_dir / "dev-v2.0-half.json"
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    assert squad_file(tmp_path) is None
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rows": [1, 2]}))
    assert squad_file(other) is None
    with pytest.raises(ValueError, match="not a SQuAD-format"):
        load_squad(other)
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_squad(squad_dir, "dev")
    # a user's own file with no split.json beside it is read whole, whatever the split
    mine = tmp_path / "mine" / "questions.json"
    mine.parent.mkdir()
    para = {
        "context": "Lyon is in France.",
        "qas": [
            {
                "id": "1",
                "question": "Where is Lyon?",
                "answers": [{"text": "France", "answer_start": 11}],
                "is_impossible": False,
            }
        ],
    }
    mine.write_text(json.dumps({"data": [{"title": "Lyon", "paragraphs": [para]}]}))
    whole = load_squad(mine.parent, "test")
    assert list(whole.corpus) == ["Lyon-p000"] and whole.questions[0].answers == ("France",)


def test_held_out_articles_are_a_fixed_quarter_of_train(squad_dir: Path) -> None:
    titles = json.loads((squad_dir / "split.json").read_text())["train"]
    held = [t for t in titles if holds_out(t)]
    assert 1 <= len(held) <= len(titles) // 2
    assert held == [t for t in titles if holds_out(t)]  # stable


@given(st.text(min_size=1, max_size=40), st.integers(0, 999))
def test_paragraph_ids_are_safe_file_stems(article: str, index: int) -> None:
    pid = paragraph_id(article, index)
    assert "/" not in pid and "\\" not in pid and not pid.startswith(".")
    assert pid.endswith(f"-p{index:03d}")


@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=30))
def test_a_text_holding_the_answer_contains_it(before: str, answer: str, after: str) -> None:
    if normalize_answer(answer):
        assert contains_answer(f"{before} {answer} {after}", [answer])
    assert f1_score(answer, [answer]) == (1.0 if normalize_answer(answer) else 0.0)


def test_answer_strings_are_matched_as_words() -> None:
    assert contains_answer("The Normans settled in France.", ["france"])
    assert not contains_answer("The Franconian dukes.", ["France"])
    assert first_sentence("") == ""


PARAGRAPH = {
    "title": "Steam engine",
    "text": (
        "A steam engine is a heat engine. It uses steam as its working fluid in most designs. "
        "Mercury is the working fluid in the mercury vapor turbine. "
        "Thomas Newcomen built the first commercial engine in 1712."
    ),
}


def question(text: str, answer: str = "") -> SquadQuestion:
    starts = (PARAGRAPH["text"].index(answer),) if answer else ()
    return SquadQuestion(
        "q", text, "Steam_engine", "Steam_engine-p000", (answer,) if answer else (), starts
    )


def test_pairs_take_the_answer_sentence_as_positive_and_the_rest_as_negatives() -> None:
    paragraphs = {"Steam_engine-p000": PARAGRAPH, "Steam_engine-p001": PARAGRAPH | {
        "text": "Steam engines drove the industrial revolution. Their working fluid was water."
    }}  # fmt: skip
    q = question("What is the typical working fluid of a steam engine?", "steam")
    pairs = question_pairs(q, paragraphs, list(paragraphs))
    positives = [p for p in pairs if p.label == ANSWER]
    assert [p.passage for p in positives] == [
        "Steam engine: A steam engine is a heat engine."
    ]  # the first occurrence of "steam" is where SQuAD put the span
    negatives = [p for p in pairs if p.label == NOT_ANSWER]
    assert negatives and all(
        not contains_answer(p.passage.split(": ", 1)[1], ["steam"]) for p in negatives
    )
    assert {p.kind for p in negatives} <= {"same_paragraph", "other_paragraph"}
    unanswerable = question_pairs(question("Who built the first mercury turbine?"), paragraphs, [])
    assert unanswerable and {(p.label, p.kind) for p in unanswerable} == {
        (NOT_ANSWER, "unanswerable")
    }


def test_gold_removed_negatives_follow_the_dense_ranking_and_never_hold_the_answer() -> None:
    texts = [
        "Thomas Newcomen pumped mine water with engines.",  # holds the answer
        "The first commercial steam engine was built in England.",  # words: other_paragraph
        "Commercial steam engines were built for mills.",  # words: other_paragraph
        "Engines of 1712 burned coal as their fuel.",
        "Watt improved the condenser.",
    ]
    paragraphs = {"Steam_engine-p000": PARAGRAPH} | {
        f"Steam_engine-p00{i}": PARAGRAPH | {"text": t} for i, t in enumerate(texts, 1)
    }
    q = question("Who built the first commercial steam engine?", "Thomas Newcomen")
    ranked = [f"Steam_engine-p00{i}" for i in (0, 1, 3, 5, 4, 2)]  # best first
    pairs = question_pairs(q, paragraphs, list(paragraphs), ranked)
    assert {p.passage for p in pairs if p.kind == "other_paragraph"} == {
        f"Steam engine: {t}" for t in texts[1:3]
    }
    # its own paragraph, the one holding the answer and those taken already are skipped;
    # then the best GOLD_REMOVED others, in the dense ranking's order
    assert [p.passage for p in pairs if p.kind == "gold_removed"] == [
        f"Steam engine: {t}" for t in (texts[4], texts[3])
    ][:GOLD_REMOVED]
    assert all(p.label == NOT_ANSWER for p in pairs if p.kind == "gold_removed")
    assert len({p.passage for p in pairs}) == len(pairs)
    unranked = question_pairs(q, paragraphs, list(paragraphs))  # no embedder: no ranking
    assert not [p for p in unranked if p.kind == "gold_removed"]


def test_a_span_across_a_sentence_break_gives_both_sentences() -> None:
    text = PARAGRAPH["text"]
    start = text.index("heat engine")
    span = text[start : text.index("working fluid") + len("working fluid")]
    q = SquadQuestion("q", "?", "Steam_engine", "p", (span,), (start,))
    assert answer_sentences(text, q) == [
        "A steam engine is a heat engine. It uses steam as its working fluid in most designs."
    ]


@given(SCORES, SCORES)
def test_rank_auc_equals_the_pairwise_definition(pos: list[float], neg: list[float]) -> None:
    assert auc(pos, neg) == pytest.approx(pairwise_auc(pos, neg))


@given(SCORES, SCORES, st.sampled_from([0.5, 0.8, 0.9, 1.0]))
def test_answering_more_never_refuses_more(
    pos: list[float], neg: list[float], share: float
) -> None:
    assert refused_at(pos, neg, share) >= refused_at(pos, neg, 1.0)
    assert 0.0 <= refused_at(pos, neg, share) <= 1.0
    assert refused_at(pos, [float("-inf")] * 3, share) == 1.0
