"""Fit the calibrated answerability decision (query/decision.py) on a question set's train split.

SQuAD 2.0-format sets (the default, `make decision`): the paragraphs of the train articles
the answer judge never trained on (`eval.squad.holds_out`) are indexed as files, and their
questions are asked through the engine, as users ask, with a sample of the other train
articles' questions (about subjects the index never mentions). Each answer records its
signals (`query.decision.SIGNALS`); the answerable questions are the positives; the
questions written to look answerable from their paragraph, and those about other
articles, the negatives.
The signals the decision reads are chosen by forward selection on the leave-one-article-out
ROC AUC (a signal stays only while it raises it), then a logistic regression with an L2
penalty, solved by Newton's method in numpy, is fitted on all of them. Its floor is the
highest probability that keeps `keep` (90 %) of the answerable questions answered (a
question the retrieval gate refused counts as refused); the dense override is the lowest
best cosine that, answering on its own, refuses no fewer unanswerable ones.

BEIR sets (SciFact): each held-out train claim (`judge_data.is_holdout`) is read twice,
with its gold documents among the candidates and with them taken out (`collect`).

The result, with its figures and the embedder whose cosines it read, is written as
`decision.json` beside the answer judge:

    .venv/bin/python -m ragstream.train.decision ../shared/data/squad2-half --data-dir D
    make decision          # D = $(DECISION_DIR), indexed on first use

Deterministic: the same index, judge and split give the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragstream.core.answers import QueryRequest, RetrievedChunk
from ragstream.core.settings import load_settings
from ragstream.eval import kinds
from ragstream.eval.beir import doc_key, index_corpus, load_beir
from ragstream.eval.kinds import Sets, read_kinds
from ragstream.eval.squad import holds_out, load_squad, paragraph_id, squad_file
from ragstream.eval.squad_eval import auc as rank_auc
from ragstream.operators.answer_judge import (
    BUNDLED_ANSWER_JUDGE,
    AnswerJudge,
    load_answer_judge,
)
from ragstream.query import answerable
from ragstream.query.decision import (
    DECISION_FILE,
    FEATURES,
    SIGNALS,
    Decision,
    features,
    leg_leads,
)
from ragstream.service import ingest
from ragstream.service.stores import open_engine
from ragstream.train import kinds_fit
from ragstream.train.judge_data import is_holdout

# every ELSEWHERE_STRIDE-th question of the articles the index leaves out is asked too: a
# question about a subject the documents never mention must be refused as well as one
# written to look answerable from the paragraph it was written on
ELSEWHERE_STRIDE = 6
KEEP = 0.90  # share of answerable questions the fitted floor keeps answered
POOL = 50  # fused candidates per question: the pool the engine measures leg leads on
L2 = 1.0  # ridge penalty on the standardized weights: ~240 rows, 4 features
# the floor rule's judge floor (`query.answerable.judge_floor`, chosen on the same claims): a
# sentence the judge reads as answering this surely answers, and the probability decides the
# rest
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
    scorer: AnswerJudge | None = None,
    holdout_only: bool = True,
) -> list[Reading]:
    """Both readings of every judged question of `split` (train: only held-out claims)."""
    corpus, queries, qrels = load_beir(dataset_dir, split)
    judged = [q for q in queries if q in qrels]
    if split == "train" and holdout_only:
        judged = [q for q in judged if is_holdout(int(q))]
    index_corpus(corpus, data_dir)
    scorer = scorer or load_answer_judge("bundled")
    out = []
    settings = load_settings(data_dir)
    # the signals only: no decision file is read (the one being fitted may not exist yet)
    rule = settings.query.answerable.model_copy(update={"decision": "rule"})
    query = settings.query.model_copy(update={"answerable": rule})
    with open_engine(settings.model_copy(update={"query": query})) as (engine, _):
        lexical, vectors = engine.retriever.lexical, engine.retriever.vectors

        def signals(question: str, pool: Sequence[RetrievedChunk]) -> dict[str, float]:
            top = pool[:k]
            found = {c.point_id: c for c in vectors.get([r.point_id for r in top])}
            chunks = [found[r.point_id] for r in top if r.point_id in found]
            dense = max((r.scores.get("dense", 0.0) for r in top), default=0.0)
            leads = leg_leads([r.scores for r in pool])
            asked = answerable.Asked(question, chunks, lexical.doc_freqs, dense, leads)
            verdict, _ = answerable.judge(asked, answerable.Limits(), scorer)
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


Signals = Mapping[str, float] | None  # None: the retrieval gate refused before any signal


def logistic_decision(
    answerable: Sequence[Signals],
    unanswerable: Sequence[Signals],
    judge_version: str,
    names: Sequence[str] = FEATURES,
) -> Decision:
    """The logistic regression over signals `names` (standardized), floor 0, no overrides;
    readings the gate refused (None) are left out."""
    pos = [r for r in answerable if r is not None]
    neg = [r for r in unanswerable if r is not None]
    x = np.array([features(r, names) for r in [*pos, *neg]], dtype=float).reshape(-1, len(names))
    y = np.array([1.0] * len(pos) + [0.0] * len(neg))
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    weights, bias = fit_logistic((x - mean) / scale, y)
    return Decision(
        tuple(mean.round(6)), tuple(scale.round(6)), tuple(weights.round(6)), round(bias, 6),
        0.0, judge_version, features=tuple(names),
    )  # fmt: skip


def fit_labelled(
    answerable: Sequence[Signals],
    unanswerable: Sequence[Signals],
    judge_version: str,
    names: Sequence[str] = FEATURES,
    keep: float = KEEP,
    judge_override: float = 1.01,
    embedder: str = "",
    *,
    coverage_rule: bool = False,
) -> Decision:
    """The decision over signals `names` fitted on answered (`answerable`) and refused
    (`unanswerable`) readings. With the judge's override in place, the floor is the highest
    probability that keeps `keep` of the answerable ones answered; the dense override is
    the lowest cosine that, answering on its own, refuses no fewer unanswerable ones; with
    `coverage_rule`, the strictest coverage rule that costs none of the answered ones."""
    unfloored = dataclasses.replace(
        logistic_decision(answerable, unanswerable, judge_version, names),
        judge_override=judge_override,
        embedder=embedder,
    )
    pos, neg = _readings(answerable, unfloored), _readings(unanswerable, unfloored)
    floored = unfloored
    for p in sorted({round(float(q) - 1e-6, 6) for q in pos[pos[:, 0] > -1, 0]}):
        candidate = dataclasses.replace(unfloored, floor=p)
        if _rates(pos, neg, candidate)[0] < keep:
            break
        floored = candidate
    refused = _rates(pos, neg, floored)[1]
    for override in np.arange(0.50, 1.0, 0.01):  # the lowest that costs no refusal
        candidate = dataclasses.replace(floored, dense_override=round(float(override), 2))
        if _rates(pos, neg, candidate)[1] >= refused:
            floored = candidate
            break
    return _with_coverage_rule(floored, pos, neg) if coverage_rule else floored


def _with_coverage_rule(decision: Decision, pos: np.ndarray, neg: np.ndarray) -> Decision:
    """The strictest coverage rule (most unanswerable refused) that refuses no answerable
    reading the decision answers; the decision unchanged when none refuses more."""
    answered = _rates(pos, neg, decision)[0]
    best, refused = decision, _rates(pos, neg, decision)[1]
    for cover in np.arange(0.05, 0.65, 0.05):
        for dense in np.arange(0.35, 0.75, 0.05):
            candidate = dataclasses.replace(
                decision,
                coverage_floor=round(float(cover), 2),
                coverage_dense=round(float(dense), 2),
            )
            kept, caught = _rates(pos, neg, candidate)
            if kept >= answered and caught > refused:
                best, refused = candidate, caught
    return best


def _readings(readings: Sequence[Signals], decision: Decision) -> np.ndarray:
    """(probability, judge_best, dense_best, coverage_best) per reading; -2 for a gate
    refusal."""
    return np.array(
        [
            (
                decision.probability(r),
                r.get("judge_best", 0.0),
                r.get("dense_best", 0.0),
                r.get("coverage_best", 1.0),
            )
            if r is not None
            else (-2.0, -2.0, -2.0, -2.0)
            for r in readings
        ],
        dtype=float,
    ).reshape(-1, 4)


def _rates(pos: np.ndarray, neg: np.ndarray, d: Decision) -> tuple[float, float]:
    """`labelled_rates` on `_readings` arrays (the same rule as `Decision.answers`)."""

    def answers(a: np.ndarray) -> np.ndarray:
        found = (a[:, 3] >= d.coverage_floor) | (a[:, 2] >= d.coverage_dense)
        return (
            (a[:, 0] > -1.5)
            & found
            & ((a[:, 1] >= d.judge_override) | (a[:, 0] >= d.floor) | (a[:, 2] >= d.dense_override))
        )

    return float(answers(pos).mean()) if len(pos) else 0.0, (
        float(1.0 - answers(neg).mean()) if len(neg) else 0.0
    )


def labelled_rates(
    answerable: Sequence[Signals], unanswerable: Sequence[Signals], decision: Decision
) -> tuple[float, float]:
    """(answerable answered, unanswerable refused) under `decision`; a reading the gate
    refused (None) is refused whatever the decision."""
    kept = sum(r is not None and decision.answers(r) for r in answerable)
    refused = sum(r is None or not decision.answers(r) for r in unanswerable)
    return kept / max(1, len(answerable)), refused / max(1, len(unanswerable))


def fit_decision(
    readings: Sequence[Reading],
    judge_version: str,
    keep: float = KEEP,
    judge_override: float = JUDGE_OVERRIDE,
    embedder: str = "",
) -> Decision:
    """The decision fitted on paired readings (each question with and without its gold
    documents)."""
    return fit_labelled(
        [r.present for r in readings],
        [r.absent for r in readings],
        judge_version,
        keep=keep,
        judge_override=judge_override,
        embedder=embedder,
    )


def rates(readings: Sequence[Reading], decision: Decision) -> tuple[float, float]:
    """(answerable answered, gold-removed refused) under `decision`."""
    return labelled_rates([r.present for r in readings], [r.absent for r in readings], decision)


@dataclass(frozen=True)
class Asked:
    """One question asked through the engine: can its paragraph answer it, which article
    it is from, and the signals its answer recorded (None: the retrieval gate refused)."""

    qid: str
    article: str
    answerable: bool
    signals: dict[str, float] | None


def ask_squad(
    squad: Path, data_dir: Path, judge_dir: Path, *, k: int = 8, limit: int | None = None
) -> list[Asked]:
    """Index the paragraphs of the held-out train articles (`holds_out`: the answer judge
    never trained on them), then ask their questions through the engine with nothing
    generated, and every `ELSEWHERE_STRIDE`-th question of the other train articles (not
    indexed: none of them has an answer here); each answer's answerability signals, as the
    engine computes them.
    The readings are kept in `data_dir/decision-readings.json` under the judge's version,
    the index's embedder and `k`: a refit on the same inputs asks nothing again."""
    cache = data_dir / "decision-readings.json"
    key = f"{AnswerJudge(judge_dir).version} k={k} limit={limit} elsewhere={ELSEWHERE_STRIDE}"
    if cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return [Asked(**a) for a in saved["asked"]]
    asked = _ask_squad(squad, data_dir, judge_dir, k, limit)
    cache.write_text(json.dumps({"key": key, "asked": [dataclasses.asdict(a) for a in asked]}))
    return asked


