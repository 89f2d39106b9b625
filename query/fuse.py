"""Rank fusion of the retrieval legs: reciprocal rank fusion and DBSF.

Pure functions over point ids, so fusion can be evaluated and property-tested without any
store or model. Every fused candidate keeps each leg's 1-based rank and raw score: the
reranker, the sufficiency gate and the evaluation all need to know *why* a candidate is
where it is, not just its fused score.

Order is total and deterministic: fused score descending, then the best (smallest) rank the
candidate has in any leg, then point id. The middle key keeps a single leg's own order when
fusion produces ties (DBSF clipping, RRF weights of 0), and the last makes equal inputs give
equal outputs regardless of dict or set iteration order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from ragstream.core.answers import DEFAULT_RRF_K

Ranked = str | tuple[str, float]
"""One leg entry: a point id, or (point id, the leg's raw score). Legs are best first."""


class Fused(BaseModel):
    """One fused candidate with the per-leg evidence behind its fused score."""

    model_config = ConfigDict(frozen=True)

    point_id: str
    score: float
    ranks: dict[str, int]  # leg -> 1-based rank in that leg (absent: the leg did not return it)
    scores: dict[str, float]  # leg -> the leg's raw score (when the leg supplied one)


def _split(entry: Ranked) -> tuple[str, float | None]:
    if isinstance(entry, str):
        return entry, None
    point_id, score = entry
    return point_id, float(score)


def _check_weights(
    legs: Mapping[str, Sequence[Ranked]], weights: Mapping[str, float] | None
) -> dict[str, float]:
    """Weights per leg (missing = 1.0); a weight naming no leg is a typo, not a no-op."""
    weights = weights or {}
    unknown = sorted(set(weights) - set(legs))
    if unknown:
        raise ValueError(f"weights name unknown legs {unknown}; legs are {sorted(legs)}")
    for leg, w in weights.items():
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weight of leg {leg!r} must be finite and >= 0, got {w}")
    return {leg: float(weights.get(leg, 1.0)) for leg in legs}


def _ranked(entries: Sequence[Ranked]) -> dict[str, tuple[int, float | None]]:
    """point id -> (1-based rank, raw score); a repeated id keeps its first (best) place."""
    out: dict[str, tuple[int, float | None]] = {}
    for entry in entries:
        point_id, score = _split(entry)
        if score is not None and not math.isfinite(score):
            raise ValueError(f"non-finite score {score} for {point_id!r}")
        if point_id not in out:
            out[point_id] = (len(out) + 1, score)
    return out


def _ordered(
    totals: dict[str, float], per_leg: Mapping[str, dict[str, tuple[int, float | None]]]
) -> list[Fused]:
    fused = []
    for point_id, total in totals.items():
        places = {leg: got[point_id] for leg, got in per_leg.items() if point_id in got}
        ranks = {leg: rank for leg, (rank, _) in places.items()}
        scores = {leg: s for leg, (_, s) in places.items() if s is not None}
        fused.append(Fused(point_id=point_id, score=total, ranks=ranks, scores=scores))
    return sorted(fused, key=lambda f: (-f.score, min(f.ranks.values()), f.point_id))


def rrf(
    legs: Mapping[str, Sequence[Ranked]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Reciprocal rank fusion: score(d) = Σ_leg w_leg / (k + rank_leg(d)).

    Uses ranks only, so a BM25 score of 14 and a cosine of 0.8 need no common scale. `k` is
    explicit: it sets how much a top rank outweighs a deep one (docs/architecture.md,
    "Fusion"). With `weights` (missing legs weigh 1.0) it is weighted RRF; a weight of 0 keeps
    the leg's candidates and ranks visible but adds nothing to their score. A leg may give
    (id, raw score) pairs, in which case each candidate also carries that raw score.

    >>> out = rrf({"dense": ["a", "b"], "lexical": ["b", "c"]}, k=60)
    >>> [(f.point_id, round(f.score, 5), f.ranks) for f in out]  # doctest: +NORMALIZE_WHITESPACE
    [('b', 0.03252, {'dense': 2, 'lexical': 1}), ('a', 0.01639, {'dense': 1}),
     ('c', 0.01613, {'lexical': 2})]
    >>> [f.point_id for f in rrf({"dense": ["a", "b"], "lexical": ["b"]}, weights={"lexical": 0})]
    ['a', 'b']
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    w = _check_weights(legs, weights)
    per_leg = {leg: _ranked(entries) for leg, entries in legs.items()}
    totals: dict[str, float] = {}
    for leg, got in per_leg.items():
        for point_id, (rank, _) in got.items():
            totals[point_id] = totals.get(point_id, 0.0) + w[leg] / (k + rank)
    return _ordered(totals, per_leg)


def _dbsf_normalized(scores: Sequence[float]) -> list[float]:
    """Scores mapped to [0, 1] by mean ± 3 sample standard deviations, clipped.

    As Qdrant's DBSF: one score, or scores with no spread, carry no distribution and map to
    0.5. Unlike Qdrant we clip, so an outlier leg score cannot outweigh a whole other leg.
    """
    n = len(scores)
    if n == 0:
        return []
    mean = math.fsum(scores) / n
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else 0.0
    low, high = mean - 3 * std, mean + 3 * std
    if not high > low:
        return [0.5] * n
    return [min(1.0, max(0.0, (s - low) / (high - low))) for s in scores]


def dbsf(
    legs: Mapping[str, Sequence[tuple[str, float]]],
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Distribution-based score fusion: per leg, normalize scores to [0, 1], then sum.

    Unlike RRF it keeps score *gaps* (a clear dense winner stays clear), while the per-leg
    normalization (mean ± 3σ of that leg's returned scores, clipped) makes BM25 and cosine
    scores addable. Legs are (point id, raw score), best first; `weights` scale each leg's
    normalized scores (missing legs weigh 1.0).

    >>> out = dbsf({"dense": [("a", 0.9), ("b", 0.5)], "lexical": [("b", 12.0), ("c", 3.0)]})
    >>> [(f.point_id, round(f.score, 3)) for f in out]
    [('b', 1.0), ('a', 0.618), ('c', 0.382)]
    >>> out[0].scores
    {'dense': 0.5, 'lexical': 12.0}
    """
    w = _check_weights(legs, weights)
    per_leg = {leg: _ranked(entries) for leg, entries in legs.items()}
    totals: dict[str, float] = {}
    for leg, got in per_leg.items():
        raw = [s if s is not None else 0.0 for _, s in got.values()]
        for point_id, norm in zip(got, _dbsf_normalized(raw), strict=True):
            totals[point_id] = totals.get(point_id, 0.0) + w[leg] * norm
    return _ordered(totals, per_leg)


__all__ = ["Fused", "Ranked", "dbsf", "rrf"]
