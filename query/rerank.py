"""Cross-encoder reranking (DESIGN §6): fused candidates → the k best for one query.

No trained cross-encoder weights are obtainable on our machines, so "no reranker" is a
first-class state, not a crash: `load_reranker(None)` returns None, `rerank` then keeps the
fused order and cuts to k, and the span (and `Answer.reranker`) say so with `NO_RERANKER`.
A reranker that *is* configured but cannot be loaded offline is a configuration error and
raises `RerankerUnavailable` with the reason, rather than silently degrading ranking quality.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from ragstream.core.errors import ModelUnavailableError
from ragstream.core.settings import switched_off
from ragstream.core.telemetry import span
from ragstream.query.retrieve import Candidate

NO_RERANKER = "none (no cross-encoder configured)"
# Characters kept per text before tokenizing: far more than max_length word pieces ever need
# (a word piece is >= 1 char), so the tokenizer's own truncation still decides, but a huge
# chunk no longer costs a full tokenization pass.
_CHARS_PER_TOKEN = 12


class RerankerUnavailable(ModelUnavailableError):
    """A reranker is configured but cannot be loaded here (not installed, not offline, bad)."""


class Reranker(Protocol):
    """Anything that scores (query, text) pairs; higher means more relevant."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


class Reranked(BaseModel):
    """A candidate after the rerank stage; `rerank_score` is None when no reranker ran."""

    model_config = ConfigDict(frozen=True)

    candidate: Candidate
    rerank_score: float | None = None

    @property
    def score(self) -> float:
        """The score that ordered this item: the rerank score if any, else the fused one."""
        return self.rerank_score if self.rerank_score is not None else self.candidate.score


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` on CPU, loaded strictly from local files."""

    def __init__(self, name_or_path: str, *, max_length: int = 512, batch_size: int = 32) -> None:
        from sentence_transformers import CrossEncoder

        if max_length < 8 or batch_size < 1:
            raise ValueError(f"bad max_length={max_length} / batch_size={batch_size}")
        self.name = name_or_path
        self.batch_size = batch_size
        self.model: Any = CrossEncoder(
            name_or_path, max_length=max_length, device="cpu", local_files_only=True
        )
        # asking for more tokens than the model has positions crashes at predict time
        positions = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        self.max_length = min(int(self.model.max_seq_length or max_length), max_length)
        if isinstance(positions, int) and positions > 0:
            self.max_length = min(self.max_length, positions)
        self.model.max_seq_length = self.max_length

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One float per text, in input order; pairs are truncated to `max_length` tokens."""
        if not texts:
            return []
        cap = self.max_length * _CHARS_PER_TOKEN
        pairs = [(query[:cap], text[:cap]) for text in texts]
        scores = self.model.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(s) for s in scores.reshape(len(texts), -1)[:, 0]]


def load_reranker(spec: str | None, *, max_length: int = 512) -> Reranker | None:
    """None when not configured (None, "", "none"); else a loaded cross-encoder.

    Raises RerankerUnavailable when configured but not loadable offline, so a typo in a
    path is reported at startup instead of silently serving unreranked results.
    """
    if spec is None or switched_off(spec):
        return None
    try:
        return CrossEncoderReranker(spec.strip(), max_length=max_length)
    except Exception as exc:  # any load failure means: this reranker is not usable here
        raise RerankerUnavailable(
            f"cannot load cross-encoder {spec!r} offline (local files only; no trained "
            f"cross-encoder weights are installed unless you provide a path): {exc}"
        ) from exc


def rerank(
    query: str, candidates: Sequence[Candidate], reranker: Reranker | None, k: int
) -> list[Reranked]:
    """The k best candidates: by cross-encoder score when a reranker is given (ties keep
    the fused order), else the fused order itself, cut to k."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    name = reranker.name if reranker is not None else "none"
    with span("query.rerank", model=name, candidates=len(candidates), k=k) as sp:
        sp.set_attribute("skipped", reranker is None)
        if reranker is None:
            out = [Reranked(candidate=c) for c in candidates[:k]]
        else:
            scores = reranker.score(query, [c.chunk.text for c in candidates])
            if len(scores) != len(candidates):
                raise RuntimeError(
                    f"reranker {name!r} returned {len(scores)} scores for {len(candidates)} texts"
                )
            order = sorted(range(len(candidates)), key=lambda i: _sort_key(scores[i], i))
            out = [Reranked(candidate=candidates[i], rerank_score=scores[i]) for i in order[:k]]
        sp.set_attribute("returned", len(out))
        if out:
            sp.set_attribute("top_score", out[0].score)
    return out


def _sort_key(score: float, index: int) -> tuple[float, int]:
    """Descending score, NaN last, then fused position (a stable tie-break)."""
    return (-score if not math.isnan(score) else math.inf, index)


__all__ = [
    "NO_RERANKER",
    "CrossEncoderReranker",
    "Reranked",
    "Reranker",
    "RerankerUnavailable",
    "load_reranker",
    "rerank",
]
