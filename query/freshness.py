"""Which file version an answer quotes, and whether that file has changed since.

A source chunk may come from the lexical leg, whose copy of a kept chunk keeps the file
version it was first written with; the vector store's point is the record of the version the
index holds now (`set_fingerprint` moves kept points along). So the version is read back from
the vector store for the few chunks an answer shows, then compared with the file on disk
with one `stat` each: cheap enough for every answer, and "possibly" stale because a new mtime
with the same bytes also counts (hashing on the answer path would not be cheap).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ragstream.core.answers import SourceChunk
from ragstream.core.models import FileFingerprint, IndexedChunk


def changed_on_disk(path: str, version: FileFingerprint | None) -> bool | None:
    """True if the file differs from `version` or is gone; None if this process cannot see
    its folder (a query pod that does not mount the watched folders) or knows no version."""
    if version is None or version.size < 0:
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True if Path(path).parent.is_dir() else None
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) != (version.size, version.mtime_ns)


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
