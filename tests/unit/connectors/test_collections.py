"""Blue/green cleanup primitives, congruent on both backends: list and drop collections.

Every test runs on Qdrant Edge and on qdrant-client (local mode) with the same expectations:
the live collection and open collections are never dropped, names outside the index are
refused rather than interpreted, and dropping one collection leaves the others intact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import (
    drop_collection,
    list_collections,
    live_collection,
    open_vector_store,
    set_live_collection,
)
from ragstream.connectors.vector_stores import StoreBusyError, collection_name
from tests.unit.connectors.test_vector_stores import EMB, EMB2, KINDS, make_corpus

INDEX = "docs"
BLUE, GREEN = collection_name(INDEX, EMB), collection_name(INDEX, EMB2)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fill_blue_and_green(kind: str, base: Path) -> int:
    """BLUE (live, with points) and GREEN (empty, not live); both closed. Returns BLUE's count."""
    chunks, vectors = make_corpus()
    blue = open_vector_store(kind, base, INDEX, EMB)
    blue.upsert(chunks, vectors)
    open_vector_store(kind, base, INDEX, EMB2).close()
    count = blue.count("live")
    blue.close()
    return count


def test_list_names_every_collection_with_its_embedder(kind: str, tmp_path: Path) -> None:
    assert list_collections(kind, tmp_path, INDEX) == {}
    fill_blue_and_green(kind, tmp_path)
    assert list_collections(kind, tmp_path, INDEX) == {BLUE: EMB, GREEN: EMB2}
    assert list_collections(kind, tmp_path, "other") == {}


def test_list_does_not_claim_a_longer_index_name(kind: str, tmp_path: Path) -> None:
    """Index `docs__v2`'s collections start with `docs__` too; they are not `docs`'s."""
    open_vector_store(kind, tmp_path, f"{INDEX}__v2", EMB).close()
    fill_blue_and_green(kind, tmp_path)
    foreign = collection_name(f"{INDEX}__v2", EMB)
    assert list_collections(kind, tmp_path, INDEX) == {BLUE: EMB, GREEN: EMB2}
    assert list_collections(kind, tmp_path, f"{INDEX}__v2") == {foreign: EMB}
    with pytest.raises(ValueError, match="not a collection of index"):
        drop_collection(kind, tmp_path, INDEX, foreign)
    assert foreign in list_collections(kind, tmp_path, f"{INDEX}__v2")


def test_drop_removes_only_that_collection(kind: str, tmp_path: Path) -> None:
    live_count = fill_blue_and_green(kind, tmp_path)
    assert drop_collection(kind, tmp_path, INDEX, GREEN) is True
    assert list_collections(kind, tmp_path, INDEX) == {BLUE: EMB}
    assert drop_collection(kind, tmp_path, INDEX, GREEN) is False  # idempotent cleanup
    assert live_collection(kind, tmp_path, INDEX) == (BLUE, EMB)
    blue = open_vector_store(kind, tmp_path, INDEX, EMB)
    try:
        assert blue.count("live") == live_count
        hits = blue.search([1.0] * EMB.dimension, 3, SearchFilter())
        assert len(hits) == 3
    finally:
        blue.close()
    green = open_vector_store(kind, tmp_path, INDEX, EMB2)  # re-created empty, not resurrected
    try:
        assert green.count("live") == 0 and green.count("deleted") == 0
    finally:
        green.close()


def test_drop_refuses_the_live_collection(kind: str, tmp_path: Path) -> None:
    fill_blue_and_green(kind, tmp_path)
    with pytest.raises(ValueError, match="live collection"):
        drop_collection(kind, tmp_path, INDEX, BLUE)
    set_live_collection(kind, tmp_path, INDEX, GREEN)  # the blue/green switch
    with pytest.raises(ValueError, match="live collection"):
        drop_collection(kind, tmp_path, INDEX, GREEN)
    assert drop_collection(kind, tmp_path, INDEX, BLUE) is True
    assert list_collections(kind, tmp_path, INDEX) == {GREEN: EMB2}
    assert live_collection(kind, tmp_path, INDEX) == (GREEN, EMB2)


def test_drop_refuses_an_open_collection(kind: str, tmp_path: Path) -> None:
    fill_blue_and_green(kind, tmp_path)
    green = open_vector_store(kind, tmp_path, INDEX, EMB2)
    try:
        with pytest.raises(StoreBusyError):
            drop_collection(kind, tmp_path, INDEX, GREEN)
        assert GREEN in list_collections(kind, tmp_path, INDEX)
        assert green.count("live") == 0  # still usable
    finally:
        green.close()
    assert drop_collection(kind, tmp_path, INDEX, GREEN) is True


@pytest.mark.parametrize("name", [INDEX, "other__x", f"../{BLUE}", f"{INDEX}__../../etc"])
def test_drop_refuses_names_outside_the_index(kind: str, tmp_path: Path, name: str) -> None:
    fill_blue_and_green(kind, tmp_path)
    with pytest.raises(ValueError):
        drop_collection(kind, tmp_path, INDEX, name)
    assert list_collections(kind, tmp_path, INDEX) == {BLUE: EMB, GREEN: EMB2}


def test_edge_drop_sweeps_an_interrupted_drop(tmp_path: Path) -> None:
    """A crash between the rename and the delete leaves a hidden dir, no collection."""
    fill_blue_and_green("edge", tmp_path)
    (tmp_path / GREEN).rename(tmp_path / f".{GREEN}.dropping")
    assert list_collections("edge", tmp_path, INDEX) == {BLUE: EMB}
    assert drop_collection("edge", tmp_path, INDEX, GREEN) is False
    assert not (tmp_path / f".{GREEN}.dropping").exists()
