"""Hybrid retrieval: dense + BM25 legs under one store-side filter, then fusion.

A query vector is only meaningful in the space its collection was built in, so the retriever
loads the embedder *recorded on the live collection* (never the one in settings) and refuses
to run when the loaded weights do not match that record: a silent mismatch would return
plausible-looking nonsense. Both legs get the same `SearchFilter`, applied inside each store,
so a tenant or path restriction can never be widened by fusion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ragstream.connectors.protocols import Hit, LexicalIndex, SearchFilter, VectorStore
from ragstream.connectors.stores import (
    PointerFollower,
    configured_live,
    open_configured,
    open_lexical_index,
)
from ragstream.connectors.vector_stores import collection_name
from ragstream.core.answers import DEFAULT_RRF_K
from ragstream.core.errors import NoIndexError
from ragstream.core.models import EmbedderVersion, IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.telemetry import span
from ragstream.operators.embed import (
    Embedder,
    EmbedderMismatch,
    check_version,
    embedder_spec,
    open_embedder,
    with_vector_memo,
)
from ragstream.query.fuse import dbsf, rrf

Fusion = Literal["rrf", "dbsf"]
NO_FILTER = SearchFilter()


def no_index(s: Settings) -> NoIndexError:
    """The one message for a data dir with nothing indexed in it: what to run next."""
    return NoIndexError(
        f"no index in {s.data_dir} yet: run `ragstream sync PATH --data-dir {s.data_dir}` "
        "first (or pass the --data-dir that holds it)"
    )


class Candidate(BaseModel):
    """A fused candidate: the chunk, its fused score, and each leg's rank and raw score."""

    model_config = ConfigDict(frozen=True)

    chunk: IndexedChunk
    score: float
    ranks: dict[str, int]
    scores: dict[str, float]


class RetrievalResult(BaseModel):
    """Everything a reranker, gate or evaluation needs, in fused order, with stage timings."""

    query: str
    fusion: Fusion
    k: int
    candidates: list[Candidate]
    hits: dict[str, int]  # leg -> how many hits it returned
    timings_ms: dict[str, float]  # embed, dense, lexical, fuse, total


class LiveSide(Protocol):
    """One collection as a query sees it: its name, its store and the embedder it was built
    with (structural, so the ingest side's own `Side` objects qualify too)."""

    @property
    def collection(self) -> str: ...
    @property
    def embedder(self) -> Embedder: ...
    @property
    def vectors(self) -> VectorStore: ...


class SideSource(Protocol):
    """Hands out the side a query should search *now*; asked once per query."""

    def current(self) -> LiveSide: ...


class FixedSide:
    """A `SideSource` that always answers one side: a query pins the side it started on
    (`QueryEngine`), and the reindex eval gate scores each side alone."""

    def __init__(self, side: LiveSide) -> None:
        self._side = side

    def current(self) -> LiveSide:
        return self._side


@dataclass(frozen=True)
class OpenSide:
    collection: str
    embedder: Embedder
    vectors: VectorStore


class PointerTracker:
    """Follows the live pointer on its own: a standalone query process (`serve`, an embedded
    `Client`, eval) searches whatever collection the pointer names at the start of each query,
    with that collection's recorded embedder, so a blue/green promote or rollback made through
    the same stores is picked up without a restart and a query never mixes the two sides
    (`connectors.stores.PointerFollower` reads the pointer; the side a query pinned stays open
    after the swap, only sides retired `RETIRED_KEPT` swaps ago are closed)."""

    RETIRED_KEPT = 2

    def __init__(self, settings: Settings, embedder_override: str | Embedder | None = None):
        self._settings, self._override = settings, embedder_override
        live = configured_live(settings)
        if live is None:
            raise no_index(settings)
        self._follower = PointerFollower(
            settings,
            (live[0], self._open(*live)),
            self._open_swapped,
            keep=self.RETIRED_KEPT,
            retire=lambda side: side.vectors.close(),
            missing=lambda: no_index(settings),
        )

    def _open_swapped(self, collection: str, recorded: EmbedderVersion) -> OpenSide:
        self._override = None  # an override only ever stood in for the first side
        return self._open(collection, recorded)

    def _open(self, collection: str, recorded: EmbedderVersion) -> OpenSide:
        s, override = self._settings, self._override
        if isinstance(override, Embedder):
            embedder = override
        else:
            embedder = open_embedder(override or embedder_spec(recorded), s, recorded.dimension)
        check_version(collection, recorded, embedder.version)
        if (
            collection_name(s.store.index_name, recorded) != collection
        ):  # would open a new, empty one
            raise RuntimeError(f"live collection {collection!r} is not named for {recorded.slug}")
        vectors = open_configured(s, recorded)
        return OpenSide(collection, embedder, vectors)

    def current(self) -> OpenSide:
        return self._follower.current()

    def close(self) -> None:
        for side in self._follower.held():
            side.vectors.close()