def _ask_squad(
    squad: Path, data_dir: Path, judge_dir: Path, k: int, limit: int | None
) -> list[Asked]:
    data = load_squad(squad, "train")
    slugs = {paragraph_id(q.article, 0)[:-5] for q in data.questions if holds_out(q.article)}
    held = {pid: doc for pid, doc in data.corpus.items() if pid[:-5] in slugs}
    settings = index_corpus(held, data_dir)
    # the signals only: no decision file is read (the one being fitted may not exist yet)
    rule = settings.query.answerable.model_copy(
        update={"decision": "rule", "judge": str(judge_dir)}
    )
    query = settings.query.model_copy(update={"answerable": rule, "log_queries": False})
    own = [q for q in data.questions if holds_out(q.article)]
    elsewhere = [q for q in data.questions if not holds_out(q.article)][::ELSEWHERE_STRIDE]
    if limit:  # an even sample across the articles (smoke runs)
        own = own[:: max(1, len(own) // limit)][:limit]
        elsewhere = elsewhere[:: max(1, len(elsewhere) // limit)][: limit // 2]
    out = []
    with open_engine(settings.model_copy(update={"query": query})) as (engine, _):
        for q in [*own, *elsewhere]:
            answer = engine.answer(QueryRequest(query=q.text, k=k, generate=False))
            read = answer.answerability.signals if answer.answerability else None
            # a question about an article that is not indexed has no answer here
            answerable = q.answerable and holds_out(q.article)
            out.append(Asked(q.id, q.article, answerable, dict(read) if read else None))
    return out


def paired_as_asked(readings: Sequence[Reading], group: str) -> list[Asked]:
    """Paired readings (with and without the gold documents) as asked questions of one
    group (`group` is their article in the leave-one-article-out folds)."""
    return [
        Asked(f"{group}:{r.qid}:{kind}", group, kind == "gold", signals)
        for r in readings
        for kind, signals in (("gold", r.present), ("no-gold", r.absent))
    ]


def signal_auc(asked: Sequence[Asked], score: Callable[[Mapping[str, float]], float]) -> float:
    """ROC AUC of one score between answerable and unanswerable questions (a question the
    gate refused scores lowest)."""

    def read(a: Asked) -> float:
        return score(a.signals) if a.signals is not None else -math.inf

    return auc(
        [read(a) for a in asked if a.answerable], [read(a) for a in asked if not a.answerable]
    )


def held_out_auc(asked: Sequence[Asked], names: Sequence[str], judge_version: str) -> float:
    """Leave-one-article-out ROC AUC of the logistic regression over `names`: fitted on the
    other articles, scored on each article's questions, pooled (a gate refusal scores
    lowest)."""
    scored: list[tuple[bool, float]] = []
    for article in sorted({a.article for a in asked}):
        rest = [a for a in asked if a.article != article]
        fitted = logistic_decision(
            [a.signals for a in rest if a.answerable],
            [a.signals for a in rest if not a.answerable],
            judge_version,
            names,
        )
        scored += [
            (a.answerable, fitted.probability(a.signals) if a.signals else -1.0)
            for a in asked
            if a.article == article
        ]
    return auc([s for y, s in scored if y], [s for y, s in scored if not y])


def select_signals(
    asked: Sequence[Asked], judge_version: str, candidates: Sequence[str] = SIGNALS
) -> tuple[list[str], list[tuple[str, float]]]:
    """Forward selection: add the signal that raises the leave-one-article-out AUC most,
    from none, and stop when none raises it by 0.002. A signal enters only with a positive
    weight: more evidence must never lower the probability (a question set whose
    unanswerable questions were written from the very paragraph, as SQuAD's are, rewards
    *less* term coverage, which would answer off-topic questions). Returns the chosen names
    and the AUC after each step."""
    chosen: list[str] = []
    steps: list[tuple[str, float]] = [("", 0.5)]
    pos = [a.signals for a in asked if a.answerable]
    neg = [a.signals for a in asked if not a.answerable]
    while True:
        trials = [
            (held_out_auc(asked, [*chosen, name], judge_version), name)
            for name in candidates
            if name not in chosen
            and all(
                w > 0 for w in logistic_decision(pos, neg, judge_version, [*chosen, name]).weights
            )
        ]
        if not trials:
            break
        best, name = max(trials)
        if best < steps[-1][1] + 0.002:
            break
        chosen.append(name)
        steps.append((name, best))
    return chosen, [(n, round(a, 4)) for n, a in steps[1:]]


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """ROC AUC of a score: P(a random positive scores above a random negative), ties half.

    >>> auc([0.9, 0.8], [0.1, 0.2]), auc([0.5], [0.5]), auc([0.1], [0.9, 0.2])
    (1.0, 0.5, 0.0)
    """
    if not positives or not negatives:
        raise ValueError("auc needs at least one positive and one negative")
    return rank_auc(positives, negatives)


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


def _signal(name: str, signals: Mapping[str, float]) -> float:
    return float(signals.get(name, 0.0))


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parser().parse_args(argv)
    scorer = AnswerJudge(args.judge)
    squad = squad_file(args.dataset)
    if (args.dataset / "squad2-half").is_dir():  # the shared data: every kind, train splits
        decision, kept, refused, fitted_on = _fit_every_kind(args, scorer)
    elif squad is None:  # BEIR: paired readings of the held-out train claims
        decision, kept, refused, fitted_on = _fit_beir(args, scorer)
    else:
        decision, kept, refused, fitted_on = _fit_squad(args, scorer, squad)
    report = {
        **decision.to_json(),
        "fitted_on": {"dataset": args.dataset.name, **fitted_on, "keep": args.keep},
        "fit_figures": {
            "answerable_answered": round(kept, 4),
            "unanswerable_refused": round(refused, 4),
        },
        "command": "make decision",
    }
    (args.judge / DECISION_FILE).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument(
        "--judge", type=Path, default=BUNDLED_ANSWER_JUDGE, help="the answer judge's directory"
    )
    ap.add_argument("--keep", type=float, default=KEEP)
    ap.add_argument("--limit", type=int, default=None, help="questions asked (smoke runs)")
    ap.add_argument(
        "--also",
        type=Path,
        default=None,
        help="a BEIR set (SciFact) whose held-out train claims join a SQuAD fit, read with and "
        "without their gold documents: statements as well as questions",
    )
    ap.add_argument("--also-data-dir", type=Path, default=None, help="where --also is indexed")
    return ap


Fit = tuple[Decision, float, float, dict[str, object]]  # decision, kept, refused, fitted_on


def _live_embedder(data_dir: Path) -> str:
    live = ingest.status(data_dir=data_dir).embedder
    return live.slug if live else ""


def _fit_beir(args: argparse.Namespace, scorer: AnswerJudge) -> Fit:
    """A BEIR set: the held-out train claims read with and without their gold documents."""
    readings = collect(args.dataset, args.data_dir, "train", scorer=scorer)
    live_embedder = _live_embedder(args.data_dir)
    decision = fit_decision(readings, scorer.version, args.keep, embedder=live_embedder)
    kept, refused = rates(readings, decision)
    fitted_on: dict[str, object] = {
        "split": "train: the claims the judge never trained on (judge_data.is_holdout)",
        "questions": len(readings),
    }
    return decision, kept, refused, fitted_on


def _fit_every_kind(args: argparse.Namespace, scorer: AnswerJudge) -> Fit:
    """The shared data folder: every kind of question of every train split
    (`eval.kinds.read_kinds`), the signals chosen per kind (`train.kinds_fit.select`), the
    floor that keeps `keep` of the answerable questions of every data set answered."""
    readings = read_kinds(Sets(args.dataset, args.data_dir), "train")
    embedder = _live_embedder(args.data_dir / "squad-train-data")
    decision, steps = fit_kinds(readings, scorer.version, args.keep, embedder)
    pos = [r.signals for r in readings if r.answerable]
    neg = [r.signals for r in readings if not r.answerable]
    kept, refused = labelled_rates(pos, neg, decision)
    held = kinds_fit.held_out(readings, list(decision.features), scorer.version)
    fitted_on: dict[str, object] = {
        "split": "train splits: squad2-half's held-out train articles (eval.squad.holds_out) "
        "and squad2-train10, SciFact's train claims, mtrag-un's train conversations",
        "questions": len(readings),
        "answerable": len(pos),
        "selection": [
            {
                "signal": s.signal,
                "leave_one_group_out_auc": round(s.logo, 4),
                "leave_one_kind_out_auc": round(s.loko, 4),
            }
            for s in steps
        ],
        "cells": _cell_figures(readings, decision, held),
    }
    return decision, kept, refused, fitted_on


def fit_kinds(
    readings: Sequence[kinds.Reading], judge_version: str, keep: float = KEEP, embedder: str = ""
) -> tuple[Decision, list[kinds_fit.Step]]:
    """The decision fitted on readings of every kind (`train.kinds_fit`): its signals chosen
    per kind, its floor keeping `keep` of every data set's answerable readings answered, and
    the strictest coverage rule that costs none of those the floor answers."""
    names, steps = kinds_fit.select(readings, judge_version)
    weights = kinds_fit.cell_weights(readings)
    fitted = kinds_fit.weighted_decision(readings, names, judge_version, weights)
    fitted = dataclasses.replace(
        fitted, floor=kinds_fit.floor_for(readings, fitted, keep), embedder=embedder
    )
    pos = [r.signals for r in readings if r.answerable]
    neg = [r.signals for r in readings if not r.answerable]
    return _with_coverage_rule(fitted, _readings(pos, fitted), _readings(neg, fitted)), steps


def _cell_figures(
    readings: Sequence[kinds.Reading], decision: Decision, held: Sequence[float]
) -> dict[str, dict[str, float]]:
    """Per cell: its size, the held-out AUC and refusal at 90 % answered of the decision,
    and the same of the top dense cosine."""
    dense = kinds_fit.scores(readings, lambda s: s.get("dense_best", 0.0))
    out = {}
    for cell in kinds_fit.cells(readings):
        pos, neg = kinds_fit.split_cell(readings, dense, cell)
        out[f"{cell[0]} {cell[1]}"] = {
            "answerable": len(pos),
            "unanswerable": len(neg),
            "auc_held_out": round(kinds_fit.cell_auc(readings, held)[cell], 4),
            "refused_at_90_held_out": round(kinds_fit.cell_refused(readings, held)[cell], 4),
            "dense_auc": round(kinds_fit.cell_auc(readings, dense)[cell], 4),
            "dense_refused_at_90": round(kinds_fit.cell_refused(readings, dense)[cell], 4),
        }
    return out


def _fit_squad(args: argparse.Namespace, scorer: AnswerJudge, squad: Path) -> Fit:
    """A SQuAD-format set: its questions asked through the engine (plus `--also`'s claims),
    the signals chosen by forward selection, then the fit."""
    asked = ask_squad(squad, args.data_dir, args.judge, limit=args.limit)
    if args.also is not None:
        asked += paired_as_asked(
            collect(args.also, args.also_data_dir or args.data_dir, "train", scorer=scorer),
            args.also.name,
        )
    live_embedder = _live_embedder(args.data_dir)
    names, steps = select_signals(asked, scorer.version)
    pos = [a.signals for a in asked if a.answerable]
    neg = [a.signals for a in asked if not a.answerable]
    decision = fit_labelled(
        pos, neg, scorer.version, names, args.keep, embedder=live_embedder, coverage_rule=True
    )
    kept, refused = labelled_rates(pos, neg, decision)
    fitted_on: dict[str, object] = {
        "split": "train articles the answer judge never trained on (eval.squad.holds_out)"
        + (f"; {args.also.name} held-out train claims" if args.also else ""),
        "articles": sorted({a.article for a in asked}),
        "questions": len(asked),
        "answerable": len(pos),
        "selection": [{"signal": n, "held_out_auc": a} for n, a in steps],
        "signal_auc": {
            n: round(signal_auc(asked, functools.partial(_signal, n)), 4) for n in SIGNALS
        },
    }
    return decision, kept, refused, fitted_on


if __name__ == "__main__":
    main()
