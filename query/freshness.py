"""Which file version an answer quotes, and whether that file has changed since.

A source chunk may come from the lexical leg, whose copy of a kept chunk keeps the file
version it was first written with; the vector store's point is the record of the version the
index holds now (`set_fingerprint` moves kept points along). So the version is read back
from the vector store for the few chunks an answer shows, then compared with what the
document's source holds now: one `stat` each for a folder's file, one tree lookup for a git
source's (the blob id at the ref): cheap enough for every answer, and "possibly" stale
because a new mtime with the same bytes also counts (hashing on the answer path would not be
cheap).
"""

from __future__ import annotations

from collections.abc import Sequence

from ragstream.connectors.sources import changed_since
from ragstream.core.answers import SourceChunk
from ragstream.core.models import FileFingerprint, IndexedChunk


def changed_on_disk(path: str, version: FileFingerprint | None) -> bool | None:
    """True if the document differs from `version` or is gone; None if this process cannot
    see its source (a query pod that does not mount the watched folders) or knows no
    version. Asked of the document's source: a stat for a folder's file, the tree at the ref
    for a git source's (`connectors.sources.changed_since`)."""
    return changed_since(path, version)


def with_versions(
    sources: Sequence[SourceChunk], stored: Sequence[IndexedChunk]
) -> list[SourceChunk]:
    """The sources stamped with the version the vector store records for each, and whether
    the file on disk is still that version."""
    held = {c.point_id: c for c in stored}
    out = []
    for source in sources:
        point = held.get(source.point_id)
        version = point.fingerprint if point is not None else source.file_version
        at = (point.indexed_at or None) if point is not None else source.indexed_at
        stale = changed_on_disk(source.path, version)
        update = {"file_version": version, "indexed_at": at, "possibly_stale": stale}
        out.append(source.model_copy(update=update))
    return out
