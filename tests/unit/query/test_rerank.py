"""Rerank stage: a real (tiny, locally built) CrossEncoder, and the no-reranker state.

No trained cross-encoder weights exist on our machines, so the model is a 2-layer BERT with
a fresh 1-label head over the MiniLM tokenizer: its scores are meaningless, but every code
path (load, batching, truncation, ordering, k cut, spans) is the real one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream.core.models import IndexedChunk
from ragstream.query.rerank import (
    NO_RERANKER,
    CrossEncoderReranker,
    Reranked,
    RerankerUnavailable,
    blend,
    load_reranker,
    rerank,
    rerank_scores,
)
from ragstream.query.retrieve import Candidate

TEXTS = [
    "Magma rises through the crust and a volcano erupts with lava and ash.",
    "Sourdough is leavened by a starter of wild yeast and lactobacilli.",
    "The Sicilian Defence answers 1.e4 with c5.",
    "Honeybees perform the waggle dance to share where pollen is found.",
    "Docling converts PDF documents to Markdown and JSON.",
    "Tantivy is a full-text search engine library written in Rust.",
]


def candidate(i: int, text: str) -> Candidate:
    chunk = IndexedChunk(
        point_id=f"p{i}", doc_id=f"d:{i}.md", source="d", path=f"/x/{i}.md", file_type="md",
        ordinal=0, content_hash=f"h{i}", text=text, char_start=0, char_end=len(text),
    )  # fmt: skip
    return Candidate(chunk=chunk, score=1.0 / (60 + i + 1), ranks={"dense": i + 1}, scores={})


CANDIDATES = [candidate(i, t) for i, t in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def reranker(model_dir: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(str(model_dir), max_length=64, batch_size=4)


def test_load_reranker_states(model_dir: Path, tmp_path: Path) -> None:
    for off in (None, "", "none", " None "):
        assert load_reranker(off) is None
    loaded = load_reranker(str(model_dir))
    assert isinstance(loaded, CrossEncoderReranker) and loaded.name == str(model_dir)
    with pytest.raises(RerankerUnavailable, match="cannot load cross-encoder"):
        load_reranker(str(tmp_path / "no-such-model"))
    with pytest.raises(RerankerUnavailable, match="offline"):
        load_reranker("cross-encoder/ms-marco-MiniLM-L-6-v2")  # not installed, hub is off
    assert NO_RERANKER.startswith("none")


def test_ordering_follows_scores_and_k_cuts(
    reranker: CrossEncoderReranker, spans: InMemorySpanExporter
) -> None:
    direct = reranker.score("volcano eruption", TEXTS)
    assert len(direct) == len(TEXTS) and all(math.isfinite(s) for s in direct)
    spans.clear()
    out = rerank("volcano eruption", CANDIDATES, reranker, k=3)
    assert len(out) == 3
    got = [r.rerank_score for r in out]
    assert got == sorted(direct, reverse=True)[:3]
    for r in out:  # each score belongs to its own candidate
        assert r.rerank_score == pytest.approx(direct[TEXTS.index(r.candidate.chunk.text)])
        assert r.score == r.rerank_score
    (sp,) = [s for s in spans.get_finished_spans() if s.name == "ragstream.query.rerank"]
    attrs = dict(sp.attributes or {})
    assert attrs["model"] == reranker.name and attrs["skipped"] is False
    assert attrs["candidates"] == len(TEXTS) and attrs["k"] == 3
    assert attrs["top_score"] == got[0]
    assert len(rerank("q", CANDIDATES, reranker, k=50)) == len(TEXTS)


def test_batching_does_not_change_scores(model_dir: Path, reranker: CrossEncoderReranker) -> None:
    one_batch = CrossEncoderReranker(str(model_dir), max_length=64, batch_size=64)
    assert reranker.score("bread", TEXTS) == pytest.approx(one_batch.score("bread", TEXTS))
    assert reranker.score("bread", []) == []


def test_long_inputs_are_truncated(model_dir: Path, reranker: CrossEncoderReranker) -> None:
    long = "lava " * 5000
    scores = reranker.score("volcano " * 500, [long, "short"])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    # more tokens than the model has positions is clamped instead of crashing at predict
    wide = CrossEncoderReranker(str(model_dir), max_length=4096)
    assert wide.max_length == 128
    assert math.isfinite(wide.score("q", [long])[0])
    # truncation means everything past max_length is ignored
    assert scores[0] == pytest.approx(reranker.score("volcano " * 500, ["lava " * 200])[0])


def test_no_reranker_keeps_fused_order(spans: InMemorySpanExporter) -> None:
    spans.clear()
    out = rerank("anything", CANDIDATES, None, k=4)
    assert [r.candidate for r in out] == CANDIDATES[:4]
    assert all(r.rerank_score is None for r in out)
    assert [r.score for r in out] == [c.score for c in CANDIDATES[:4]]
    (sp,) = [s for s in spans.get_finished_spans() if s.name == "ragstream.query.rerank"]
    attrs = dict(sp.attributes or {})
    assert attrs["model"] == "none" and attrs["skipped"] is True and attrs["returned"] == 4
    assert rerank("anything", [], None, k=4) == []


class Fixed:
    """A deterministic Reranker: scores are given per text."""

    name = "fixed"

    def __init__(self, scores: dict[str, float], prior_weight: float = 0.0) -> None:
        self.scores = scores
        self.prior_weight = prior_weight

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [self.scores[t] for t in texts]


def test_ties_keep_fused_order_and_nan_sorts_last() -> None:
    scores = dict(zip(TEXTS, [0.5, 0.9, 0.5, float("nan"), 0.9, 0.1], strict=True))
    out = rerank("q", CANDIDATES, Fixed(scores), k=6)
    assert [r.candidate.chunk.point_id for r in out] == ["p1", "p4", "p0", "p2", "p5", "p3"]
    assert isinstance(out[0], Reranked)


def test_a_prior_weight_blends_the_score_with_the_fused_rank() -> None:
    """0: the score alone orders; a large weight: the fused order; in between, a candidate
    the reranker likes much more can still overtake one fused a place above it."""
    scores = dict(zip(TEXTS, [0.1, 0.2, 0.3, 0.4, 0.5, 3.0], strict=True))
    ids = lambda out: [r.candidate.chunk.point_id for r in out]  # noqa: E731
    assert ids(rerank("q", CANDIDATES, Fixed(scores), k=6))[:2] == ["p5", "p4"]
    assert ids(rerank("q", CANDIDATES, Fixed(scores, 100.0), k=6)) == [f"p{i}" for i in range(6)]
    blended = ids(rerank("q", CANDIDATES, Fixed(scores, 1.0), k=6))
    assert blended[0] == "p5" and blended[1:] == ["p0", "p1", "p2", "p3", "p4"]
    out = rerank("q", CANDIDATES, Fixed(scores, 1.0), k=1)
    assert out[0].rerank_score == 3.0  # the model's own score is reported, not the blend


@settings(deadline=None)  # pure arithmetic; a loaded CI machine must not fail it on time
@given(st.lists(st.floats(-50, 50).map(lambda x: round(x, 3)), min_size=1, max_size=30),
       st.floats(0, 10))  # fmt: skip
def test_blend_is_shift_and_scale_free_and_zero_weight_keeps_the_score_order(
    scores: list[float], weight: float
) -> None:
    keys = blend(scores, weight)
    shifted = blend([3 * s + 7 for s in scores], weight)
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(keys, shifted, strict=True))
    plain = blend(scores, 0.0)
    for i, j in itertools.combinations(range(len(scores)), 2):
        if scores[i] > scores[j] + 1e-9:
            assert plain[i] > plain[j]


def test_bad_k_and_bad_reranker() -> None:
    with pytest.raises(ValueError, match="k must be"):
        rerank("q", CANDIDATES, None, k=0)

    class Short(Fixed):
        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [0.0]

    with pytest.raises(RuntimeError, match="returned 1 scores"):
        rerank("q", CANDIDATES, Short({}), k=2)


def test_a_rerank_answer_of_either_shape_gives_scores_in_input_order() -> None:
    cohere = {
        "results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]
    }
    assert rerank_scores(cohere, 3)[::2] == [0.1, 0.9]
    assert math.isnan(rerank_scores(cohere, 3)[1])  # left out: ordered last
    tei = [{"index": 1, "score": -2.5}, {"index": 0, "score": 3.0}]
    assert rerank_scores(tei, 2) == [3.0, -2.5]
    for bad in ({"results": [{"index": 5, "score": 1.0}]}, {"data": []}, [{"score": 1.0}]):
        with pytest.raises(ValueError):
            rerank_scores(bad, 2)
