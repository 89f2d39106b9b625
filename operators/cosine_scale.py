"""One cosine scale across embedders: a live embedder's cosine read as the reference
embedder's.

The gate's dense floor and the answerability decision's dense signals are fitted on one
embedder's cosines (the reference: the embedder the decision names). Another embedder puts
the same two texts at another cosine: an e5-style model puts unrelated text near 0.7, a
static model spreads every pair wider. Read raw, a floor fitted on the reference would then
answer or refuse questions wholesale.

`measure_scale` encodes the same pairs of texts, drawn from the index's own chunks, with
both embedders and matches the two distributions of cosines quantile by quantile
(`quantile_knots`). The pairs need no labels (`calibration_pairs`): a sentence of a chunk and
a handful of its words stand in for questions, each read against its own chunk, another
chunk of the same document and chunks of other documents. The result (`CosineScale`) is a
monotone piecewise-linear map under which any floor passes the same share of these pairs
on either model. It is kept with the live embedder's version (`<state_dir>/scales/<slug>.json`).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragstream.core.models import IndexedChunk
from ragstream.operators.chunk import embedding_text, split_sentences
from ragstream.operators.embed import Embedder

SAMPLE_CHUNKS = 64  # chunks a scale is measured on
OTHERS_PER_QUERY = 4  # chunks of other documents each pseudo-question is read against
KNOTS = 41  # quantiles the map passes through (every 2.5 %)
MIN_CHUNKS = 8  # fewer live chunks (or one document): no scale yet, cosines read raw
QUERY_WORDS = 16  # a sentence standing in for a question is cut to this many words
KEYWORDS = 5  # words of a chunk that stand in for a keyword question
_WORD = re.compile(r"[^\W\d_]{4,}")


@dataclass(frozen=True)
class CosineScale:
    """A live embedder's cosines mapped onto the reference embedder's: `knots` are
    (live, reference) cosine pairs, both increasing; between them the map is linear, beyond
    them it holds the end knot's value. No knots: the identity (the live embedder is the
    reference, or there is too little text to measure yet)."""

    embedder: str  # the live embedder's version slug
    reference: str  # the reference embedder's version slug
    knots: tuple[tuple[float, float], ...] = ()
    pairs: int = 0  # pairs of texts the knots were measured on
    chunks: int = 0  # live chunks in the collection when measured

    @property
    def identity(self) -> bool:
        return not self.knots

    def read(self, cosine: float) -> float:
        """`cosine` of the live embedder on the reference's scale.

        >>> s = CosineScale("e5", "minilm", ((0.7, 0.0), (0.8, 0.3), (0.9, 0.7)))
        >>> [round(s.read(c), 3) for c in (0.6, 0.75, 0.85, 0.95)]
        [0.0, 0.15, 0.5, 0.7]
        >>> CosineScale("m", "m").read(0.42)
        0.42
        """
        if not self.knots or not math.isfinite(cosine):
            return cosine
        live, ref = zip(*self.knots, strict=True)
        return float(np.interp(cosine, live, ref))

    def to_json(self) -> dict[str, object]:
        return {
            "embedder": self.embedder,
            "reference": self.reference,
            "knots": [list(k) for k in self.knots],
            "pairs": self.pairs,
            "chunks": self.chunks,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CosineScale:
        """The scale `to_json` wrote; ValueError for anything else."""
        try:
            return cls(
                embedder=str(raw["embedder"]),
                reference=str(raw["reference"]),
                knots=tuple((float(a), float(b)) for a, b in raw.get("knots", [])),
                pairs=int(raw.get("pairs", 0)),
                chunks=int(raw.get("chunks", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a cosine scale: {exc}") from exc


@dataclass(frozen=True)
class Pairs:
    """Pseudo-questions, passages and which (question, passage) index pairs to compare."""

    questions: list[str]
    passages: list[str]
    pairs: list[tuple[int, int]]


def quantile_knots(
    live: Sequence[float], reference: Sequence[float], knots: int = KNOTS
) -> tuple[tuple[float, float], ...]:
    """(live, reference) cosine pairs at the same quantiles of the two samples (cosines of
    the same text pairs under each embedder), strictly increasing in the live cosine.

    >>> quantile_knots([0.70, 0.75, 0.80, 0.90, 0.95], [0.0, 0.1, 0.2, 0.5, 0.6], knots=3)
    ((0.7, 0.0), (0.8, 0.2), (0.95, 0.6))
    >>> quantile_knots([0.5] * 4, [0.1, 0.2, 0.3, 0.4], knots=3)
    ((0.5, 0.25),)
    """
    qs = np.linspace(0.0, 1.0, knots)
    xs = np.round(np.quantile(np.asarray(live, np.float64), qs), 6)
    ys = np.quantile(np.asarray(reference, np.float64), qs)
    return tuple((x, round(float(np.mean(group)), 6)) for x, group in _groups(xs, ys))


def _groups(xs: np.ndarray, ys: np.ndarray) -> list[tuple[float, list[float]]]:
    """Equal live quantiles merged into one knot (their reference values averaged)."""
    groups: list[tuple[float, list[float]]] = []
    for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
        if groups and x <= groups[-1][0]:
            groups[-1][1].append(y)
        else:
            groups.append((x, [y]))
    return groups


def calibration_pairs(chunks: Sequence[IndexedChunk], seed: int = 0) -> Pairs:
    """Label-free pairs from `chunks` (`SAMPLE_CHUNKS` of them, drawn with `seed`): each
    chunk gives up to two pseudo-questions (its longest early sentence, cut to
    `QUERY_WORDS` words; its `KEYWORDS` longest words), each read against its own chunk,
    another chunk of its document, and `OTHERS_PER_QUERY` chunks of other documents.
    Deterministic for a seed. Empty when the chunks come from fewer than two documents.
    """
    rng = random.Random(seed)
    pool = sorted(chunks, key=lambda c: c.point_id)
    picked = rng.sample(pool, min(SAMPLE_CHUNKS, len(pool)))
    if len({c.doc_id for c in picked}) < 2:
        return Pairs([], [], [])
    passages = [embedding_text(c.context, c.text) for c in picked]
    by_doc: dict[str, list[int]] = {}
    for i, c in enumerate(picked):
        by_doc.setdefault(c.doc_id, []).append(i)
    questions: list[str] = []
    pairs: list[tuple[int, int]] = []
    for i, chunk in enumerate(picked):
        same = [j for j in by_doc[chunk.doc_id] if j != i]
        other = [j for j in range(len(picked)) if picked[j].doc_id != chunk.doc_id]
        for question in pseudo_questions(chunk.text):
            q = len(questions)
            questions.append(question)
            pairs.append((q, i))
            if same:
                pairs.append((q, rng.choice(same)))
            pairs.extend((q, j) for j in rng.sample(other, min(OTHERS_PER_QUERY, len(other))))
    return Pairs(questions, passages, pairs)


def pseudo_questions(text: str) -> list[str]:
    """What stands in for questions about `text`: its longest sentence among the first
    four (cut to `QUERY_WORDS` words) and its `KEYWORDS` longest words (in text order).

    >>> pseudo_questions("Pumps move water. The station P-7 runs at forty litres a second.")
    ['The station P-7 runs at forty litres a second.', 'Pumps water station litres second']
    """
    out: list[str] = []
    early = [s.strip() for s in split_sentences(text)[:4] if s.strip()]
    if early:
        words = max(early, key=lambda s: len(s.split())).split()
        out.append(" ".join(words[:QUERY_WORDS]))
    seen: dict[str, int] = {}
    for m in _WORD.finditer(text):
        seen.setdefault(m.group(0), m.start())
    longest = sorted(seen, key=lambda w: (-len(w), seen[w]))[:KEYWORDS]
    if len(longest) >= 2:
        out.append(" ".join(sorted(longest, key=seen.__getitem__)))
    return [q for q in dict.fromkeys(out) if q]


def pair_cosines(embedder: Embedder, pairs: Pairs) -> list[float]:
    """The cosine of each pair of `pairs` under `embedder` (questions encoded as queries,
    passages as passages, both normalized)."""
    questions = np.asarray(embedder.encode_queries(pairs.questions), np.float32)
    passages = np.asarray(embedder.encode_passages(pairs.passages), np.float32)
    return [float(questions[q] @ passages[p]) for q, p in pairs.pairs]


def measure_scale(
    live: Embedder, reference: Embedder, chunks: Sequence[IndexedChunk], live_count: int
) -> CosineScale:
    """The scale that reads `live`'s cosines as `reference`'s, measured on `chunks` (a
    sample of the collection's live chunks, `live_count` in all). The identity when live is
    the reference, or when the chunks are too few to measure on."""
    slug, ref = live.version.slug, reference.version.slug
    pairs = calibration_pairs(chunks) if slug != ref and len(chunks) >= MIN_CHUNKS else None
    if pairs is None or not pairs.pairs:
        return CosineScale(slug, ref, chunks=live_count)
    knots = quantile_knots(pair_cosines(live, pairs), pair_cosines(reference, pairs))
    return CosineScale(slug, ref, knots, pairs=len(pairs.pairs), chunks=live_count)


__all__ = [
    "CosineScale",
    "Pairs",
    "calibration_pairs",
    "measure_scale",
    "pair_cosines",
    "pseudo_questions",
    "quantile_knots",
]
