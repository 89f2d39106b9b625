"""Fit the answerability decision on every kind of "not answerable" at once.

The readings (`ragstream.eval.kinds`) are cells: one per data set and negative kind
(`gold_removed`, `adversarial`, `off_topic`, `conversational`), each against the answerable
questions of the same data set. The fit weighs the cells so that no one kind decides it:
every negative kind weighs the same in total (shared equally by its data sets' cells and
then by their readings), and the answerable questions weigh as much as all negatives
together, each data set's share equal.

Signals are chosen by forward selection on two held-out figures, averaged over the cells:
the ROC AUC under leave-one-group-out folds (`FOLDS` folds of whole articles, conversations
and tenths of the claims: no group is split), and under leave-one-kind-out (each negative
kind scored by a fit that never saw it). A signal enters only with a positive weight (more
evidence never lowers the probability) and only while it raises the criterion by
`MIN_GAIN`. The floor is the highest probability that keeps `keep` of the answerable
questions answered (each data set weighing the same; a gate refusal counts as refused).

Pure functions over recorded readings (numpy); `ragstream.train.decision` collects them
and writes the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import xxhash

from ragstream.eval.kinds import Reading
from ragstream.eval.squad_eval import auc, refused_at
from ragstream.query.decision import SIGNALS, Decision, features

FOLDS = 10
MIN_GAIN = 0.002
L2 = 1.0
KEEP = 0.90
Cell = tuple[str, str]  # (data set, negative kind)


def cells(readings: Sequence[Reading]) -> list[Cell]:
    """The (data set, negative kind) cells that have answerable readings beside them."""
    with_pos = {r.dataset for r in readings if r.answerable}
    found = {(r.dataset, r.kind) for r in readings if not r.answerable and r.dataset in with_pos}
    return sorted(found)


def cell_weights(readings: Sequence[Reading]) -> np.ndarray:
    """Each reading's weight in the fit: every negative kind weighs 1 in total (its data
    sets' cells equally, then their readings), the answerable ones as much as all negatives
    (each data set equally).

    >>> rs = [Reading("a", "answerable", "s", "g", {}), Reading("b", "off_topic", "s", "g", {}),
    ...       Reading("c", "off_topic", "s", "g", {}), Reading("d", "adversarial", "s", "g", {})]
    >>> cell_weights(rs).round(2).tolist()
    [2.0, 0.5, 0.5, 1.0]
    """
    kinds = sorted({r.kind for r in readings if not r.answerable})
    per_cell: dict[Cell, int] = {}
    for r in readings:
        per_cell[(r.dataset, r.kind)] = per_cell.get((r.dataset, r.kind), 0) + 1
    sets_of = {k: {d for d, kind in per_cell if kind == k} for k in kinds}
    positive_sets = {r.dataset for r in readings if r.answerable}
    out = []
    for r in readings:
        n = per_cell[(r.dataset, r.kind)]
        if r.answerable:
            out.append(len(kinds) / len(positive_sets) / n)
        else:
            out.append(1.0 / len(sets_of[r.kind]) / n)
    return np.array(out, dtype=float)


def fit_logistic(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = L2
) -> tuple[np.ndarray, float]:
    """A weighted, L2-penalized logistic regression by Newton's method (the bias is not
    penalized; weights are rescaled to sum to the number of rows).

    >>> x = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0.0, 0.0, 1.0, 1.0])
    >>> coef, b = fit_logistic(x, y, np.ones(4), l2=0.1)
    >>> bool(coef[0] > 0), round(float(-b / coef[0]), 2)
    (True, 1.5)
    """
    w = w * len(w) / w.sum()
    design = np.hstack([x, np.ones((len(x), 1))])
    theta = np.zeros(design.shape[1])
    penalty = np.eye(design.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-design @ theta))
        gradient = design.T @ (w * (p - y)) + penalty @ theta
        hessian = design.T @ (design * (w * p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(theta)), gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return theta[:-1], float(theta[-1])


def weighted_decision(
    readings: Sequence[Reading], names: Sequence[str], judge: str, weights: np.ndarray
) -> Decision:
    """The logistic regression over signals `names` (standardized, weighted), floor 0;
    readings the gate refused are left out."""
    kept = [i for i, r in enumerate(readings) if r.signals is not None]
    x = np.array([features(readings[i].signals or {}, names) for i in kept], dtype=float).reshape(
        -1, len(names)
    )
    y = np.array([float(readings[i].answerable) for i in kept])
    w = weights[kept]
    mean = np.average(x, axis=0, weights=w)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    scale[scale == 0] = 1.0
    coef, bias = fit_logistic((x - mean) / scale, y, w)
    return Decision(
        tuple(mean.round(6)), tuple(scale.round(6)), tuple(coef.round(6)), round(bias, 6),
        0.0, judge, features=tuple(names),
    )  # fmt: skip


def fold_of(r: Reading, folds: int = FOLDS) -> int:
    """The fold of a reading's group (stable, seed-free): a group is never split."""
    return xxhash.xxh64_intdigest(f"{r.dataset}:{r.group}".encode()) % folds


