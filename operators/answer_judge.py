"""The answer judge: does this sentence hold the answer to this question?

A 3-layer MiniLM cross-encoder this project trains (`make answer-judge`,
`ragstream.train.answer_judge`) on question–sentence pairs from the train articles of
SQuAD 2.0 (CC BY-SA 4.0): a question against the sentence that holds its answer, against
the other sentences of its paragraph and of its article, and against the sentences of
paragraphs that were written to look like they answer it but do not. Shipped as int8 ONNX
(`operators/answer_judge_model/`), run with onnxruntime and `tokenizers` (no torch).

It answers one question, not the support judge's (operators/judge.py: does a sentence say
what a claim says). The answerability decision and the extractive answer read this one;
claim verification reads that one. Each pair is (question, `passage(title, sentence)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ragstream.operators.judge import SupportJudge, load_model, model_dir

BUNDLED_ANSWER_JUDGE = Path(__file__).resolve().parent / "answer_judge_model"
ANSWER_JUDGE_FILE = "answer_judge.json"


def passage(title: str, sentence: str) -> str:
    """The passage side of a pair: the document's title, then the sentence ("It was
    founded in 1636" does not say what "it" is; the title does).

    >>> passage("Harvard University", "It was founded in 1636.")
    'Harvard University: It was founded in 1636.'
    >>> passage("", "Plain.")
    'Plain.'
    """
    title = " ".join(title.split())
    return f"{title}: {sentence}" if title else sentence


class AnswerJudge(SupportJudge):
    """The trained answer judge from a model directory (model.onnx, tokenizer.json,
    answer_judge.json); scoring is memoized like the support judge's."""

    META = ANSWER_JUDGE_FILE
    WHAT = "the answer judge"

    def holds(self, pairs: Sequence[tuple[str, str]]) -> Any:
        """P(the passage holds the answer) per (question, passage) pair, shape (n,)."""
        return self.probabilities(pairs)[:, 1]


@cache
def bundled_answer_judge() -> AnswerJudge:
    """The shipped answer judge, loaded once per process."""
    return AnswerJudge(BUNDLED_ANSWER_JUDGE)


def answer_judge_dir(spec: str | None) -> Path | None:
    """The model directory `query.answerable.judge` names, without loading it."""
    return model_dir(spec, BUNDLED_ANSWER_JUDGE)


def load_answer_judge(spec: str | None) -> AnswerJudge | None:
    """None for "none"/"off"/""; the shipped answer judge for "bundled"; else a directory."""
    return load_model(spec, BUNDLED_ANSWER_JUDGE, bundled_answer_judge, AnswerJudge)
