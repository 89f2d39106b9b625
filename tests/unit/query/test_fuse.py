"""Fusion properties (hypothesis) plus hand-checked numbers: the contract of query/fuse.py."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.query import fuse
from ragstream.query.fuse import dbsf, rrf

IDS = st.sampled_from([f"p{i:02d}" for i in range(30)])
LEG = st.lists(IDS, max_size=15, unique=True)
LEGS = st.dictionaries(st.sampled_from(["dense", "lexical", "sparse"]), LEG, max_size=3)
K = st.integers(min_value=1, max_value=1000)
SCORE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
SCORED_LEG = st.lists(st.tuples(IDS, SCORE), max_size=15, unique_by=lambda e: e[0])

FAST = settings(max_examples=60, deadline=None)


def ids(out: list[fuse.Fused]) -> list[str]:
    return [f.point_id for f in out]


@FAST
@given(LEGS, K)
def test_rrf_is_a_permutation_of_the_union(legs: dict[str, list[str]], k: int) -> None:
    out = ids(rrf(legs, k=k))
    assert sorted(out) == sorted({p for leg in legs.values() for p in leg})


@FAST
@given(st.lists(LEG, min_size=1, max_size=3), IDS, K)
def test_first_in_every_leg_is_first(legs: list[list[str]], top: str, k: int) -> None:
    named = {f"leg{i}": [top, *(p for p in leg if p != top)] for i, leg in enumerate(legs)}
    out = rrf(named, k=k)
    assert out[0].point_id == top
    assert out[0].ranks == dict.fromkeys(named, 1)


@FAST
@given(LEGS, LEG, K)
def test_adding_a_leg_never_removes_candidates(
    legs: dict[str, list[str]], extra: list[str], k: int
) -> None:
    before = set(ids(rrf(legs, k=k)))
    after = set(ids(rrf({**legs, "extra": extra}, k=k)))
    assert before <= after


@FAST
@given(LEGS, LEG, K)
def test_zero_weight_equals_dropping_the_leg(
    legs: dict[str, list[str]], muted: list[str], k: int
) -> None:
    without = {f.point_id: f.score for f in rrf(legs, k=k)}
    weighted = rrf({**legs, "muted": muted}, k=k, weights={"muted": 0.0})
    for f in weighted:
        assert f.score == without.get(f.point_id, 0.0)
        if f.point_id in muted:
            assert f.ranks["muted"] == muted.index(f.point_id) + 1  # still visible
    assert set(without) <= set(ids(weighted))


@pytest.mark.parametrize("k", [0, -1, -60])
def test_k_must_be_positive(k: int) -> None:
    with pytest.raises(ValueError, match="k must be > 0"):
        rrf({"dense": ["a"]}, k=k)


def test_bad_weights_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown legs"):
        rrf({"dense": ["a"]}, weights={"dens": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        rrf({"dense": ["a"]}, weights={"dense": -1.0})
    with pytest.raises(ValueError, match="non-finite"):
        dbsf({"dense": [("a", float("nan"))]})


@FAST
@given(SCORED_LEG)
def test_dbsf_with_one_leg_keeps_its_order(leg: list[tuple[str, float]]) -> None:
    ordered = sorted(leg, key=lambda e: (-e[1], e[0]))  # as a store returns hits
    out = dbsf({"dense": ordered})
    assert ids(out) == [p for p, _ in ordered]
    assert all(0.0 <= f.score <= 1.0 for f in out)
    assert [f.scores["dense"] for f in out] == [s for _, s in ordered]


@FAST
@given(st.dictionaries(st.sampled_from(["dense", "lexical"]), SCORED_LEG, max_size=2), K)
def test_fusion_is_deterministic(legs: dict[str, list[tuple[str, float]]], k: int) -> None:
    reversed_legs = dict(reversed(list(legs.items())))
    assert rrf(legs, k=k) == rrf(legs, k=k)
    assert ids(rrf(legs, k=k)) == ids(rrf(reversed_legs, k=k))
    assert dbsf(legs) == dbsf(legs)
    assert ids(dbsf(legs)) == ids(dbsf(reversed_legs))


def test_rrf_hand_checked_k60() -> None:
    out = rrf(
        {"dense": [("a", 0.9), ("b", 0.8), ("c", 0.7)], "lexical": [("c", 7.0), ("a", 3.0)]},
        k=60,
    )
    expected = {
        "a": 1 / 61 + 1 / 62,  # 0.0325224...
        "c": 1 / 63 + 1 / 61,  # 0.0322664...
        "b": 1 / 62,  # 0.0161290...
    }
    assert ids(out) == ["a", "c", "b"]
    for f in out:
        assert f.score == pytest.approx(expected[f.point_id], abs=1e-12)
    assert out[0].score == pytest.approx(0.0325224, abs=1e-7)
    assert out[1].ranks == {"dense": 3, "lexical": 1}
    assert out[1].scores == {"dense": 0.7, "lexical": 7.0}
    assert out[2].ranks == {"dense": 2} and out[2].scores == {"dense": 0.8}


def test_rrf_ties_break_by_point_id() -> None:
    out = rrf({"dense": ["b", "a"], "lexical": ["a", "b"]})
    assert ids(out) == ["a", "b"] and out[0].score == out[1].score


def test_doctests() -> None:
    result = doctest.testmod(fuse)
    assert result.attempted > 0 and result.failed == 0