Score = Callable[[Mapping[str, float]], float]


def scores(readings: Sequence[Reading], score: Score) -> list[float]:
    """`score` of each reading; -inf where the gate refused (refused by any floor)."""
    return [score(r.signals) if r.signals is not None else float("-inf") for r in readings]


def split_cell(
    readings: Sequence[Reading], values: Sequence[float], cell: Cell
) -> tuple[list[float], list[float]]:
    """The values of a cell's answerable readings and of its negatives."""
    dataset, kind = cell
    pos: list[float] = []
    neg: list[float] = []
    for r, v in zip(readings, values, strict=True):
        if r.dataset == dataset and (r.answerable or r.kind == kind):
            (pos if r.answerable else neg).append(v)
    return pos, neg


def cell_auc(readings: Sequence[Reading], values: Sequence[float]) -> dict[Cell, float]:
    """Each cell's ROC AUC: its negatives against its data set's answerable readings."""
    return {c: auc(*split_cell(readings, values, c)) for c in cells(readings)}


def cell_refused(
    readings: Sequence[Reading], values: Sequence[float], share: float = KEEP
) -> dict[Cell, float]:
    """Each cell's share of negatives refused by the highest floor on `values` that answers
    `share` of its data set's answerable readings."""
    return {c: refused_at(*split_cell(readings, values, c), share) for c in cells(readings)}


Fitter = Callable[[Sequence[Reading], Sequence[str], str], Decision]


def logistic(readings: Sequence[Reading], names: Sequence[str], judge: str) -> Decision:
    """`weighted_decision` with the readings' own cell weights."""
    return weighted_decision(readings, names, judge, cell_weights(readings))


def held_out(
    readings: Sequence[Reading], names: Sequence[str], judge: str, fit: Fitter = logistic
) -> list[float]:
    """Each reading's probability under a `fit` on the other folds (leave-one-group-out)."""
    folds = np.array([fold_of(r) for r in readings])
    out = [float("-inf")] * len(readings)
    for f in sorted(set(folds.tolist())):
        fitted = fit([r for r, g in zip(readings, folds, strict=True) if g != f], names, judge)
        for i in np.flatnonzero(folds == f).tolist():
            s = readings[i].signals
            out[i] = fitted.probability(s) if s is not None else float("-inf")
    return out


def without_kind(
    readings: Sequence[Reading], names: Sequence[str], judge: str
) -> dict[Cell, float]:
    """Each cell's AUC under a fit that never saw its kind's negatives (leave-one-kind-out);
    none with fewer than two kinds (a fit needs one to learn from)."""
    out: dict[Cell, float] = {}
    kinds = sorted({k for _, k in cells(readings)})
    for kind in kinds if len(kinds) > 1 else ():
        rest = [r for r in readings if r.kind != kind]
        fitted = weighted_decision(rest, names, judge, cell_weights(rest))
        aucs = cell_auc(readings, scores(readings, fitted.probability))
        out |= {c: a for c, a in aucs.items() if c[1] == kind}
    return out


@dataclasses.dataclass(frozen=True)
class Step:
    signal: str
    logo: float  # mean over cells of the leave-one-group-out AUC
    loko: float  # mean over cells of the leave-one-kind-out AUC

    @property
    def criterion(self) -> float:
        return (self.logo + self.loko) / 2


def evaluate(readings: Sequence[Reading], names: Sequence[str], judge: str) -> tuple[float, float]:
    """(mean leave-one-group-out cell AUC, mean leave-one-kind-out cell AUC) of `names`; the
    first twice when there is one kind only."""
    logo = float(np.mean(list(cell_auc(readings, held_out(readings, names, judge)).values())))
    loko = without_kind(readings, names, judge)
    return logo, float(np.mean(list(loko.values()))) if loko else logo


def select(
    readings: Sequence[Reading], judge: str, candidates: Sequence[str] = SIGNALS
) -> tuple[list[str], list[Step]]:
    """Forward selection on the mean of both held-out figures; a signal enters only with a
    positive weight in the full fit, and only while it raises the criterion by MIN_GAIN."""
    chosen: list[str] = []
    steps: list[Step] = []
    weights = cell_weights(readings)
    while True:
        trials = []
        for name in candidates:
            if name in chosen:
                continue
            full = weighted_decision(readings, [*chosen, name], judge, weights)
            if all(w > 0 for w in full.weights):
                trials.append(Step(name, *evaluate(readings, [*chosen, name], judge)))
        if not trials:
            break
        best = max(trials, key=lambda s: s.criterion)
        if steps and best.criterion < steps[-1].criterion + MIN_GAIN:
            break
        chosen.append(best.signal)
        steps.append(best)
    return chosen, steps


