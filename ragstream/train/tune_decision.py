"""`ragstream tune --what decision`: the answerability decision refitted on a user's own index.

The shipped decision was fitted on open-domain and scientific questions; a corpus of another
kind (contracts, runbooks) reads its signals at other levels. From the user's question set
(SQuAD 2.0 or BEIR format, its `--split`), every judged question is asked through the engine
over the user's index twice: with its gold documents among the candidates (answerable) and
with them taken out (`gold_removed`: the index holds the subject, not the answer); a SQuAD
set's unanswerable questions join as `adversarial` (`ragstream.eval.kind_sets`). A fixed fifth
of the groups (whole articles, tenths of the claims) is held out; the decision is fitted on
the rest exactly as the shipped one is (`train.decision.fit_kinds`) and kept only when, on
the held-out questions, it refuses more of the unanswerable ones at 90 % answered than the
shipped decision does, on average over the cells, and loses on none by more than 0.02. A
question set's questions are asked alone, so the tuned decision keeps the shipped one's
conversation member (what reads a question asked after earlier turns).

A kept decision is written beside a copy of the answer judge it reads, as
`<data_dir>/models/decision-<hash>/` (the judge's files and `decision.json`); nothing changes
until `query.answerable.judge` names that folder (the report's `switch_on`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import xxhash
from pydantic import BaseModel

from ragstream.eval import kind_sets, kinds
from ragstream.operators.answer_judge import BUNDLED_ANSWER_JUDGE, AnswerJudge
from ragstream.query.decision import DECISION_FILE, Decision, load_decision
from ragstream.service import ingest
from ragstream.train import kinds_fit
from ragstream.train.decision import KEEP, fit_kinds

HELD_FOLDS = frozenset({0, 1})  # of kinds_fit.FOLDS: a fifth of the groups
MIN_ANSWERABLE = 40  # answerable questions to fit on (and a quarter of that held out)
MAX_LOSS = 0.02  # the most a kept decision may refuse less than the shipped one, per cell


class DecisionTuneReport(BaseModel):
    """What `ragstream tune --what decision` prints (and writes beside a kept decision)."""

    what: str = "decision"
    dataset: str
    split: str
    questions: int
    fit_readings: int
    held_readings: int
    features: list[str]
    # per cell ("<data set> <kind>") on the held-out questions: refused at 90 % answered
    held_refused_shipped: dict[str, float]
    held_refused_tuned: dict[str, float]
    kept: bool
    model_dir: str = ""
    switch_on: str = ""


def held_refused(readings: Sequence[kinds.Reading], decision: Decision) -> dict[str, float]:
    """Per cell, the share of unanswerable readings refused at 90 % answered."""
    values = kinds_fit.scores(readings, decision.probability)
    return {
        f"{d} {k}": round(v, 4) for (d, k), v in kinds_fit.cell_refused(readings, values).items()
    }


def better(tuned: dict[str, float], shipped: dict[str, float]) -> bool:
    """More refused on average over the cells, and no cell worse by more than MAX_LOSS.

    >>> better({"a": 0.5, "b": 0.4}, {"a": 0.4, "b": 0.41}), better({"a": 0.5}, {"a": 0.5})
    (True, False)
    """
    mean = sum(tuned.values()) / len(tuned) - sum(shipped.values()) / len(shipped)
    return mean > 0 and all(tuned[c] >= shipped[c] - MAX_LOSS for c in shipped)


def tune_decision(
    dataset_dir: Path,
    data_dir: Path,
    split: str = "train",
    *,
    progress: Callable[[str], None] = print,
) -> DecisionTuneReport:
    """Read, fit on four fifths of the groups, gate on the rest; see the module docstring."""
    readings = kind_sets.read_question_set(dataset_dir, data_dir, split)
    held = [r for r in readings if kinds_fit.fold_of(r) in HELD_FOLDS]
    fit = [r for r in readings if kinds_fit.fold_of(r) not in HELD_FOLDS]
    if min(_answerable(fit), 4 * _answerable(held)) < MIN_ANSWERABLE:
        raise ValueError(
            f"{dataset_dir} gives too few questions to fit and check a decision on "
            f"({len(readings)} readings); a few hundred judged questions are needed"
        )
    judge = AnswerJudge(BUNDLED_ANSWER_JUDGE)
    shipped = load_decision(BUNDLED_ANSWER_JUDGE)
    assert shipped is not None  # the wheel ships one (tested)
    live = ingest.status(data_dir=data_dir).embedder
    tuned, _ = fit_kinds(fit, judge.version, KEEP, live.slug if live else "")
    # a question set holds questions asked alone: the conversation member stays the shipped one
    tuned = dataclasses.replace(tuned, conversation=shipped.conversation)
    before, after = held_refused(held, shipped), held_refused(held, tuned)
    progress(f"held-out refused at 90 % answered: shipped {before}, tuned {after}")
    report = DecisionTuneReport(
        dataset=dataset_dir.name, split=split,
        questions=len({r.qid for r in readings}), fit_readings=len(fit),
        held_readings=len(held), features=list(tuned.features),
        held_refused_shipped=before, held_refused_tuned=after, kept=better(after, before),
    )  # fmt: skip
    if report.kept:
        out = _write(tuned, data_dir, report)
        report = report.model_copy(
            update={"model_dir": str(out), "switch_on": f"RAGSTREAM_QUERY__ANSWERABLE__JUDGE={out}"}
        )
        (out / "decision_tune.json").write_text(report.model_dump_json(indent=2) + "\n")
    return report


def _answerable(readings: Sequence[kinds.Reading]) -> int:
    return sum(r.answerable and r.signals is not None for r in readings)


def _write(decision: Decision, data_dir: Path, report: DecisionTuneReport) -> Path:
    """A copy of the bundled answer judge with `decision` beside it, under the data dir's
    models (the folder is named by the decision's hash: the same fit lands in the same one)."""
    body = {**decision.to_json(), "fitted_on": {"dataset": report.dataset, "split": report.split}}
    text = json.dumps(body, indent=2) + "\n"
    out = data_dir / "models" / f"decision-{xxhash.xxh64(text.encode()).hexdigest()[:12]}"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(BUNDLED_ANSWER_JUDGE, out)
    (out / DECISION_FILE).write_text(text)
    return out
