"""Hybrid retrieval (DESIGN §6): dense + BM25 legs under one store-side filter, then fusion.

A query vector is only meaningful in the space its collection was built in, so the retriever
loads the embedder *recorded on the live collection* (never the one in settings) and refuses
to run when the loaded weights do not match that record: a silent mismatch would return
plausible-looking nonsense. Both legs get the same `SearchFilter`, applied inside each store,
so a tenant or path restriction can never be widened by fusion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from connectors.lexical import open_lexical_index
from connectors.protocols import Hit, LexicalIndex, SearchFilter, VectorStore
from connectors.vector_stores import collection_name, live_collection, open_vector_store
from core.answers import DEFAULT_RRF_K
from core.models import EmbedderVersion, IndexedChunk
from core.settings import Settings
from core.telemetry import span
from operators.embed import Embedder, EmbedderUnavailable, load_embedder
from query.fuse import dbsf, rrf

Fusion = Literal["rrf", "dbsf"]
NO_FILTER = SearchFilter()
_PRESETS = {
    "sentence-transformers/all-MiniLM-L6-v2": "minilm-l6",
    "sentence-transformers/paraphrase-MiniLM-L3-v2": "minilm-l3",
    "tokenlearn-static-model": "static",
}


class NoIndexError(RuntimeError):
    """There is no live collection to query (nothing has been synced into this data dir)."""


class EmbedderMismatch(EmbedderUnavailable):
    """The embedder that loaded here is not the one the live collection was built with."""


def embedder_spec(recorded: EmbedderVersion) -> str:
    """The `load_embedder` spec for a recorded name: a preset when known, else the name."""
    return _PRESETS.get(recorded.name, recorded.name)


def check_version(collection: str, recorded: EmbedderVersion, loaded: EmbedderVersion) -> None:
    """Everything but the name must match (a local path to the same weights is fine)."""
    want, got = recorded.model_dump(exclude={"name"}), loaded.model_dump(exclude={"name"})
    diff = [f"{f} {want[f]!r} != {got[f]!r}" for f in want if want[f] != got[f]]
    if diff:
        raise EmbedderMismatch(
            f"collection {collection!r} was built with {recorded.name!r}, but the embedder "
            f"loaded here ({loaded.name!r}) differs ({'; '.join(diff)}); reindex or install "
            "the recorded weights"
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


class Retriever:
    """Queries the live collection and the lexical index; owns (and closes) both stores."""

    def __init__(
        self, embedder: Embedder, vectors: VectorStore, lexical: LexicalIndex, collection: str
    ) -> None:
        self.embedder, self.vectors, self.lexical = embedder, vectors, lexical
        self.collection = collection

    @classmethod
    def open(
        cls, settings: Settings, *, embedder_override: str | Embedder | None = None
    ) -> Retriever:
        """Open from settings; `embedder_override` replaces the recorded model (tests, local
        copies of the weights) and is still checked against the record."""
        s = settings
        live = live_collection(s.vector_backend, s.vectors_dir, s.index_name, s.qdrant_url)
        if live is None:
            raise NoIndexError(f"no live index {s.index_name!r} in {s.vectors_dir}; sync first")
        collection, recorded = live
        if isinstance(embedder_override, Embedder):
            embedder = embedder_override
        else:
            embedder = load_embedder(embedder_override or embedder_spec(recorded))
        check_version(collection, recorded, embedder.version)
        if collection_name(s.index_name, recorded) != collection:  # would open a new, empty one
            raise RuntimeError(f"live collection {collection!r} is not named for {recorded.slug}")
        vectors = open_vector_store(
            s.vector_backend, s.vectors_dir, s.index_name, recorded, url=s.qdrant_url
        )
        try:
            lexical = open_lexical_index(s.lexical_backend, s.lexical_dir)
        except BaseException:
            vectors.close()
            raise
        return cls(embedder, vectors, lexical, collection)

    def retrieve(
        self,
        query: str,
        n: int = 100,
        flt: SearchFilter = NO_FILTER,
        fusion: Fusion = "rrf",
        k: int = DEFAULT_RRF_K,
        weights: Mapping[str, float] | None = None,
    ) -> RetrievalResult:
        """Top `n` per leg under `flt`, fused; every leg's rank and score stays visible."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if fusion not in ("rrf", "dbsf"):
            raise ValueError(f"unknown fusion {fusion!r}: expected 'rrf' or 'dbsf'")
        timings: dict[str, float] = {}
        start = time.perf_counter()
        with span("query.retrieve", n=n, fusion=fusion, k=k, collection=self.collection):
            with span("query.embed", model=self.embedder.version.slug, chars=len(query)):
                vector = self.embedder.encode_query(query)
            timings["embed"] = _ms(start)
            dense = _leg("dense", n, timings, lambda: self.vectors.search(vector, n, flt))
            lexical = _leg("lexical", n, timings, lambda: self.lexical.search(query, n, flt))
            legs = {"dense": dense, "lexical": lexical}
            t = time.perf_counter()
            candidates = _fuse(legs, fusion, k, weights)
            timings["fuse"] = _ms(t)
        timings["total"] = _ms(start)
        hits = {leg: len(got) for leg, got in legs.items()}
        return RetrievalResult(
            query=query, fusion=fusion, k=k, candidates=candidates, hits=hits, timings_ms=timings
        )

    def close(self) -> None:
        """Release both stores (an embedded data dir is owned by one open client)."""
        try:
            self.lexical.close()
        finally:
            self.vectors.close()

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


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


__all__ = ["Candidate", "EmbedderMismatch", "NoIndexError", "RetrievalResult", "Retriever"]
