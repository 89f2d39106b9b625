"""A preference for recent documents: each candidate's score decays by half every half-life
of its document's age, read from a datetime metadata field (`QueryRequest.prefer_recent`).

The decay reorders the k candidates relevance kept (after the reranker, or fusion without
one): the reranker's odds times the decay (its logit plus the log of the decay), else the
fused score times the decay. So a newer version of a text outranks an older one that says the
same, and a new document that is not relevant is never pulled in: weighting every fused
candidate before the reranker did that (bench/recency.py). A candidate whose document has no
date ages as much as the oldest dated one. Off unless a request asks.

>>> half_life_s("30d"), half_life_s("12h")
(2592000.0, 43200.0)
>>> decay(age_s=2592000.0, half_life=2592000.0)
0.5
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragstream.core.errors import InvalidRequestError
from ragstream.core.filters import nearest
from ragstream.core.metadata import FieldType, parse_instant
from ragstream.core.models import IndexedChunk
from ragstream.query.rerank import Reranked

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31_557_600}


@dataclass(frozen=True)
class Recency:
    """A checked preference: the datetime field's name and the half-life in seconds."""

    field: str
    half_life: float


def half_life_s(text: str) -> float:
    return float(text[:-1]) * _UNIT_S[text[-1]]


def checked(field: str, half_life: str, fields: dict[str, FieldType]) -> Recency:
    """The preference against the catalogue: its field must be a datetime field the caller's
    documents carry (`InvalidRequestError` naming the nearest otherwise)."""
    name = field.lower().removeprefix("meta.")
    kind = fields.get(name)
    if kind is None:
        known = sorted(n for n, t in fields.items() if t == "datetime")
        raise InvalidRequestError(
            f"prefer_recent: no document carries the field {field!r}{nearest(name, known)}"
        )
    if kind != "datetime":
        raise InvalidRequestError(f"prefer_recent: {field!r} is a {kind} field, not a datetime")
    seconds = half_life_s(half_life)
    if seconds <= 0:
        raise InvalidRequestError("prefer_recent: the half-life must be longer than 0")
    return Recency(name, seconds)


def decay(age_s: float, half_life: float) -> float:
    return 0.5 ** (max(age_s, 0.0) / half_life)


def factors(chunks: Sequence[IndexedChunk], recency: Recency, now: dt.datetime) -> list[float]:
    """Each chunk's decay; an undated one's is the oldest dated one's (1.0 when none is)."""
    ages: list[float | None] = []
    for chunk in chunks:
        value = chunk.meta.get(recency.field)
        at = parse_instant(value) if isinstance(value, str) else None
        ages.append(None if at is None else (now - at).total_seconds())
    dated = [a for a in ages if a is not None]
    oldest = max(dated) if dated else 0.0
    return [decay(oldest if a is None else a, recency.half_life) for a in ages]


def weight(item: Reranked, factor: float) -> float:
    """A kept candidate's relevance weighed by its decay: the reranker's logit plus the
    decay's log (its odds times the decay), else the fused score times the decay."""
    if item.rerank_score is None:
        return item.candidate.score * factor
    return item.rerank_score + math.log(max(factor, 1e-300))


def reordered(ranked: Sequence[Reranked], recency: Recency, now: dt.datetime) -> list[Reranked]:
    """The k kept, ordered by their weighed relevance (stable on ties)."""
    decays = factors([r.candidate.chunk for r in ranked], recency, now)
    keyed = [(-weight(r, f), i) for i, (r, f) in enumerate(zip(ranked, decays, strict=True))]
    return [ranked[i] for _, i in sorted(keyed)]
