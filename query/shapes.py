"""Pure conversions between the query engine's values and the query contract's types.

An answer before any stage ran; a request's filters as the stores' `SearchFilter`; a
ranked candidate as the `CandidateView` an answer lists or the `RetrievedChunk` a `Retrieval`
lists; the cited sources as `Citation`s; and an answer as the retrieval log's entry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ragstream.connectors.protocols import SearchFilter
from ragstream.core.answers import (
    Answer,
    CandidateView,
    Citation,
    Claim,
    QueryFilters,
    Retrieval,
    RetrievedChunk,
    SourceChunk,
)
from ragstream.core.filters import Where
from ragstream.query.rerank import Reranked


def blank_answer(query: str, reranker: str, generator: str, trace_id: str) -> Answer:
    """An answer before any stage ran: no text, no candidates, nothing refused."""
    return Answer(
        query=query,
        text="",
        citations=[],
        claims=[],
        grounding=0.0,
        embedder="",
        reranker=reranker,
        generator=generator,
        trace_id=trace_id,
    )


def cited(answer: Answer) -> list[SourceChunk]:
    """The sources an answer cites."""
    ids = {c.cid for c in answer.citations}
    return [s for s in answer.sources if s.cid in ids]


def search_filter(
    filters: QueryFilters,
    tenants: tuple[str, ...] | None,
    readers: tuple[str, ...] | None = None,
    where: Where | None = None,
) -> SearchFilter:
    """The caller's filters, metadata filter (checked), tenants and readers
    (`Settings.readers_of` its principal) as both stores apply them."""
    return SearchFilter(
        where=where,
        doc_ids=tuple(filters.doc_ids) if filters.doc_ids is not None else None,
        tenants=tenants,
        readers=readers,
        path_prefix=filters.path_prefix,
        file_types=tuple(filters.file_types) if filters.file_types is not None else None,
    )


def candidate_view(r: Reranked) -> CandidateView:
    c = r.candidate
    return CandidateView(
        point_id=c.chunk.point_id,
        doc_id=c.chunk.doc_id,
        score=c.score,
        ranks=c.ranks,
        scores=c.scores,
        rerank_score=r.rerank_score,
        embedder=c.chunk.embedder,
    )


def retrieved_chunk(rank: int, r: Reranked) -> RetrievedChunk:
    c = r.candidate
    return RetrievedChunk(
        **RetrievedChunk.fields_of(c.chunk),
        rank=rank,
        score=r.score,
        ranks=c.ranks,
        scores=c.scores,
        rerank_score=r.rerank_score,
        embedder=c.chunk.embedder,
    )


def retrieval(answer: Answer, ranked: Sequence[Reranked]) -> Retrieval:
    """What `retrieve` returns: the ranked candidates with their text, and the gate's
    verdict, from the answer its rank stage began."""
    return Retrieval(
        query=answer.query,
        results=[retrieved_chunk(i, r) for i, r in enumerate(ranked, 1)],
        refusal=answer.refusal,
        effective_query=answer.effective_query,
        embedder=answer.embedder,
        reranker=answer.reranker,
        timings_ms=answer.timings_ms,
        trace_id=answer.trace_id,
    )


def citations(claims: Sequence[Claim], sources: Sequence[SourceChunk]) -> list[Citation]:
    """The sources the claims cite, each once, in citation id order (S1, S2, ...); a cited
    id no source has is left out."""
    by_cid = {s.cid: s for s in sources}
    cited = sorted(
        {c for claim in claims for c in claim.cids if c in by_cid},
        key=lambda c: int(c[1:]) if c[1:].isdigit() else 0,
    )
    return [citation(by_cid[c]) for c in cited]


def citation(s: SourceChunk) -> Citation:
    return Citation.model_validate(s.model_dump(include=set(Citation.model_fields)))


def log_entry(
    query: str, filters: QueryFilters, tenants: tuple[str, ...] | None, answer: Answer
) -> dict[str, Any]:
    """One line of the retrieval log: what was asked, what was retrieved and cited, and
    how it was judged."""
    return {
        "time": time.time(),
        "tenants": list(tenants) if tenants is not None else None,
        "query": query,
        "filters": filters.model_dump(exclude_none=True),
        "embedder": answer.embedder,
        "reranker": answer.reranker,
        "retrieved": [
            {
                "point_id": c.point_id,
                "doc_id": c.doc_id,
                "score": c.score,
                "rerank_score": c.rerank_score,
            }
            for c in answer.candidates
        ],
        "cited": [c.point_id for c in answer.citations],
        "grounding": answer.grounding,
        "answered": answer.answered,
        "refusal": answer.refusal.reason if answer.refusal else None,
        "answerability": answer.answerability.model_dump() if answer.answerability else None,
        "trace_id": answer.trace_id,
    }
