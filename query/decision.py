"""One calibrated answerability decision from the answer judge and the index's signals.

Each signal alone separates "the sources answer the question" from "they are only near it"
imperfectly: the answer judge's best reading (does a retrieved sentence hold the answer?),
the best dense cosine, the share of the question's terms the best chunk holds. The
decision is a logistic regression over the signals that earn their place, fitted on the
train splits of several question sets asked through the engine (`ragstream.train.decision`,
`make decision`): questions whose answer is in the index against every kind that is not
(the same questions with their gold text taken out, questions written to look answerable,
questions about other subjects, conversational turns the documents do not answer). Its
output is a probability that the question is answerable from what was retrieved; its floor
is the one that keeps 90 % of the fit's answerable questions answered. Two overrides
answer whatever the probability says: an answer judge reading at least
`Decision.judge_override`, and a best dense cosine at least `Decision.dense_override`
(1.01: off). The fitted model is a small JSON file shipped
beside the answer judge it was fitted with (`operators/answer_judge_model/decision.json`)
and names the signals it reads.

A question asked after earlier turns of a conversation is read by the decision's
`conversation` member where the file has one (`Decision.reading`): its signals are those of
the effective question, a follow-up carrying terms of the turns before it, which the answer
judge reads less surely than a question a person wrote whole. The engine records how many
earlier user turns a question was asked after (`HISTORY`, `asked_after`), so a replay of
recorded signals reads each question with the decision the engine used.

Every signal it may read (`SIGNALS`) means the same on any corpus: a probability, a
cosine, shares of the question's terms. Raw BM25 scores and the legs' leads
(`leg_leads`) follow the corpus's scale; they are recorded as signals and decide nothing.
Pure functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragstream.core.answers import ChatMessage
from ragstream.core.errors import ModelUnavailableError

DECISION_FILE = "decision.json"
# the signals a decision may read; `judge_best` enters as its logarithm (the judge is
# confident in both directions: 0.001 and 0.01 are as different as 0.1 and 1)
SIGNALS = (
    "judge_best",
    "judge_second",
    "judge_top",
    "dense_best",
    "coverage_best",
    "coverage_union",
    "answer_type_match",
    "named_coverage",
)
FEATURES = ("judge_best", "dense_best", "coverage_best", "coverage_union")  # the default fit
# the recorded signal that routes a question to the conversation's decision: how many earlier
# user turns it was asked after (0: a question alone)
HISTORY = "history_turns"
LEAD_TAIL = (5, 50)  # a leg's "typical candidate": its ranks 6..50 in the fused pool


def leg_leads(pool: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """How far each leg's best score stands above that leg's typical candidate (its best
    score over the mean of its ranks 6..50 among the fused candidates `pool`); 1.0 when a leg
    returned too few to tell.

    A question whose answer is in the index usually has one chunk that stands out. Text
    that is only on the same topic gives a flat list.

    >>> leg_leads([{"dense": 0.8, "lexical": 20.0}] + [{"dense": 0.4, "lexical": 10.0}] * 9)
    {'dense_lead': 2.0, 'lexical_lead': 2.0}
    >>> leg_leads([{"dense": 0.5}])
    {'dense_lead': 1.0, 'lexical_lead': 1.0}
    """
    out = {}
    first, last = LEAD_TAIL
    for leg in ("dense", "lexical"):
        values = sorted((s[leg] for s in pool if leg in s), reverse=True)[:last]
        tail = values[first:]
        mean = sum(tail) / len(tail) if tail else 0.0
        out[f"{leg}_lead"] = round(values[0] / mean, 4) if tail and mean > 0 else 1.0
    return out


def asked_after(history: Sequence[ChatMessage]) -> dict[str, float]:
    """The `HISTORY` signal of a question asked after the messages `history`.

    >>> asked_after([ChatMessage(role="user", content="a"), ChatMessage(role="assistant",
    ...     content="b"), ChatMessage(role="user", content="c")])
    {'history_turns': 2.0}
    """
    return {HISTORY: float(sum(m.role == "user" for m in history))}


def in_conversation(signals: Mapping[str, float]) -> bool:
    """Whether the recorded `signals` are of a question asked after earlier user turns.

    >>> in_conversation({HISTORY: 1.0}), in_conversation({})
    (True, False)
    """
    return signals.get(HISTORY, 0.0) > 0


def features(signals: Mapping[str, float], names: Sequence[str] = FEATURES) -> list[float]:
    """The decision's inputs `names` from the recorded signals (a missing signal reads as
    0: no evidence either way)."""
    row = []
    for name in names:
        value = float(signals.get(name, 0.0))
        row.append(math.log(value + 1e-3) if name.startswith("judge_") else value)
    return row


@dataclass(frozen=True)
class Decision:
    """A fitted logistic regression over `features` (standardized), and its floor."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    floor: float
    judge: str  # the judge version it was fitted with: another judge needs its own fit
    features: tuple[str, ...] = FEATURES  # the signals it reads, in order (of `SIGNALS`)
    # a best dense cosine this high answers whatever the probability (1.01: never): fitted
    # as the lowest value that refuses no fewer of the fit's unanswerable questions
    dense_override: float = 1.01
    # a sentence the answer judge reads as holding the answer this surely answers whatever
    # the other signals say (1.01: never); the probability decides where the judge is unsure
    judge_override: float = 1.01
    # the question's terms must be found: the best chunk covers at least `coverage_floor` of
    # their IDF weight, or its dense cosine reaches `coverage_dense` (text that holds few of
    # the question's words and is not close in meaning is about something else, however
    # surely the judge reads a sentence of it). Fitted as the strictest pair that costs no
    # answerable question of the fit; 0.0 / 1.01: off
    coverage_floor: float = 0.0
    coverage_dense: float = 1.01
    # the slug of the embedder whose cosines it was fitted on ("" = not recorded): the dense
    # weight and override mean that embedder's cosines, and another one's run higher or lower
    embedder: str = ""
    # the decision a question asked after earlier turns reads (`reading`); None: this one
    conversation: Decision | None = None

    def reading(self, signals: Mapping[str, float]) -> Decision:
        """The decision that reads `signals`: the `conversation` member for a question asked
        after earlier user turns (`HISTORY` > 0) where there is one, else this one."""
        if self.conversation is not None and in_conversation(signals):
            return self.conversation
        return self

    def answers(self, signals: Mapping[str, float], floor: float | None = None) -> bool:
        """The decision (`reading`'s): the question's terms found (`coverage_floor`), and
        then the judge's override, or probability at least the floor (its own, or `floor`),
        or the dense override."""
        own = self.reading(signals)
        if own is not self:
            return own.answers(signals, floor)
        enough = self.floor if floor is None else floor
        dense = signals.get("dense_best", 0.0)
        found = signals.get("coverage_best", 1.0) >= self.coverage_floor or (
            dense >= self.coverage_dense
        )
        return found and (
            signals.get("judge_best", 0.0) >= self.judge_override
            or self.probability(signals) >= enough
            or dense >= self.dense_override
        )

    def probability(self, signals: Mapping[str, float]) -> float:
        """P(the retrieved text answers the question), as fitted on the train split (by
        `reading`'s decision)."""
        own = self.reading(signals)
        if own is not self:
            return own.probability(signals)
        z = self.bias + sum(
            w * (x - m) / s
            for w, x, m, s in zip(
                self.weights,
                features(signals, self.features),
                self.mean,
                self.scale,
                strict=True,
            )
        )
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def to_json(self) -> dict[str, object]:
        member = {} if self.conversation is None else {"conversation": self.conversation.to_json()}
        return {
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
            "floor": self.floor,
            "dense_override": self.dense_override,
            "judge_override": self.judge_override,
            "coverage_floor": self.coverage_floor,
            "coverage_dense": self.coverage_dense,
            "judge": self.judge,
            "embedder": self.embedder,
            **member,
        }


