"""Fit the calibrated answerability decision (query/decision.py) on train splits.

The shared data folder (`make decision`): every kind of question of every train split is
read through the engine, each data set on its own index (`eval.kind_sets.read_kinds`:
SQuAD 2.0's held-out train articles and `squad2-train10`, SciFact's train claims, mtrag-un's
train conversations; answerable questions, the same with their gold documents taken out,
adversarial, off-topic and conversational ones). The signals the decision reads are chosen by
their held-out ROC AUC per kind, their weights by what they refuse around 90 % answered, and
its floor keeps 90 % of every data set's answerable questions answered (`fit_kinds`,
`train.kinds_fit`); the strictest coverage rule that costs none of those it answers joins it.
One question set (SQuAD 2.0 or BEIR) is read and fitted the same way on its `--split`
(`ragstream tune --what decision` gates such a fit on held-out questions).

`collect` gives the paired readings of a BEIR set (each judged claim with its gold documents
and without them) that `bench/answerability.py` calibrates the floor rule on.

The result, with its figures per cell and the embedder whose cosines it read, is written as
`decision.json` beside the answer judge:

    .venv/bin/python -m ragstream.train.decision ../shared/data --data-dir D
    make decision          # D = $(DECISION_DIR), each data set indexed on first use

Deterministic: the same indexes, judge and splits give the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragstream.eval import kind_sets, kinds
from ragstream.eval.beir import index_corpus, load_beir
from ragstream.eval.kind_sets import Sets, read_kinds
from ragstream.eval.opened import opened
from ragstream.eval.squad_eval import auc as rank_auc
from ragstream.operators.answer_judge import (
    BUNDLED_ANSWER_JUDGE,
    AnswerJudge,
)
from ragstream.query.decision import (
    DECISION_FILE,
    FEATURES,
    Decision,
    features,
)
from ragstream.service import ingest
from ragstream.train import kinds_fit
from ragstream.train.judge_data import is_holdout

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
    holdout_only: bool = True,
    judge: str = "bundled",
) -> list[Reading]:
    """Both readings of every judged question of `split` (train: only held-out claims) by
    the answer judge `judge` (`query.answerable.judge`), the retrieval gate not applied."""
    corpus, queries, qrels = load_beir(dataset_dir, split)
    judged = [q for q in queries if q in qrels]
    if split == "train" and holdout_only:
        judged = [q for q in judged if is_holdout(int(q))]
    settings = index_corpus(corpus, data_dir)
    out = []
    # the signals only: no decision file is read (the one being fitted may not exist yet)
    rule = settings.query.answerable.model_copy(update={"decision": "rule", "judge": judge})
    query = settings.query.model_copy(update={"answerable": rule})
    with opened(settings.model_copy(update={"query": query})) as engine:
        read = kinds.engine_reader(engine, k, gate=False)
        for qid in judged:
            gold = {d for d, rel in qrels[qid].items() if rel > 0}
            pair = read(queries[qid], kinds.hiding(gold))
            out.append(Reading(qid, pair.present or {}, pair.absent or {}, pair.hidden_in_top))
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-penalized logistic regression, every row weighing the same
    (`kinds_fit.fit_logistic`).

    >>> x = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0.0, 0.0, 1.0, 1.0])
    >>> w, b = fit_logistic(x, y, l2=0.1)
    >>> bool(w[0] > 0), round(float(-b / w[0]), 2)
    (True, 1.5)
    """
    return kinds_fit.fit_logistic(x, y, np.ones(len(y)), l2)


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