class Retriever:
    """Queries one side (see `SideSource`) and the lexical index under one filter. Query
    vectors come through the side's embedder behind the vector memo of `memo` entries
    (`query.vector_memo`, the one the generator and verifier share; 0: none), so a question
    asked again is not encoded again: with a remote model, not sent again."""

    def __init__(
        self,
        source: SideSource,
        lexical: LexicalIndex,
        owned: PointerTracker | None = None,
        memo: int = 0,
    ) -> None:
        self.source, self.lexical, self._owned, self.memo = source, lexical, owned, memo

    def query_encoder(self, side: LiveSide) -> Embedder:
        """`side`'s embedder behind this retriever's vector memo."""
        return with_vector_memo(side.embedder, self.memo)

    @property
    def side(self) -> LiveSide:
        return self.source.current()

    @property
    def embedder(self) -> Embedder:
        return self.side.embedder

    @property
    def vectors(self) -> VectorStore:
        return self.side.vectors

    @property
    def collection(self) -> str:
        return self.side.collection

    @classmethod
    def open(
        cls, settings: Settings, *, embedder_override: str | Embedder | None = None
    ) -> Retriever:
        """Open from settings, following the live pointer; `embedder_override` replaces the
        recorded model (tests, local copies of the weights) and is still checked against the
        record."""
        tracker = PointerTracker(settings, embedder_override)
        try:
            lexical = open_lexical_index(
                settings.lexical, settings.lexical_dir, lambda: tracker.current().vectors
            )
        except BaseException:
            tracker.close()
            raise
        return cls(tracker, lexical, owned=tracker, memo=settings.query.vector_memo)

    def retrieve(
        self,
        query: str,
        n: int = 100,
        flt: SearchFilter = NO_FILTER,
        fusion: Fusion = "rrf",
        k: int = DEFAULT_RRF_K,
        weights: Mapping[str, float] | None = None,
        *,
        lexical_query: str | None = None,
        dense_text: str | None = None,
        dense_vector: Sequence[float] | None = None,
    ) -> RetrievalResult:
        """Top `n` per leg under `flt`, fused; every leg's rank and score stays visible.

        `lexical_query` / `dense_text` replace the text one leg searches with (query
        transforms: extracted keywords for BM25, a hypothetical answer for the embedding);
        `dense_vector` is the dense text's query vector where the caller encoded it already,
        with this side's embedder (it is not encoded again). The result still reports
        `query`, the question the user asked.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if fusion not in ("rrf", "dbsf"):
            raise ValueError(f"unknown fusion {fusion!r}: expected 'rrf' or 'dbsf'")
        timings: dict[str, float] = {}
        start = time.perf_counter()
        side = self.side  # one side for the whole query, even if a promote lands meanwhile
        with span("query.retrieve", n=n, fusion=fusion, k=k, collection=side.collection):
            dense_in = query if dense_text is None else dense_text
            lexical_in = query if lexical_query is None else lexical_query
            with span(
                "query.embed",
                model=side.embedder.version.slug,
                chars=len(dense_in),
                transformed=dense_text is not None,
                reused=dense_vector is not None,
            ):
                vector = (
                    list(dense_vector)
                    if dense_vector is not None
                    else self.query_encoder(side).encode_query(dense_in)
                )
            timings["embed"] = _ms(start)
            dense = _leg("dense", n, timings, lambda: side.vectors.search(vector, n, flt))
            lexical = _leg("lexical", n, timings, lambda: self._lexical(side, lexical_in, n, flt))
            legs = {"dense": dense, "lexical": lexical}
            t = time.perf_counter()
            candidates = _fuse(legs, fusion, k, weights)
            timings["fuse"] = _ms(t)
        timings["total"] = _ms(start)
        hits = {leg: len(got) for leg, got in legs.items()}
        return RetrievalResult(
            query=query, fusion=fusion, k=k, candidates=candidates, hits=hits, timings_ms=timings
        )

    def lexical_search(self, query: str, n: int, flt: SearchFilter = NO_FILTER) -> list[Hit]:
        """The BM25 leg alone, on the side searched now (a conversation's weak-turn test)."""
        return self._lexical(self.side, query, n, flt)

    def _lexical(self, side: LiveSide, query: str, n: int, flt: SearchFilter) -> list[Hit]:
        """BM25 hits; with the sparse leg, from the query's own side (its points carry it), so
        a promote between the legs cannot mix two collections in one query."""
        if self.lexical.shares_points:
            return side.vectors.search_text(query, n, flt)
        return self.lexical.search(query, n, flt)

    def close(self) -> None:
        """Release the lexical index and, if this retriever opened it, the vector side (an
        embedded data dir is owned by one open client)."""
        try:
            self.lexical.close()
        finally:
            if self._owned is not None:
                self._owned.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _leg(leg: str, n: int, timings: dict[str, float], search: Callable[[], list[Hit]]) -> list[Hit]:
    start = time.perf_counter()
    with span(f"query.retrieve.{leg}", limit=n) as sp:
        hits = search()
        sp.set_attribute("hits", len(hits))
        if hits:
            sp.set_attribute("top_score", hits[0].score)
    timings[leg] = _ms(start)
    return hits


def _fuse(
    legs: dict[str, list[Hit]], fusion: Fusion, k: int, weights: Mapping[str, float] | None
) -> list[Candidate]:
    with span("query.fuse", method=fusion, k=k) as sp:
        scored = {leg: [(h.chunk.point_id, h.score) for h in hits] for leg, hits in legs.items()}
        fused = rrf(scored, k, weights) if fusion == "rrf" else dbsf(scored, weights)
        # the dense copy of a chunk wins: it carries the embedder slug
        chunks = {h.chunk.point_id: h.chunk for h in [*legs["lexical"], *legs["dense"]]}
        out = [
            Candidate(chunk=chunks[f.point_id], score=f.score, ranks=f.ranks, scores=f.scores)
            for f in fused
        ]
        sp.set_attribute("candidates", len(out))
        if out:
            sp.set_attribute("top_score", out[0].score)
    return out


def fuse_results(
    query: str, results: list[RetrievalResult], k: int = DEFAULT_RRF_K
) -> RetrievalResult:
    """Several retrievals for one question (decomposed sub-questions) → one result.

    RRF over each sub-result's fused order (legs `sub1`, `sub2`, …): a chunk that answers
    one part of the question ranks as high there as it did alone, and one that serves two
    parts rises. Each candidate keeps its best rank and score per retrieval leg across the
    sub-results, so the gate still reads a real dense cosine. Timings and hit counts add up.
    """
    if not results:
        raise ValueError("fuse_results needs at least one retrieval result")
    if len(results) == 1:
        return results[0]
    subs = {f"sub{i}": r.candidates for i, r in enumerate(results, 1)}
    with span("query.fuse", method="rrf", k=k, subqueries=len(results)) as sp:
        fused = rrf({s: [(c.chunk.point_id, c.score) for c in cs] for s, cs in subs.items()}, k)
        best: dict[str, Candidate] = {}
        ranks: dict[str, dict[str, int]] = {}
        scores: dict[str, dict[str, float]] = {}
        for cs in subs.values():
            for c in cs:
                pid = c.chunk.point_id
                best.setdefault(pid, c)
                best_rank, best_score = ranks.setdefault(pid, {}), scores.setdefault(pid, {})
                for leg, rank in c.ranks.items():
                    best_rank[leg] = min(rank, best_rank.get(leg, rank))
                for leg, score in c.scores.items():
                    best_score[leg] = max(score, best_score.get(leg, score))
        out = [
            Candidate(
                chunk=best[f.point_id].chunk,
                score=f.score,
                ranks={**ranks[f.point_id], **f.ranks},
                scores=scores[f.point_id],
            )
            for f in fused
        ]
        sp.set_attribute("candidates", len(out))
    timings: dict[str, float] = {}
    hits: dict[str, int] = {}
    for r in results:
        for key, ms in r.timings_ms.items():
            timings[key] = timings.get(key, 0.0) + ms
        for leg, count in r.hits.items():
            hits[leg] = hits.get(leg, 0) + count
    return RetrievalResult(
        query=query, fusion=results[0].fusion, k=k, candidates=out, hits=hits, timings_ms=timings
    )


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


__all__ = [
    "Candidate",
    "EmbedderMismatch",
    "NoIndexError",
    "RetrievalResult",
    "Retriever",
    "fuse_results",
]
