"""Answerability: do the retrieved chunks hold what the question is about?

The sufficiency gate asks whether anything relevant came back; text can be near a question
and still not answer it ("What is the capital of Mongolia?" retrieves "Liquidity and capital
resources"). The evidence signal here is *coverage*: the share of the question's informative
terms (the lexical analyzer's stemmed, stop-word-free tokens, weighted by their BM25 IDF in
this index) that one retrieved chunk contains. A term the index has never seen weighs most,
so a question about something absent from the documents scores low however close its
embedding lands. Pure functions; the engine supplies the chunks and the IDF statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ragstream.connectors.lexical import tokenize
from ragstream.core.answers import Answerability
from ragstream.core.models import IndexedChunk

DocFreqs = Callable[[Sequence[str]], tuple[int, dict[str, int]]]

# How a question is asked, not what it is about: the index's stop words keep these (they
# are content in a document), but in a question they carry no topic, and in a small index
# a rare "does" would outweigh the subject.
QUESTION_WORDS = frozenset(
    tokenize(
        "what which who whom whose when where why how do does did doing done can could should "
        "would may might must shall i me my mine you your yours we us our please tell explain "
        "describe give list show find mean means meaning know about here get many much long "
        "often"
    )
)


def question_terms(question: str) -> list[str]:
    """The analyzed terms a question is about (sorted, distinct).

    >>> question_terms("What does the hybrid chunker do?")
    ['chunker', 'hybrid']
    """
    return sorted(set(tokenize(question)) - QUESTION_WORDS)


def idf(documents: int, containing: int) -> float:
    """BM25's IDF (as tantivy and rank-bm25 weigh terms), never negative.

    >>> round(idf(100, 0), 3), round(idf(100, 50), 3), idf(100, 100) < idf(100, 1)
    (5.308, 0.693, True)
    """
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


def chunk_terms(chunk: IndexedChunk) -> set[str]:
    """What a chunk says, in analyzed terms: its title, section path and text."""
    return set(tokenize(" ".join((chunk.title, *chunk.section_path, chunk.text))))


def coverage(weights: Mapping[str, float], terms: set[str]) -> float:
    """The IDF-weighted share of the question's terms found in `terms` (1.0 if the question
    has no informative term at all: nothing to miss).

    >>> coverage({"capit": 1.0, "mongolia": 7.0}, {"capit", "liquid"})
    0.125
    """
    total = sum(weights.values())
    if total <= 0.0:
        return 1.0
    return sum(w for t, w in weights.items() if t in terms) / total


def judge(
    question: str,
    chunks: Sequence[IndexedChunk],
    doc_freqs: DocFreqs,
    floor: float,
    dense_best: float = 0.0,
    dense_floor: float = 1.0,
) -> Answerability:
    """Score the best chunk's coverage of the question and decide: answerable when it
    reaches `floor`, or when the best dense cosine reaches `dense_floor` (a question asked in
    other words than the documents use can still match them closely in meaning)."""
    asked = question_terms(question)
    documents, df = doc_freqs(asked)
    weights = {t: idf(documents, df.get(t, 0)) for t in asked}
    per_chunk = [coverage(weights, chunk_terms(c)) for c in chunks]
    union = coverage(weights, set().union(*(chunk_terms(c) for c in chunks)))
    total = sum(weights.values())
    unseen = sum(w for t, w in weights.items() if df.get(t, 0) == 0) / total if total else 0.0
    best = max(per_chunk, default=0.0)
    return Answerability(
        score=round(best, 4),
        answerable=best >= floor or dense_best >= dense_floor,
        floor=floor,
        signals={
            "coverage_best": round(best, 4),
            "dense_best": round(dense_best, 4),
            "coverage_union": round(union, 4),
            "unseen_term_share": round(unseen, 4),
            "question_terms": float(len(asked)),
        },
    )
