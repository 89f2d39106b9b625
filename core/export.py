"""One live chunk as `ragstream export` writes it and `import` reads it: the open record an
index moves in between machines or into another tool without re-embedding.

The named keys are what another tool reads (chunk id, document, span, text, the dense
vector, the BM25 leg's sparse weights, the embedder tag and version, the file version);
`payload` is the chunk's whole stored payload, so an import rebuilds exactly the points
that were exported (section path, content hash, chunker and parser keys, tenant, ...).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragstream.core.models import EmbedderVersion, IndexedChunk

EXPORT_FORMATS = ("jsonl", "parquet")


class Span(BaseModel):
    """Where the chunk's text is in its document: characters [start, end), and its page."""

    model_config = ConfigDict(extra="forbid")
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    page: int | None = None


class SparseWeights(BaseModel):
    """The chunk's BM25 term weights as the sparse vector `bm25` holds them (term id =
    the low 32 bits of xxh3-64 of the analyzed term; idf is applied at query time)."""

    model_config = ConfigDict(extra="forbid")
    indices: list[int]
    values: list[float]

    @model_validator(mode="after")
    def _paired(self) -> SparseWeights:
        if len(self.indices) != len(self.values):
            raise ValueError(f"{len(self.indices)} indices but {len(self.values)} values")
        return self


class FileVersion(BaseModel):
    """The file version the chunk was read from (what its citations name)."""

    model_config = ConfigDict(extra="forbid")
    size: int
    mtime_ns: int
    digest: str = ""
    commit: str = ""
    indexed_at: float = 0.0


class ExportRecord(BaseModel):
    """One live chunk of the exported index."""

    model_config = ConfigDict(extra="forbid")
    chunk_id: str
    doc_id: str
    path: str
    span: Span
    text: str
    dense: list[float]
    sparse: SparseWeights
    embedder: str  # the embedder tag (`EmbedderVersion.slug`)
    embedder_version: EmbedderVersion
    file_version: FileVersion
    payload: dict[str, Any]  # the stored payload (`IndexedChunk` fields)

    @model_validator(mode="after")
    def _consistent(self) -> ExportRecord:
        if len(self.dense) != self.embedder_version.dimension:
            raise ValueError(
                f"dense has {len(self.dense)} dimensions, the embedder "
                f"{self.embedder_version.slug} {self.embedder_version.dimension}"
            )
        if self.embedder != self.embedder_version.slug:
            raise ValueError(f"embedder {self.embedder!r} is not {self.embedder_version.slug!r}")
        return self

    @classmethod
    def of(
        cls,
        chunk: IndexedChunk,
        dense: list[float],
        sparse: tuple[list[int], list[float]],
        embedder: EmbedderVersion,
    ) -> ExportRecord:
        return cls(
            chunk_id=chunk.point_id,
            doc_id=chunk.doc_id,
            path=chunk.path,
            span=Span(start=chunk.char_start, end=chunk.char_end, page=chunk.page),
            text=chunk.text,
            dense=dense,
            sparse=SparseWeights(indices=sparse[0], values=sparse[1]),
            embedder=embedder.slug,
            embedder_version=embedder,
            file_version=FileVersion(
                size=chunk.file_size,
                mtime_ns=chunk.file_mtime_ns,
                digest=chunk.file_digest,
                commit=chunk.file_commit,
                indexed_at=chunk.indexed_at,
            ),
            payload=chunk.model_dump(mode="json", exclude={"point_id"}),
        )

    def chunk(self) -> IndexedChunk:
        """The chunk this record rebuilds (the named keys win over the payload's)."""
        return IndexedChunk.model_validate(
            {
                **self.payload,
                "point_id": self.chunk_id,
                "doc_id": self.doc_id,
                "path": self.path,
                "text": self.text,
                "char_start": self.span.start,
                "char_end": self.span.end,
                "page": self.span.page,
                "embedder": self.embedder,
                "status": "live",
            }
        )


class ExportReport(BaseModel):
    """What `export` wrote or `import` read: how many records, of which embedder."""

    records: int
    format: str
    path: str | None  # None: JSON lines to stdout
    embedder: str
    collection: str
