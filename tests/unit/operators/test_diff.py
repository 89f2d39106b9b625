"""diff_document is set arithmetic over point ids: property-tested."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.models import Chunk, IndexedChunk
from ragstream.operators.diff import diff_document


def chunk(pid: str, ordinal: int) -> Chunk:
    return Chunk(
        point_id=pid,
        doc_id="d",
        ordinal=ordinal,
        occurrence=0,
        content_hash=pid,
        text=pid,
        char_start=ordinal,
        char_end=ordinal + 1,
    )


def stored(c: Chunk) -> IndexedChunk:
    return IndexedChunk(
        point_id=c.point_id,
        doc_id=c.doc_id,
        source="s",
        path="/p",
        file_type="md",
        ordinal=c.ordinal,
        content_hash=c.content_hash,
        text=c.text,
        char_start=c.char_start,
        char_end=c.char_end,
    )


ids = st.lists(st.sampled_from("abcdefghijklmnop"), unique=True, max_size=12)


@given(ids, ids)
def test_diff_partitions_old_and_new(old_ids: list[str], new_ids: list[str]) -> None:
    old = [stored(chunk(p, i)) for i, p in enumerate(old_ids)]
    new = [chunk(p, i) for i, p in enumerate(new_ids)]
    d = diff_document(new, old)
    assert {c.point_id for c in d.keep + d.move + d.add} == set(new_ids)
    assert {c.point_id for c in d.add} == set(new_ids) - set(old_ids)
    assert set(d.tombstone) == set(old_ids) - set(new_ids)
    for c in d.keep:
        assert old_ids.index(c.point_id) == new_ids.index(c.point_id)
    for c in d.move:
        assert old_ids.index(c.point_id) != new_ids.index(c.point_id)


def test_unchanged_document_is_all_keep() -> None:
    new = [chunk(p, i) for i, p in enumerate("abc")]
    d = diff_document(new, [stored(c) for c in new])
    assert d.unchanged and len(d.keep) == 3
