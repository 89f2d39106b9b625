"""One calibrated answerability decision from all the signals.

Each answerability signal alone separates "the sources answer the question" from "they are
only near it" poorly (held-out SciFact train claims, gold documents removed: ROC AUC 0.61
for the trained judge, 0.64 for the best dense cosine, 0.68 for term coverage). Together
they do better. So the decision is a logistic regression over them, fitted on the train
split (`ragstream.train.decision`, `make decision`). Its output is a probability that the
question is answerable from what was retrieved, and the floor is the one that keeps 90 % of
the held-out answerable questions answered. Two overrides answer whatever the probability
says: a sentence the judge reads as answering at the floor rule's judge floor
(`Decision.judge_override`), and a best dense cosine above a fitted value
(`Decision.dense_override`). The fitted model is a small JSON file shipped
beside the judge it was fitted with (`operators/judge_model/decision.json`).

Every feature must mean the same on any corpus: a probability, a cosine, shares of the
question's terms. Raw BM25 scores depend on the corpus and are left out. So are the leg
leads (`leg_leads`: how far each leg's best score stands above its typical candidate).
With them the decision fitted on SciFact train answered 93.3 % of the test questions and
refused 23.3 % of their gold-removed copies (without: 90.7 % / 22.7 %). But their scale
follows the corpus: on the shared docs index, off-topic questions get leads far above any
SciFact question, and a decision that read them answered 7 of 60 off-topic questions
instead of 2. They are recorded as signals and decide nothing. Pure functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragstream.core.errors import ModelUnavailableError

DECISION_FILE = "decision.json"
# the signals the decision reads, in order; `judge_best` enters as its logarithm (the judge
# is confident in both directions: 0.001 and 0.01 are as different as 0.1 and 1)
FEATURES = (
    "judge_best",
    "dense_best",
    "coverage_best",
    "coverage_union",
)
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


def features(signals: Mapping[str, float]) -> list[float]:
    """The decision's inputs from the recorded signals (a missing signal reads as 0, a
    missing lead as 1: no evidence either way)."""
    row = []
    for name in FEATURES:
        value = float(signals.get(name, 1.0 if name.endswith("_lead") else 0.0))
        row.append(math.log(value + 1e-3) if name == "judge_best" else value)
    return row


@dataclass(frozen=True)
class Decision:
    """A fitted logistic regression over `FEATURES` (standardized), and its floor."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    floor: float
    judge: str  # the judge version it was fitted with: another judge needs its own fit
    # a best dense cosine this high answers whatever the probability: the judge, trained on
    # scientific claims, reads other domains' questions poorly ("What temperature for green
    # tea?" against "Green tea is steeped at 80 degrees": cosine 0.79, judge 0.01). Fitted as
    # the lowest value that refuses no fewer gold-removed fit questions than no override
    dense_override: float = 1.01
    # a sentence the judge reads as answering this surely answers whatever the other
    # signals say (the floor rule's judge floor, chosen on the same claims): on a small
    # index of terse documents, term coverage is low for a question the judge reads as
    # answered ("how are deleted files handled?" over the demo samples: judge 0.67,
    # coverage 0.30). The probability decides where the judge is unsure
    judge_override: float = 1.01
    # the slug of the embedder whose cosines it was fitted on ("" = not recorded): the dense
    # weight and override mean that embedder's cosines, and another one's run higher or
    # lower (a tuned embedder's: answered 93.0 % / refused 19.0 % of SciFact test against
    # 90.3 % / 25.0 % refitted; README, issue 16)
    embedder: str = ""

    def answers(self, signals: Mapping[str, float], floor: float | None = None) -> bool:
        """The decision: the judge's override, or probability at least the floor (this one,
        or `floor`), or the dense override."""
        enough = self.floor if floor is None else floor
        return (
            signals.get("judge_best", 0.0) >= self.judge_override
            or self.probability(signals) >= enough
            or signals.get("dense_best", 0.0) >= self.dense_override
        )

    def probability(self, signals: Mapping[str, float]) -> float:
        """P(the retrieved text answers the question), as fitted on the train split."""
        z = self.bias + sum(
            w * (x - m) / s
            for w, x, m, s in zip(
                self.weights, features(signals), self.mean, self.scale, strict=True
            )
        )
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def to_json(self) -> dict[str, object]:
        return {
            "features": list(FEATURES),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
            "floor": self.floor,
            "dense_override": self.dense_override,
            "judge_override": self.judge_override,
            "judge": self.judge,
            "embedder": self.embedder,
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
        "index into a copy of the judge directory (python -m ragstream.train.decision DATASET "
        "--data-dir D --judge COPY) and set query.judge to the copy"
    )


def load_decision(model_dir: Path | str) -> Decision | None:
    """The decision fitted for the judge in `model_dir`, or None when it has none (the
    engine then uses the floor rule). A file that does not fit this code is an error."""
    path = Path(model_dir) / DECISION_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        if tuple(raw["features"]) != FEATURES:
            raise ValueError(f"fitted on features {raw['features']}, this code reads {FEATURES}")
        return Decision(
            mean=tuple(raw["mean"]),
            scale=tuple(raw["scale"]),
            weights=tuple(raw["weights"]),
            bias=float(raw["bias"]),
            floor=float(raw["floor"]),
            judge=str(raw["judge"]),
            dense_override=float(raw.get("dense_override", 1.01)),
            judge_override=float(raw.get("judge_override", 1.01)),
            embedder=str(raw.get("embedder", "")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelUnavailableError(
            f"cannot read the answerability decision {path}: {exc}"
        ) from exc