def main(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parser().parse_args(argv)
    scorer = AnswerJudge(args.judge)
    if args.conversation_only:
        _refit_conversation(args, scorer)
        return
    if (args.dataset / "squad2-half").is_dir():  # the shared data: every kind, train splits
        decision, kept, refused, fitted_on = _fit_every_kind(args, scorer)
    else:  # one question set: its split, with and without the gold documents
        decision, kept, refused, fitted_on = _fit_one_set(args, scorer)
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
    ap.add_argument(
        "dataset",
        type=Path,
        help="the shared data folder (every kind of every train split), or one SQuAD 2.0 or "
        "BEIR question set",
    )
    ap.add_argument("--data-dir", type=Path, required=True, help="where the indexes are made")
    ap.add_argument(
        "--judge", type=Path, default=BUNDLED_ANSWER_JUDGE, help="the answer judge's directory"
    )
    ap.add_argument("--split", default="train", help="one question set's split read")
    ap.add_argument("--keep", type=float, default=KEEP)
    ap.add_argument(
        "--conversation-only",
        action="store_true",
        help="refit only the decision's conversation member (mtrag-un's train conversations "
        "read with their history) into the existing decision file",
    )
    return ap


Fit = tuple[Decision, float, float, dict[str, object]]  # decision, kept, refused, fitted_on


def _candidate(args: argparse.Namespace) -> Path | None:
    """The judge the questions are read with where it is not the shipped one (None: it is)."""
    judge: Path = args.judge
    return None if judge.resolve() == BUNDLED_ANSWER_JUDGE.resolve() else judge


def _live_embedder(data_dir: Path) -> str:
    live = ingest.status(data_dir=data_dir).embedder
    return live.slug if live else ""


def _fit_one_set(args: argparse.Namespace, scorer: AnswerJudge) -> Fit:
    """One question set's split: its questions read with and without their gold documents
    (`eval.kind_sets.read_question_set`), then the same fit."""
    readings = kind_sets.read_question_set(
        args.dataset, args.data_dir, args.split, _candidate(args)
    )
    decision, steps = fit_kinds(readings, scorer.version, args.keep, _live_embedder(args.data_dir))
    return _fitted(readings, decision, steps, scorer, f"{args.split} split")


def _fit_every_kind(args: argparse.Namespace, scorer: AnswerJudge) -> Fit:
    """The shared data folder: every kind of question of every train split
    (`eval.kind_sets.read_kinds`), the signals chosen per kind (`train.kinds_fit.select`), the
    floor that keeps `keep` of the answerable questions of every data set answered; the
    questions asked after earlier turns fit the conversation member (`fit_conversation`)."""
    sets = Sets(args.dataset, args.data_dir, judge=_candidate(args))
    readings = read_kinds(sets, "train", only=FIT_SETS)
    embedder = _live_embedder(args.data_dir / "squad-train-data")
    alone = asked_alone(readings)
    decision, steps = fit_kinds(alone, scorer.version, args.keep, embedder)
    split = (
        "train splits: squad2-half's held-out train articles (eval.squad.holds_out) and "
        "squad2-train10, SciFact's train claims, mtrag-un's train conversations"
    )
    decision, kept, refused, fitted_on = _fitted(alone, decision, steps, scorer, split)
    chat, chat_fitted_on = _conversation_member(readings, scorer, args.keep, embedder)
    fitted_on["conversation"] = chat_fitted_on
    return dataclasses.replace(decision, conversation=chat), kept, refused, fitted_on


# the data sets `make decision` reads (mtrag-un twice: its last turns alone and in their chat)
FIT_SETS = ("squad", "scifact", "mtrag", kinds.CHAT)


def asked_alone(readings: Sequence[kinds.Reading]) -> list[kinds.Reading]:
    """The readings the decision for questions asked alone fits on: every data set's but
    the chat's. A chat reads mtrag-un's last turns again with their history; those with
    none (a conversation's first turn) are the questions the set read alone already holds,
    and as cells of their own (a handful each) they would weigh as much as SQuAD's."""
    return [r for r in readings if r.dataset != kinds.CHAT]


# what the conversation member reads: the answer judge reads a follow-up's effective question
# (carried topic terms) less surely than a question a person wrote whole, and on mtrag-un's
# test conversations every fit with its reading lost to the best cosine alone
# (docs/answers.md), so the member is that cosine, its floor and coverage rule fitted here
CONVERSATION_SIGNALS = ("dense_best",)


def fit_conversation(
    readings: Sequence[kinds.Reading], judge_version: str, keep: float = KEEP, embedder: str = ""
) -> Decision:
    """The conversation member: `CONVERSATION_SIGNALS` fitted on the readings of questions
    asked after earlier turns (`eval.kinds.in_conversation`), its floor keeping `keep` of
    their answerable ones answered."""
    chat = [r for r in readings if kinds.in_conversation(r)]
    if not chat:
        raise ValueError("no reading of a question asked after earlier turns to fit on")
    return fit_kinds(chat, judge_version, keep, embedder, CONVERSATION_SIGNALS)[0]


def _conversation_member(
    readings: Sequence[kinds.Reading], scorer: AnswerJudge, keep: float, embedder: str
) -> tuple[Decision, dict[str, object]]:
    """`fit_conversation` and its figures (as `_fitted` reports the decision's)."""
    chat = [r for r in readings if kinds.in_conversation(r)]
    member = fit_conversation(chat, scorer.version, keep, embedder)
    _, kept, refused, fitted_on = _fitted(
        chat, member, [], scorer, "mtrag-un's train conversations, each last turn with its history"
    )
    return member, {
        **fitted_on,
        "answerable_answered": round(kept, 4),
        "unanswerable_refused": round(refused, 4),
    }


def _refit_conversation(args: argparse.Namespace, scorer: AnswerJudge) -> None:
    """Refit only the conversation member of the decision in `args.judge` (its other fields
    and figures kept)."""
    path = args.judge / DECISION_FILE
    report = json.loads(path.read_text())
    sets = Sets(args.dataset, args.data_dir, judge=_candidate(args))
    readings = read_kinds(sets, "train", only=(kinds.CHAT,))
    embedder = _live_embedder(args.data_dir / kind_sets.INDEX_DIRS[kinds.CHAT]("train"))
    member, fitted_on = _conversation_member(readings, scorer, args.keep, embedder)
    report["conversation"] = member.to_json()
    report["fitted_on"]["conversation"] = fitted_on
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"conversation": report["conversation"], **fitted_on}, indent=2))