def floor_for(readings: Sequence[Reading], decision: Decision, keep: float = KEEP) -> float:
    """The highest probability that keeps `keep` of the answerable readings answered, each
    data set weighing the same (a gate refusal is refused by any floor)."""
    pos = [r for r in readings if r.answerable]
    sets = sorted({r.dataset for r in pos})
    per = {d: sum(r.dataset == d for r in pos) for d in sets}
    w = np.array([1.0 / len(sets) / per[r.dataset] for r in pos])
    p = np.array(scores(pos, decision.probability))
    order = np.argsort(-p)
    reached = np.cumsum(w[order])
    i = int(np.searchsorted(reached, keep - 1e-9))
    return round(float(p[order][min(i, len(p) - 1)]) - 1e-6, 6)


def _matrix(readings: Sequence[Reading], names: Sequence[str], decision: Decision) -> np.ndarray:
    """Standardized features (the decision's mean and scale) per reading; NaN rows where the
    gate refused."""
    rows = [
        features(r.signals, names) if r.signals is not None else [np.nan] * len(names)
        for r in readings
    ]
    x = np.array(rows, dtype=float).reshape(-1, len(names))
    return (x - np.array(decision.mean)) / np.array(decision.scale)


class _Cells:
    """Index arrays of each cell's answerable and unanswerable readings, and each cell's
    weight (every kind the same, shared by its cells)."""

    def __init__(self, readings: Sequence[Reading]) -> None:
        found = cells(readings)
        self.pos, self.neg, weights = [], [], []
        per_kind = {k: sum(c[1] == k for c in found) for _, k in found}
        for dataset, kind in found:
            self.pos.append(np.array([i for i, r in enumerate(readings)
                                      if r.dataset == dataset and r.answerable]))  # fmt: skip
            self.neg.append(np.array([i for i, r in enumerate(readings)
                                      if r.dataset == dataset and r.kind == kind]))  # fmt: skip
            weights.append(1.0 / per_kind[kind])
        self.weights = np.array(weights) / sum(weights)

    def refused(self, values: np.ndarray, keep: float = KEEP) -> float:
        """The cells' weighted mean share of unanswerable readings refused by the highest
        floor that keeps `keep` of the cell's answerable ones answered."""
        out = 0.0
        for pos, neg, w in zip(self.pos, self.neg, self.weights, strict=True):
            ranked = np.sort(values[pos])[::-1]
            need = max(1, round(keep * len(ranked) + 1e-9))
            floor = ranked[min(need, len(ranked)) - 1]
            out += w * float(np.mean(values[neg] < floor))
        return out


def simplex(dims: int, step: float = 0.05) -> np.ndarray:
    """Every non-negative weight vector on a grid of `step` whose weights sum to 1.

    >>> simplex(2, 0.5).tolist()
    [[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]]
    """
    n = round(1 / step)
    points = [p for p in np.ndindex(*(n + 1,) * dims) if sum(p) == n]
    return np.array(points, dtype=float) / n


def at_the_floor(
    readings: Sequence[Reading], names: Sequence[str], judge: str, keep: float = KEEP
) -> Decision:
    """The decision over `names` whose direction (non-negative standardized weights) refuses
    the most unanswerable readings where it keeps `keep` of the answerable ones answered,
    cell by cell (every kind weighing the same); its scale and bias are then fitted as a
    weighted logistic regression of that one score, so it is a probability again. The
    logistic fit alone weighs the bulk of the readings; the floor sits in their tail."""
    weights = cell_weights(readings)
    start = weighted_decision(readings, names, judge, weights)
    x = _matrix(readings, names, start)
    grid = _Cells(readings)
    values = np.where(np.isnan(x), -np.inf, x)
    band = [k for k in (keep - 0.05, keep, keep + 0.05) if 0.0 < k < 1.0]

    def refused(w: np.ndarray) -> float:  # around the floor, not at one point of it: smoother
        score = _score(values, w)
        return sum(grid.refused(score, k) for k in band)

    best = max(simplex(len(names)), key=refused)
    score = _score(values, best)
    kept = np.isfinite(score)
    slope, bias = fit_logistic(score[kept, None], np.array([r.answerable for r in readings])[kept],
                               weights[kept])  # fmt: skip
    return dataclasses.replace(
        start,
        weights=tuple(round(float(w * slope[0]), 6) for w in best),
        bias=round(bias, 6),
    )


def _score(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        out = x @ w
    return np.where(np.isnan(out), -np.inf, out)