def embedder_mismatch(fitted: str, live: str | None, judge: Path | str) -> str | None:
    """A warning when the decision was fitted on another embedder's cosines than the live
    one's, else None (also when either is unknown).

    >>> embedder_mismatch("minilm-384-1", "minilm-384-1", "J") is None
    True
    >>> print(embedder_mismatch("minilm-384-1", "tuned-384-2", "J"))  # doctest: +ELLIPSIS
    the answerability decision in J was fitted on minilm-384-1's cosines; ... tuned-384-2, ...
    """
    if not fitted or not live or fitted == live:
        return None
    return (
        f"the answerability decision in {judge} was fitted on {fitted}'s cosines; the live "
        f"embedder is {live}, whose cosines it may read too high or too low: refit it on this "
        "index into a copy of the answer judge directory (python -m ragstream.train.decision "
        "DATASET --data-dir D --judge COPY) and set query.answerable.judge to the copy"
    )


def load_decision(model_dir: Path | str) -> Decision | None:
    """The decision fitted for the judge in `model_dir`, or None when it has none (the
    engine then uses the floor rule). A file that does not fit this code is an error."""
    path = Path(model_dir) / DECISION_FILE
    if not path.exists():
        return None
    try:
        return _from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelUnavailableError(
            f"cannot read the answerability decision {path}: {exc}"
        ) from exc


def _from_json(raw: dict[str, object]) -> Decision:
    """The decision `to_json` wrote (its conversation member included)."""
    names = [str(f) for f in raw["features"]]  # type: ignore[attr-defined]
    unknown = [f for f in names if f not in SIGNALS]
    if unknown:
        raise ValueError(f"it reads signals {unknown} this code does not compute ({SIGNALS})")
    member = raw.get("conversation")

    def numbers(key: str) -> tuple[float, ...]:
        return tuple(float(v) for v in raw[key])  # type: ignore[attr-defined]

    def number(key: str, default: float | None = None) -> float:  # None: required
        return float(raw[key] if default is None else raw.get(key, default))  # type: ignore[arg-type]

    return Decision(
        mean=numbers("mean"),
        scale=numbers("scale"),
        weights=numbers("weights"),
        bias=number("bias"),
        floor=number("floor"),
        judge=str(raw["judge"]),
        features=tuple(names),
        dense_override=number("dense_override", 1.01),
        judge_override=number("judge_override", 1.01),
        coverage_floor=number("coverage_floor", 0.0),
        coverage_dense=number("coverage_dense", 1.01),
        embedder=str(raw.get("embedder", "")),
        conversation=_from_json(member) if isinstance(member, dict) else None,
    )
