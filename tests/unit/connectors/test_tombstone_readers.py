"""A tombstone is nobody's to read: it clears its point's `readers` in every store, a re-stamp
never gives them back, and a search filtered by readers (which sends no status condition,
`SearchFilter.status_condition`) never returns it, on both legs: the dense search and the BM25
leg (sparse vectors in the same points; rank-bm25 as a separate index). A format 1 tombstone,
which kept its readers, matches such a filter until `clear_tombstone_readers` (the storage
format 2 migration) clears them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import open_lexical_index, open_vector_store
from ragstream.connectors.vector_stores import (
    BaseQdrantStore,
    HasIds,
    Match,
    search_conditions,
)
from tests.unit.connectors.test_lexical import chunk as make_chunk
from tests.unit.connectors.test_vector_stores import EMB, pid

WORD = "lighthouse"
STAMP = ("everyone", "user:alice", "source:docs")
PRINCIPAL = SearchFilter(readers=("user:alice", "everyone"))
CHUNKS = [
    make_chunk(
        pid("docs:a.md", i),
        f"{WORD} log entry {i}",
        "docs:a.md",
        ordinal=i,
        readers=STAMP,
        readers_fp="fp1",
        content_hash=f"h{i}",
    )
    for i in range(4)
]
DEAD = CHUNKS[1].point_id
VECTORS = np.random.default_rng(7).standard_normal((len(CHUNKS), EMB.dimension)).tolist()


def test_a_readers_filter_implies_live_and_sends_no_status_condition() -> None:
    assert search_conditions(SearchFilter()) == [Match("status", "live")]
    assert Match("status", "live") not in (search_conditions(PRINCIPAL) or [])
    assert PRINCIPAL.status_condition() is None
    assert PRINCIPAL.status_condition("deleted") == "deleted"  # a count of tombstones
    assert SearchFilter(tenants=("t",)).status_condition() == "live"


@pytest.fixture(params=["edge", "qdrant"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseQdrantStore]:
    s = open_vector_store(str(request.param), tmp_path, "idx", EMB, sparse=True)
    s.upsert(CHUNKS, VECTORS)
    s.tombstone([DEAD], deleted_at=5.0)
    yield s
    s.close()


def principal_hits(store: BaseQdrantStore) -> tuple[set[str], set[str]]:
    """(dense, BM25) point ids the principal's searches return, every point a candidate."""
    dense = {h.chunk.point_id for h in store.search(VECTORS[1], 100, PRINCIPAL)}
    bm25 = {h.chunk.point_id for h in store.search_text(WORD, 100, PRINCIPAL)}
    return dense, bm25


def live_ids() -> set[str]:
    return {c.point_id for c in CHUNKS} - {DEAD}


def test_a_tombstone_is_never_returned_to_a_principal_on_either_leg(
    store: BaseQdrantStore,
) -> None:
    assert principal_hits(store) == (live_ids(), live_ids())
    dead = store.get([DEAD])[0]
    assert (dead.status, dead.readers) == ("deleted", ())
    assert store.count("deleted", PRINCIPAL) == 0 and store.count("deleted") == 1
    assert store.readable_docs(["user:alice"]) == {"docs:a.md"}


def test_a_restamp_never_gives_a_tombstone_its_readers_back(store: BaseQdrantStore) -> None:
    widened = [
        c.model_copy(update={"readers": (*STAMP, "user:bob"), "readers_fp": "fp2"}) for c in CHUNKS
    ]
    store.set_readers(widened)  # as a chmod's re-stamp of the document
    store.set_positions(widened)  # DOC_FIELDS carry the readers too
    assert store.get([DEAD])[0].readers == ()
    assert principal_hits(store) == (live_ids(), live_ids())
    bob = SearchFilter(readers=("user:bob",))
    assert {h.chunk.point_id for h in store.search_text(WORD, 100, bob)} == live_ids()
    assert store.get([CHUNKS[0].point_id])[0].readers == (*STAMP, "user:bob")


def test_a_format_1_tombstone_is_cleared_by_the_migration_step(store: BaseQdrantStore) -> None:
    store._set_payload([HasIds((DEAD,))], {"readers": list(STAMP)})  # as format 1 left it
    dense, bm25 = principal_hits(store)
    assert DEAD in dense and DEAD in bm25  # why format 2 needs the step
    assert store.clear_tombstone_readers() == 1
    assert principal_hits(store) == (live_ids(), live_ids())
    assert {h.chunk.point_id for h in store.search(VECTORS[1], 100, SearchFilter())} == live_ids()


def test_the_rank_bm25_leg_matches_no_tombstone_by_its_readers(tmp_path: Path) -> None:
    index = open_lexical_index("rank-bm25", tmp_path / "lex")
    index.upsert(CHUNKS)
    index.commit()
    index.tombstone([DEAD], deleted_at=5.0)
    index.commit()
    assert index.get([DEAD])[0].readers == ()
    old = CHUNKS[2].model_copy(update={"status": "deleted", "deleted_at": 1.0})
    index.upsert([old])  # a tombstone written with its readers (format 1)
    index.commit()
    found = {h.chunk.point_id for h in index.search(WORD, 100, PRINCIPAL)}
    assert found == live_ids() - {old.point_id}
    assert index.count("deleted", PRINCIPAL) == 0 and index.count("deleted") == 2
    index.close()
