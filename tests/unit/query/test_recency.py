"""The preference for recent documents: the decay halves per half-life, an undated document
ages as the oldest dated one, the kept candidates are reordered by relevance weighed by the
decay (a newer copy of the same text first, a far more relevant old one kept first), and a
preference on a field that is not a datetime field is a clear error."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import IndexedChunk
from ragstream.query.recency import Recency, checked, decay, factors, half_life_s, reordered
from ragstream.query.rerank import Reranked
from ragstream.query.retrieve import Candidate

NOW = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
YEAR = Recency("updated", half_life_s("365d"))


def kept(name: str, logit: float | None, updated: str | None) -> Reranked:
    meta = {"updated": updated} if updated else {}
    chunk = IndexedChunk(
        point_id=name, doc_id=f"d:{name}", source="d", path=name, file_type="md", ordinal=0,
        content_hash=name, text=name, char_start=0, char_end=1, meta=meta,
    )  # fmt: skip
    return Reranked(
        candidate=Candidate(chunk=chunk, score=0.1, ranks={}, scores={}), rerank_score=logit
    )


def ago(days: int) -> str:
    return (NOW - dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.floats(0, 1e9), st.floats(1, 1e9))
def test_the_decay_halves_per_half_life_and_never_grows(age: float, half_life: float) -> None:
    d = decay(age, half_life)
    assert 0 <= d <= 1
    assert decay(age + half_life, half_life) == pytest.approx(d / 2, rel=1e-9, abs=1e-300)


def test_an_undated_document_ages_as_the_oldest_dated_one() -> None:
    chunks = [
        kept(n, 0.0, u).candidate.chunk for n, u in (("a", ago(0)), ("b", ago(730)), ("c", None))
    ]
    assert factors(chunks, YEAR, NOW) == pytest.approx([1.0, 0.25, 0.25], rel=1e-3)


def test_a_newer_copy_of_the_same_text_ranks_first_and_relevance_still_counts() -> None:
    ranked = [kept("old", 2.0, ago(900)), kept("new", 2.0, ago(10)), kept("x", -3.0, ago(1))]
    assert [r.candidate.chunk.point_id for r in reordered(ranked, YEAR, NOW)] == ["new", "old", "x"]
    sure = [kept("old", 9.0, ago(400)), kept("new", -1.0, ago(1))]  # far more relevant, old
    assert [r.candidate.chunk.point_id for r in reordered(sure, YEAR, NOW)] == ["old", "new"]


def test_without_a_reranker_the_fused_score_is_weighed() -> None:
    ranked = [kept("old", None, ago(365)), kept("new", None, ago(0))]
    assert [r.candidate.chunk.point_id for r in reordered(ranked, YEAR, NOW)] == ["new", "old"]


def test_the_field_must_be_a_known_datetime_field() -> None:
    fields = {"updated": "datetime", "tags": "keywords"}
    assert checked("updated", "30d", fields) == Recency("updated", 30 * 86400.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="nearest: updated"):
        checked("updatd", "30d", fields)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="keywords field, not a datetime"):
        checked("tags", "30d", fields)  # type: ignore[arg-type]
