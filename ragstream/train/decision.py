"""Fit the calibrated answerability decision (query/decision.py) on a BEIR *train* split.

What the decision has to tell apart: a question whose answer is in the index, and the same
question once its gold documents are gone (the case `eval --mode abstain` measures, where
all that is left is text on the same topic). For each judged train question the engine
retrieves 50 fused candidates. The judge then reads the top k twice: once as retrieved, and
once with the gold documents taken out before the cut to k. Re-indexing without them would
give the same ranking, far more slowly. Only the claims the judge never trained on are used
(`judge_data.is_holdout`): the judge's scores on its own training claims would flatter it.

The signals of both readings (`query.decision.FEATURES`) are the inputs of a logistic
regression with an L2 penalty, solved by Newton's method in numpy. A judge score of at
least the floor rule's judge floor (0.65) answers on its own; the probability's floor is
the one that, with that override, keeps `keep` (90 %) of the answerable questions
answered; the dense override is the lowest best cosine that, answering on its own, refuses
no fewer of the gold-removed questions. The result,
with its figures and the embedder whose cosines it read, is written as `decision.json`
beside the judge:

    .venv/bin/python -m ragstream.train.decision ../shared/data/scifact --data-dir D
    make decision          # D = $(TUNE_DIR), indexed on first use

Deterministic: the same index, judge and split give the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragstream import api
from ragstream.core.answers import QueryRequest, RetrievedChunk
from ragstream.eval.beir import doc_key, index_corpus, load_beir
from ragstream.operators.judge import BUNDLED, SupportJudge, load_judge
from ragstream.query.answerable import judge
from ragstream.query.decision import DECISION_FILE, Decision, features, leg_leads
from ragstream.train.judge_data import is_holdout

KEEP = 0.90  # answerable questions the fitted floor keeps answered (issue 16's target)
POOL = 50  # fused candidates per question: the pool the engine measures leg leads on
L2 = 1.0  # ridge penalty on the standardized weights: ~240 rows, 4 features
# the floor rule's judge floor (`query.judge_floor`, chosen on the same claims): a sentence
# the judge reads as answering this surely answers, and the probability decides the rest
JUDGE_OVERRIDE = 0.65


@dataclass(frozen=True)
class Reading:
    """One question's signals with its gold documents in the index and without them."""

    qid: str
    present: dict[str, float]
    absent: dict[str, float]
    gold_in_top: bool = False  # a gold document is among the k chunks read as retrieved