def _fitted(
    readings: Sequence[kinds.Reading],
    decision: Decision,
    steps: Sequence[kinds_fit.Step],
    scorer: AnswerJudge,
    split: str,
) -> Fit:
    """The fit's figures: answered and refused at its floor, the selection steps, and per
    cell the held-out AUC and refusal at 90 % answered beside the top dense cosine's."""
    pos = [r.signals for r in readings if r.answerable]
    neg = [r.signals for r in readings if not r.answerable]
    kept, refused = labelled_rates(pos, neg, decision)
    held = kinds_fit.held_out(
        readings, list(decision.features), scorer.version, kinds_fit.at_the_floor
    )
    fitted_on: dict[str, object] = {
        "split": split,
        "questions": len({(r.dataset, r.qid) for r in readings}),
        "readings": len(readings),
        "answerable": len(pos),
        "selection": [
            {
                "signal": s.signal,
                "leave_one_group_out_auc": round(s.logo, 4),
                "leave_one_kind_out_auc": round(s.loko, 4),
            }
            for s in steps
        ],
        "cells": _cell_figures(readings, held),
    }
    return decision, kept, refused, fitted_on


def fit_kinds(
    readings: Sequence[kinds.Reading],
    judge_version: str,
    keep: float = KEEP,
    embedder: str = "",
    names: Sequence[str] | None = None,
) -> tuple[Decision, list[kinds_fit.Step]]:
    """The decision fitted on readings of every kind (`train.kinds_fit`): its signals chosen
    by their held-out AUC per kind (or `names`), their weights by what they refuse around
    `keep` answered (`at_the_floor`), its floor keeping `keep` of every data set's answerable
    readings answered, and the strictest coverage rule that costs none of those it answers."""
    if names is None:
        names, steps = kinds_fit.select(readings, judge_version)
    else:
        steps = []
    fitted = kinds_fit.at_the_floor(readings, names, judge_version, keep)
    fitted = dataclasses.replace(
        fitted, floor=kinds_fit.floor_for(readings, fitted, keep), embedder=embedder
    )
    pos = [r.signals for r in readings if r.answerable]
    neg = [r.signals for r in readings if not r.answerable]
    return _with_coverage_rule(fitted, _readings(pos, fitted), _readings(neg, fitted)), steps


def _cell_figures(
    readings: Sequence[kinds.Reading], held: Sequence[float]
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


if __name__ == "__main__":
    main()
