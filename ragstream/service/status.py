"""`StatusReport` from stores that are already open (a `serve`, `watch --serve` or an
embedded `Client` holds them) or opened for the occasion (`ragstream status`); a caller's
view (tenants, a principal) counts through the same store filter its searches apply."""

from __future__ import annotations

from ragstream.connectors.protocols import LexicalIndex, SearchFilter, VectorStore
from ragstream.connectors.state import (
    DeadLetterBook,
    RedactionBook,
    ReindexBook,
    SyncState,
    VerifyBook,
)
from ragstream.core.errors import ModelUnavailableError
from ragstream.core.models import EndpointStatus, StatusReport
from ragstream.core.settings import REMOTE_EMBEDDER, Settings
from ragstream.operators.answer_judge import answer_judge_dir
from ragstream.operators.remote_embed import recorded_drift
from ragstream.query.decision import embedder_mismatch, load_decision
from ragstream.query.rerank import NO_RERANKER
from ragstream.query.scales import reference_preset


def status_report(
    settings: Settings,
    live: tuple[str, VectorStore] | None,
    lexical: LexicalIndex | None,
    flt: SearchFilter | None = None,
) -> StatusReport:
    """Counts and versions straight from the stores and the state dir; loads no model.
    With `flt` (a caller's tenants and readers, `query.shapes.search_filter`), the chunk
    counts are the stores' filtered counts and the documents those with a matching live
    point."""
    s = settings
    counts = {"docs": 0, "chunks_live": 0, "chunks_deleted": 0, "lexical_live": 0}
    embedder, collection = None, None
    if live is not None:
        collection, vectors = live
        embedder = vectors.embedder
        counts["docs"] = len(vectors.live_docs(flt or SearchFilter()))
        counts["chunks_live"] = vectors.count("live", flt)
        counts["chunks_deleted"] = vectors.count("deleted", flt)
    if lexical is not None and live is not None:
        counts["lexical_live"] = lexical.count("live", flt)
    audit = VerifyBook(s.state_dir).load()
    warning = decision_warning(s, embedder.slug if embedder is not None else None)
    drift = recorded_drift(s.probes_dir, embedder.slug) if embedder else None
    return StatusReport(
        **counts,
        embedder=embedder,
        collection=collection,
        last_sync=SyncState(s.state_dir).last_sync,
        dead_letters=DeadLetterBook(s.state_dir).all(),
        reranker=s.query.reranker or NO_RERANKER,
        redactions=RedactionBook(s.state_dir).all(),
        reindex=ReindexBook(s.state_dir).load(),
        drift=audit.counts() if audit is not None else None,
        verified_at=audit.at if audit is not None else None,
        embedding_endpoint=_drifted(s, embedder.name, drift) if embedder and drift else None,
        warnings=[w for w in (warning, drift) if w],
    )


def _drifted(settings: Settings, name: str, detail: str) -> EndpointStatus:
    """The endpoint as a drift recorded by any process left it (this one has not asked it)."""
    base = settings.embedding_endpoint.base_url or "https://api.openai.com/v1"
    model = name.removeprefix(REMOTE_EMBEDDER)
    return EndpointStatus(base_url=base, model=model, state="drifted", detail=detail)


def decision_warning(settings: Settings, live: str | None) -> str | None:
    """Why the configured answerability decision may not fit this index, or None: fitted on
    another embedder's cosines (a blue/green upgrade or `tune` changed it) that no cosine
    scale reads the live ones on (`query.cosine_scale` off, or a decision fitted on an
    embedder that is no preset), or unreadable. Reads one small file; loads no model."""
    where = answer_judge_dir(settings.query.answerable.judge)
    if where is None or settings.query.answerable.decision != "calibrated":
        return None
    try:
        decision = load_decision(where)
    except ModelUnavailableError as exc:
        return str(exc)
    if decision is None or (settings.query.cosine_scale and reference_preset(decision)):
        return None
    return embedder_mismatch(decision.embedder, live, where)