def collect(
    dataset_dir: Path,
    data_dir: Path,
    split: str = "train",
    *,
    k: int = 8,
    scorer: SupportJudge | None = None,
    holdout_only: bool = True,
) -> list[Reading]:
    """Both readings of every judged question of `split` (train: only held-out claims)."""
    corpus, queries, qrels = load_beir(dataset_dir, split)
    judged = [q for q in queries if q in qrels]
    if split == "train" and holdout_only:
        judged = [q for q in judged if is_holdout(int(q))]
    index_corpus(corpus, data_dir)
    scorer = scorer or load_judge("bundled")
    out = []
    settings = api.load_settings(data_dir)
    # the signals only: no decision file is read (the one being fitted may not exist yet)
    query = settings.query.model_copy(update={"decision": "rule"})
    with api.open_engine(settings.model_copy(update={"query": query})) as (engine, _):
        lexical, vectors = engine.retriever.lexical, engine.retriever.vectors

        def signals(question: str, pool: Sequence[RetrievedChunk]) -> dict[str, float]:
            top = pool[:k]
            found = {c.point_id: c for c in vectors.get([r.point_id for r in top])}
            chunks = [found[r.point_id] for r in top if r.point_id in found]
            dense = max((r.scores.get("dense", 0.0) for r in top), default=0.0)
            leads = leg_leads([r.scores for r in pool])
            verdict, _ = judge(
                question, chunks, lexical.doc_freqs, 0.0, dense, scorer=scorer, extra=leads
            )
            return dict(verdict.signals)

        for qid in judged:
            gold = {d for d, rel in qrels[qid].items() if rel > 0}
            asked = QueryRequest(query=queries[qid], k=POOL, generate=False)
            pool = engine.retrieve(asked).results
            rest = [r for r in pool if doc_key(r.doc_id) not in gold]
            in_top = any(doc_key(r.doc_id) in gold for r in pool[:k])
            out.append(
                Reading(qid, signals(queries[qid], pool), signals(queries[qid], rest), in_top)
            )
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-penalized logistic regression (Newton's method; the bias
    is not penalized).

    >>> x = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0.0, 0.0, 1.0, 1.0])
    >>> w, b = fit_logistic(x, y, l2=0.1)
    >>> bool(w[0] > 0), round(float(-b / w[0]), 2)
    (True, 1.5)
    """
    design = np.hstack([x, np.ones((len(x), 1))])
    theta = np.zeros(design.shape[1])
    penalty = np.eye(design.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-design @ theta))
        gradient = design.T @ (p - y) + penalty @ theta
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(theta)), gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return theta[:-1], float(theta[-1])


def fit_decision(
    readings: Sequence[Reading],
    judge_version: str,
    keep: float = KEEP,
    judge_override: float = JUDGE_OVERRIDE,
    embedder: str = "",
) -> Decision:
    """The decision fitted on `readings`. With the judge's override in place, the floor is
    the highest probability that keeps `keep` of the answerable ones answered. The dense
    override is the lowest cosine that, answering on its own, refuses no fewer
    gold-removed ones."""
    x = np.array([features(r.present) for r in readings] + [features(r.absent) for r in readings])
    y = np.array([1.0] * len(readings) + [0.0] * len(readings))
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    weights, bias = fit_logistic((x - mean) / scale, y)
    unfloored = Decision(
        tuple(mean.round(6)), tuple(scale.round(6)), tuple(weights.round(6)), round(bias, 6),
        0.0, judge_version, judge_override=judge_override, embedder=embedder,
    )  # fmt: skip
    floored = unfloored
    for p in sorted({round(unfloored.probability(r.present) - 1e-6, 6) for r in readings}):
        candidate = dataclasses.replace(unfloored, floor=p)
        if rates(readings, candidate)[0] < keep:
            break
        floored = candidate
    refused = rates(readings, floored)[1]
    for override in np.arange(0.50, 1.0, 0.01):  # the lowest that costs no refusal
        candidate = dataclasses.replace(floored, dense_override=round(float(override), 2))
        if rates(readings, candidate)[1] >= refused:
            return candidate
    return floored


def rates(readings: Sequence[Reading], decision: Decision) -> tuple[float, float]:
    """(answerable answered, gold-removed refused) under `decision`."""
    kept = sum(decision.answers(r.present) for r in readings)
    refused = sum(not decision.answers(r.absent) for r in readings)
    return kept / len(readings), refused / len(readings)


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """ROC AUC of a score: P(a random positive scores above a random negative), ties half.

    >>> auc([0.9, 0.8], [0.1, 0.2]), auc([0.5], [0.5]), auc([0.1], [0.9, 0.2])
    (1.0, 0.5, 0.0)
    """
    if not positives or not negatives:
        raise ValueError("auc needs at least one positive and one negative")
    above = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return above / (len(positives) * len(negatives))


def ceiling(
    evidence: Sequence[float],
    unsupported: Sequence[float],
    absent: Sequence[float],
    keep: float = KEEP,
) -> tuple[float, float]:
    """How far a floor on one score can go when the answerable questions are of two kinds:
    those whose gold text holds evidence (`evidence`) and those whose gold text does not
    (`unsupported`: SciFact's not-enough-info claims, which BEIR's qrels still count as
    answerable). Grant every evidence question an answer, the best case; answering `keep`
    of all answerable questions then needs some unsupported ones answered, the highest
    scoring first. Returns (the share of unsupported questions that must be answered, the
    share of gold-removed questions (`absent`) the floor that does so refuses).

    >>> ceiling([0.9] * 6, [0.5, 0.4, 0.3, 0.2], [0.45, 0.35, 0.1, 0.1], keep=0.8)
    (0.5, 0.75)
    >>> ceiling([0.9] * 9, [0.1], [0.2], keep=0.9)
    (0.0, 1.0)
    """
    need = max(0, math.ceil(keep * (len(evidence) + len(unsupported)) - 1e-9) - len(evidence))
    if need == 0:
        return 0.0, 1.0
    if not unsupported or need > len(unsupported):
        raise ValueError(f"{need} unsupported answers needed, {len(unsupported)} given")
    floor = sorted(unsupported, reverse=True)[need - 1]
    refused = sum(a < floor for a in absent) / len(absent)
    return need / len(unsupported), refused


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--judge", type=Path, default=BUNDLED, help="the judge's model directory")
    ap.add_argument("--keep", type=float, default=KEEP)
    args = ap.parse_args(argv)
    scorer = SupportJudge(args.judge)
    readings = collect(args.dataset, args.data_dir, "train", scorer=scorer)
    live = api.status(data_dir=args.data_dir).embedder  # whose cosines the readings hold
    decision = fit_decision(readings, scorer.version, args.keep, embedder=live.slug if live else "")
    kept, refused = rates(readings, decision)
    report = {
        **decision.to_json(),
        "fitted_on": {
            "dataset": args.dataset.name,
            "split": "train: the claims the judge never trained on (judge_data.is_holdout)",
            "questions": len(readings),
            "keep": args.keep,
        },
        "fit_figures": {
            "answerable_answered": round(kept, 4),
            "gold_removed_refused": round(refused, 4),
        },
        "command": "make decision",
    }
    (args.judge / DECISION_FILE).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
