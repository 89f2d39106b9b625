"""The trained answer judge (operators/answer_judge.py): the shipped artifact, what it
reads, and how the answer path uses it (the answerability decision, and the extractive
answer that leads with the sentence it reads as holding the answer)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import xxhash

from ragstream.core.errors import ModelUnavailableError
from ragstream.operators.answer_judge import (
    ANSWER_JUDGE_FILE,
    BUNDLED_ANSWER_JUDGE,
    AnswerJudge,
    bundled_answer_judge,
    load_answer_judge,
    passage,
)
from ragstream.query.answerable import Asked, Limits, judge
from tests.unit.query.test_answerable import chunk, corpus_freqs

# Questions and sentences from outside SQuAD (the judge trained on its train articles only):
# (question, the sentence that answers it, a sentence on the same topic that does not)
CASES = [
    (
        "When was the observatory closed to visitors?",
        "The observatory was closed to visitors in the winter of 1932.",
        "The observatory has a large refracting telescope and a small library.",
    ),
    (
        "What does the hybrid chunker do with oversized chunks?",
        "The hybrid chunker splits chunks that exceed the tokenizer's token limit.",
        "The hybrid chunker is one of several chunkers docling provides.",
    ),
    (
        "How many people live in Lyon?",
        "About 520,000 people live in Lyon, the third-largest city of France.",
        "Lyon is known for its cuisine and its silk industry.",
    ),
    (
        "Who designed the first steam locomotive?",
        "Richard Trevithick designed the first working steam locomotive in 1804.",
        "Steam locomotives were used on railways for over a century.",
    ),
]


@pytest.fixture(scope="module")
def answer_judge() -> AnswerJudge:
    return bundled_answer_judge()


def test_the_shipped_artifact_is_small_versioned_and_from_train_articles() -> None:
    meta = json.loads((BUNDLED_ANSWER_JUDGE / ANSWER_JUDGE_FILE).read_text())
    model = (BUNDLED_ANSWER_JUDGE / "model.onnx").read_bytes()
    assert meta["version"] == "answer-judge-" + xxhash.xxh64(model).hexdigest()[:12]
    assert len(model) <= 20 * 2**20
    assert meta["labels"] == ["no_answer", "answer"]
    assert "train articles only" in meta["data"]["split"]
    assert "CC BY-SA 4.0" in meta["data"]["licence"]
    assert meta["command"] == "make answer-judge"
    assert meta["training"]["config"]["seed"] == 13
    assert meta["training"]["held_auc_onnx"] > 0.7  # the held-out articles' pairs


def test_the_sentence_that_answers_reads_above_the_one_that_does_not(
    answer_judge: AnswerJudge,
) -> None:
    pairs = [(q, passage("", s)) for q, yes, no in CASES for s in (yes, no)]
    holds = answer_judge.holds(pairs)
    assert holds.shape == (2 * len(CASES),)
    assert np.all((holds >= 0.0) & (holds <= 1.0))
    answers, near = holds[0::2], holds[1::2]
    assert (answers > near).sum() >= len(CASES) - 1, holds
    assert answer_judge.holds([]).shape == (0,)


def test_a_huge_pair_is_truncated_not_fatal(answer_judge: AnswerJudge) -> None:
    assert answer_judge.holds([("question? " * 5_000, "word " * 50_000)]).shape == (1,)


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableError, match="answer judge"):
        AnswerJudge(tmp_path)


def test_answer_judge_specs() -> None:
    assert load_answer_judge("none") is None and load_answer_judge(None) is None
    assert load_answer_judge("bundled") is bundled_answer_judge()
    assert isinstance(load_answer_judge(str(BUNDLED_ANSWER_JUDGE)), AnswerJudge)


def test_the_decision_reads_the_judge_and_finds_the_answering_sentence(
    answer_judge: AnswerJudge,
) -> None:
    question, yes, no = CASES[0]
    chunks = [chunk(f"{no} The staff lived nearby."), chunk(f"It is old. {yes}")]
    freqs = corpus_freqs([c.text for c in chunks])
    verdict, evidence = judge(Asked(question, chunks, freqs), scorer=answer_judge)
    assert evidence and chunks[evidence[0].chunk].text[evidence[0].start :].startswith(yes)
    assert verdict.signals["judge_best"] == round(max(e.answers for e in evidence), 4)
    assert [e.order for e in evidence] == sorted((e.order for e in evidence), reverse=True)
    assert verdict.signals["judge_second"] <= verdict.signals["judge_best"]
    near, _ = judge(Asked(question, chunks[:1], freqs), scorer=answer_judge)
    assert near.signals["judge_best"] < verdict.signals["judge_best"]


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    from ragstream.operators.embed import load_embedder

    return load_embedder("minilm-l6")


def test_the_extractive_answer_leads_with_the_judges_first_sentence(embedder) -> None:
    from ragstream.query.generate import ExtractiveGenerator
    from tests.unit.query.test_generate_verify import make_context

    texts = [
        "Mercury is the working fluid in the mercury vapor turbine. Turbines spin fast.",
        "Most steam engines use water as their working fluid. Water is cheap and safe.",
    ]
    ctx = make_context(texts, "What is the working fluid of a steam engine?")
    judged = ExtractiveGenerator(embedder, judged=True)
    ordered = dataclasses.replace(
        ctx,
        evidence=[
            "Most steam engines use water as their working fluid.",
            "Mercury is the working fluid in the mercury vapor turbine.",
        ],
    )
    answer = judged.generate("What is the working fluid of a steam engine?", ordered)
    assert answer.startswith("Most steam engines use water as their working fluid [S2].")
    assert answer.endswith("Mercury is the working fluid in the mercury vapor turbine [S1].")
    # nothing read as holding the answer: no answer at all (the engine refuses)
    assert judged.generate("What is the working fluid?", ctx) == ""
    # a sentence the judge read that is not in the sources is never copied
    absent = dataclasses.replace(ctx, evidence=["Not in any source at all, surely not."])
    assert judged.generate("What is the working fluid?", absent) == ""
    # without a judge, the sentences nearest in meaning, best first
    plain = ExtractiveGenerator(embedder).generate("What is the working fluid?", ctx)
    assert plain.count("[S") >= 1


def test_a_question_the_documents_never_use_a_word_of_is_not_answerable(
    answer_judge: AnswerJudge,
) -> None:
    _, yes, no = CASES[0]
    chunks = [chunk(yes), chunk(no)]
    freqs = corpus_freqs([c.text for c in chunks])
    for question in ("ハイブリッドチャンカーとは何ですか?", "Wie spät ist es in Lissabon?"):
        verdict, _ = judge(Asked(question, chunks, freqs, 0.3), Limits(0.0, 0.5), answer_judge)
        assert not verdict.answerable, verdict.signals
    # the same question close in meaning to a chunk (another language, say) is left to judge
    near, _ = judge(Asked("Wie spät ist es in Lissabon?", chunks, freqs, 0.6), Limits(0.0, 0.5))
    assert near.answerable
