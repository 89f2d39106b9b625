"""Sufficiency gate: refuse before generating when the evidence is too weak.

Generating from weak evidence is how a RAG system invents answers, so the gate returns a
structured `Refusal` (never a string) when the best evidence is below a floor. With a
cross-encoder, its score is the evidence (`rerank_floor` is model-specific and comes from
settings). Without one, fused RRF scores say nothing absolute (they depend only on ranks), so
the gate falls back to the best *dense-leg cosine* among the kept candidates.

`DEFAULT_DENSE_FLOOR` is calibrated for all-MiniLM-L6-v2 (normalized cosine) on the shared
real documents (tests' `shared_docs`): it sits between the best off-topic and the worst
on-topic question's score. Another embedder's cosine is read on MiniLM-L6's scale first
(query/scales.py), so the one floor holds for every model. Near-domain but unanswerable
questions overlap on-topic ones, so no cosine floor separates them; those pass the gate and
are left to the verify stage (an unsupported answer is refused there). Figures:
docs/measurements.md, "Dense sufficiency floor (query/gate.py)".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from ragstream.core.answers import Refusal
from ragstream.core.telemetry import span
from ragstream.query.rerank import Reranked

DEFAULT_DENSE_FLOOR = 0.25

Basis = Literal["rerank", "dense"]


def gate(
    reranked: Sequence[Reranked],
    *,
    rerank_floor: float,
    dense_floor: float = DEFAULT_DENSE_FLOOR,
    read_cosine: Callable[[float], float] = float,
) -> Refusal | None:
    """None when the best evidence reaches its floor, else an `insufficient_evidence` Refusal.

    Rerank scores are used when any candidate has one; otherwise the best dense cosine, read
    on the floor's scale by `read_cosine` (query/scales.py; the identity by default). A
    candidate found only by the lexical leg has no dense score and cannot pass on its own.
    """
    basis: Basis = "rerank" if any(r.rerank_score is not None for r in reranked) else "dense"
    floor = rerank_floor if basis == "rerank" else dense_floor
    values = [
        r.rerank_score if basis == "rerank" else r.candidate.scores.get("dense") for r in reranked
    ]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    best = max(finite) if finite else None
    with span("query.gate", basis=basis, floor=floor, candidates=len(reranked)) as sp:
        if best is not None and basis == "dense":
            sp.set_attribute("best_raw", best)
            best = read_cosine(best)
        if best is not None:
            sp.set_attribute("best_score", best)
        refusal = _refusal(len(reranked), basis, best, floor)
        sp.set_attribute("refused", refusal is not None)
    return refusal


def wordless(question: str) -> Refusal | None:
    """A refusal for a question with no letters at all (digits and signs only): there is
    nothing in it to look for, whatever the index holds.

    >>> wordless("?!? 123 ... ### 42").check
    'gate'
    >>> wordless("Wer? 誰?") is None
    True
    """
    if any(ch.isalpha() for ch in question):
        return None
    return Refusal(
        reason="insufficient_evidence",
        detail="the question has no words to look for (no letters at all)",
        check="gate",
    )


def _refusal(count: int, basis: Basis, best: float | None, floor: float) -> Refusal | None:
    if count == 0:
        detail = "no candidate passages matched the query (and its filters)"
    elif best is None:
        detail = f"none of the {count} candidates has a {basis} score to judge relevance by"
    elif best < floor:
        detail = (
            f"best {basis} score {best:.3f} is below the sufficiency floor {floor:.3f}; "
            "the index holds nothing close enough to answer from"
        )
    else:
        return None
    return Refusal(reason="insufficient_evidence", detail=detail, best_score=best, check="gate")


__all__ = ["DEFAULT_DENSE_FLOOR", "gate", "wordless"]
