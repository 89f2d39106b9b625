"""Per-document diff of freshly chunked text against what the index holds (pure).

Point ids already encode (doc, content, occurrence), so the diff is set arithmetic:
 - keep:      same point id, same position           → nothing to write
 - move:      same point id, position changed        → payload update, never a re-embed
 - add:       point id the index does not hold       → write (vector reused or encoded)
 - tombstone: live point id no longer produced       → soft delete, *after* the writes

>>> from ragstream.core.models import Chunk
>>> c = Chunk(point_id="p1", doc_id="d", ordinal=0, occurrence=0, content_hash="h",
...           text="t", char_start=0, char_end=1)
>>> diff_document([c], []).add == (c,)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragstream.core.models import Chunk, IndexedChunk


@dataclass(frozen=True)
class DocDiff:
    keep: tuple[Chunk, ...]
    move: tuple[Chunk, ...]
    add: tuple[Chunk, ...]
    tombstone: tuple[str, ...]

    @property
    def unchanged(self) -> bool:
        return not (self.move or self.add or self.tombstone)


def _same_position(new: Chunk, old: IndexedChunk) -> bool:
    return (
        new.ordinal == old.ordinal
        and new.char_start == old.char_start
        and new.char_end == old.char_end
        and new.section_path == old.section_path
        and new.page == old.page
    )


def diff_document(new: Sequence[Chunk], stored: Sequence[IndexedChunk]) -> DocDiff:
    """Classify every new chunk and every stored live point of one document."""
    held = {c.point_id: c for c in stored}
    produced = {c.point_id for c in new}
    keep, move, add = [], [], []
    for chunk in new:
        old = held.get(chunk.point_id)
        if old is None:
            add.append(chunk)
        elif _same_position(chunk, old):
            keep.append(chunk)
        else:
            move.append(chunk)
    gone = tuple(sorted(pid for pid in held if pid not in produced))
    return DocDiff(tuple(keep), tuple(move), tuple(add), gone)
