"""Which file version an answer quotes, and whether that file has changed since.

A source chunk may come from the lexical leg, whose copy of a kept chunk keeps the file
version it was first written with; the vector store's point is the record of the version the
index holds now (`set_fingerprint` moves kept points along). So the version is read back
from the vector store for the few chunks an answer shows, then compared with what the
document's source holds now, asked of the configured source of that name
(`connectors.sources.configured`): one `stat` each for a folder's file, one tree lookup for a
git source's (the blob id at the ref), one HEAD for an S3 object's ETag: cheap enough for
every answer, and "possibly" stale because a new mtime with the same bytes also counts
(hashing on the answer path would not be cheap).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragstream.connectors.protocols import Source
from ragstream.connectors.sources import changed_since
from ragstream.core.answers import SourceChunk
from ragstream.core.models import IndexedChunk


def with_versions(
    sources: Sequence[SourceChunk],
    stored: Sequence[IndexedChunk],
    configured: Mapping[str, Source],
) -> list[SourceChunk]:
    """The sources stamped with the version the vector store records for each, and whether
    the document is still that version: True if it differs or is gone, None if this process
    cannot see its source (a query pod that does not mount the watched folders, an object
    store it is not configured for) or knows no version (`connectors.sources.changed_since`).
    `configured`: the sources configured (or recorded) here, by name."""
    held = {c.point_id: c for c in stored}
    out = []
    for source in sources:
        point = held.get(source.point_id)
        version = point.fingerprint if point is not None else source.file_version
        at = (point.indexed_at or None) if point is not None else source.indexed_at
        name = source.doc_id.partition(":")[0]
        stale = changed_since(source.path, version, configured, name)
        update = {"file_version": version, "indexed_at": at, "possibly_stale": stale}
        out.append(source.model_copy(update=update))
    return out
