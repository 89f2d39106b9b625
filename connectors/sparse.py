"""BM25 as a Qdrant sparse vector: the lexical leg inside the vector store's own points.

A chunk's sparse vector holds, per analyzed term of its BM25 text (the same analyzer and the
same title/section/neighbour text the tantivy leg indexes: `connectors.lexical`), the
saturated term frequency

    w(t, d) = tf · (k1 + 1) / (tf + k1 · (1 − b + b · |d| / avgdl))

and Qdrant's `Modifier.IDF` multiplies each query term by idf(t) = ln(1 + (N − n + 0.5) /
(n + 0.5)) over the collection at search time, so query · doc = Σ idf(t) · w(t, d): Okapi
BM25 with tantivy's (Lucene's) idf. Term ids are a 32-bit hash of the term (sparse indices
are uint32); two terms colliding in 2^32 merely share a weight.

`avgdl` is fixed at write time (a stored vector cannot follow a moving average); the
measured effect of that choice is in docs/measurements.md ("BM25 as sparse vectors").

A filtered search's plan is Qdrant's: where a segment's filter may match fewer points than
the sparse index's `full_scan_threshold`, it scores each of those points (a plain search),
else it walks the query terms' posting lists and checks the filter on each candidate.
`FULL_SCAN_THRESHOLD` sets it for every collection created with the sparse leg: a
principal's readers match a few percent of a large collection, a few thousand points per
segment, under Qdrant's default (5,000) but far more than its plain search scores as fast
as the posting lists (docs/guide/permissions.md, "Cost").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import xxhash

from ragstream.connectors.lexical import lexical_text, tokenize
from ragstream.connectors.protocols import Hit, SearchFilter, VectorStore
from ragstream.core.models import IndexedChunk

Sparse = tuple[list[int], list[float]]  # (indices, values), indices ascending

K1 = 1.2
B = 0.75
DEFAULT_AVGDL = 120.0  # analyzed terms per chunk text incl. title/section context
# a filter that may match fewer points of a segment is searched plain, point by point
FULL_SCAN_THRESHOLD = 100


def term_id(term: str) -> int:
    return xxhash.xxh3_64_intdigest(term.encode()) & 0xFFFFFFFF


def doc_vector(
    terms: Sequence[str], avgdl: float = DEFAULT_AVGDL, k1: float = K1, b: float = B
) -> Sparse:
    """(indices, values) of one chunk's analyzed terms, sorted by index."""
    if not terms:
        return [], []
    norm = k1 * (1 - b + b * len(terms) / avgdl)
    weights: dict[int, float] = {}
    for term, tf in Counter(terms).items():
        idx = term_id(term)
        weights[idx] = weights.get(idx, 0.0) + tf * (k1 + 1) / (tf + norm)
    indices = sorted(weights)
    return indices, [weights[i] for i in indices]


def bm25_vector(chunk: IndexedChunk) -> Sparse:
    """The chunk's sparse vector over exactly the text the tantivy leg indexes."""
    return doc_vector(tokenize(lexical_text(chunk)), avgdl=DEFAULT_AVGDL)


def query_vector(terms: Sequence[str]) -> Sparse:
    """(indices, values) of a query: each term counts as often as it occurs (as tantivy's
    boolean query of term queries sums a repeated term twice); idf is Qdrant's."""
    counts: dict[int, float] = {}
    for term in terms:
        idx = term_id(term)
        counts[idx] = counts.get(idx, 0.0) + 1.0
    indices = sorted(counts)
    return indices, [counts[i] for i in indices]


class SparseLexicalIndex:
    """The `LexicalIndex` protocol over the vector store's own points (`store.lexical_backend =
    "sparse"`): every chunk's BM25 vector is written by the vector store's upsert and
    `set_positions`, and tombstoned and GC'd with the point, so the lexical leg's writes
    here are no-ops and the two legs cannot disagree. `vectors` names the live store at
    call time (a promote swaps it); a query searches its own pinned side directly."""

    shares_points = True  # the indexer sends BM25-only refreshes to the vector store

    def __init__(self, vectors: Callable[[], VectorStore]) -> None:
        self._vectors = vectors

    def upsert(self, chunks: Sequence[IndexedChunk]) -> None:
        """Written with the point (`VectorStore.upsert` / `set_positions`)."""

    def tombstone(self, point_ids: Sequence[str], deleted_at: float) -> None:
        """The vector store's tombstone is this leg's."""

    def commit(self) -> None:
        """Every vector store write is already searchable."""

    def gc(self, older_than: float) -> int:
        return 0  # the vector store's GC removes the points, sparse vectors and all

    def live_doc_ids(self) -> dict[str, set[str]]:
        return self._vectors().live_doc_points()  # the points are this leg's documents

    def live_ids(self, doc_id: str) -> set[str]:
        return {c.point_id for c in self._vectors().live_chunks(doc_id)}

    def get(self, point_ids: Sequence[str]) -> list[IndexedChunk]:
        return self._vectors().get(point_ids)

    def search(self, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        return self._vectors().search_text(query, limit, flt)

    def doc_freqs(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        return self._vectors().term_doc_freqs(terms)

    def count(self, status: str, flt: SearchFilter | None = None) -> int:
        return self._vectors().count(status, flt)

    def close(self) -> None:
        """The vector store is closed by whoever opened it."""
