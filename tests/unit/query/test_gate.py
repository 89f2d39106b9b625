"""Sufficiency gate: rerank basis when scores exist, dense-cosine basis otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream.core.models import IndexedChunk
from ragstream.core.telemetry import install_exporter
from ragstream.query.gate import DEFAULT_DENSE_FLOOR, gate
from ragstream.query.rerank import Reranked
from ragstream.query.retrieve import Candidate


def item(i: int, dense: float | None, rerank_score: float | None = None) -> Reranked:
    chunk = IndexedChunk(
        point_id=f"p{i}", doc_id="d:a.md", source="d", path="/a.md", file_type="md",
        ordinal=i, content_hash=f"h{i}", text=f"text {i}", char_start=0, char_end=6,
    )  # fmt: skip
    scores = {"lexical": 3.0} if dense is None else {"dense": dense, "lexical": 3.0}
    cand = Candidate(chunk=chunk, score=0.03, ranks={"dense": i + 1}, scores=scores)
    return Reranked(candidate=cand, rerank_score=rerank_score)


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    install_exporter(exporter)
    return exporter


def test_calibrated_floor_is_between_off_and_on_topic() -> None:
    # numbers seen on the docling docs with all-MiniLM-L6-v2 (see query/gate.py)
    assert 0.198 < DEFAULT_DENSE_FLOOR < 0.314


def test_dense_basis(spans: InMemorySpanExporter) -> None:
    spans.clear()
    assert gate([item(0, 0.31), item(1, 0.62)], rerank_floor=0.0) is None
    refusal = gate([item(0, 0.14), item(1, 0.19)], rerank_floor=0.0)
    assert refusal is not None and refusal.reason == "insufficient_evidence"
    assert refusal.best_score == pytest.approx(0.19)
    assert "dense" in refusal.detail and "0.190" in refusal.detail
    attrs = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    assert [a["refused"] for a in attrs] == [False, True]
    assert attrs[1]["basis"] == "dense" and attrs[1]["floor"] == DEFAULT_DENSE_FLOOR
    assert attrs[1]["best_score"] == pytest.approx(0.19)


def test_dense_floor_is_inclusive_and_overridable() -> None:
    assert gate([item(0, 0.5)], rerank_floor=0.0, dense_floor=0.5) is None
    assert gate([item(0, 0.5)], rerank_floor=0.0, dense_floor=0.51) is not None


def test_rerank_basis_ignores_dense(spans: InMemorySpanExporter) -> None:
    spans.clear()
    strong_dense = [item(0, 0.95, rerank_score=-2.0), item(1, 0.9, rerank_score=-1.0)]
    refusal = gate(strong_dense, rerank_floor=0.0)
    assert refusal is not None and refusal.best_score == -1.0 and "rerank" in refusal.detail
    weak_dense = [item(0, 0.01, rerank_score=3.2)]
    assert gate(weak_dense, rerank_floor=0.0) is None
    bases = [dict(s.attributes or {})["basis"] for s in spans.get_finished_spans()]
    assert bases == ["rerank", "rerank"]


def test_no_candidates_or_no_usable_score() -> None:
    empty = gate([], rerank_floor=0.0)
    assert empty is not None and empty.reason == "insufficient_evidence"
    assert empty.best_score is None and "no candidate" in empty.detail
    lexical_only = gate([item(0, None)], rerank_floor=0.0)
    assert lexical_only is not None and lexical_only.best_score is None
    nan = gate([item(0, 0.9, rerank_score=float("nan"))], rerank_floor=0.0)
    assert nan is not None and nan.best_score is None


@given(
    st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=20),
    st.floats(-1.0, 1.0),
)
def test_refuses_exactly_when_best_dense_is_below_floor(dense: list[float], floor: float) -> None:
    refusal = gate([item(i, d) for i, d in enumerate(dense)], rerank_floor=9.0, dense_floor=floor)
    assert (refusal is None) == (max(dense) >= floor)
    if refusal is not None:
        assert refusal.best_score == max(dense)
