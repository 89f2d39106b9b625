"""The catalogue of metadata fields of one data dir: each field's type, fixed by its first
reading, kept in `state/fields.json`.

The ingest flow's store owner admits each parsed document's metadata through it
(`FieldCatalog.admit`): a new field takes the type of its first value; a known field's value is
read as the field's type, and one that cannot be is kept as text with a note (the ledger
shows it). The query side reads it (`types`) to check a filter: a filter on a field that no
document carries is an error, never an empty or a full answer.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ragstream.connectors.protocols import SearchFilter, VectorStore
from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.metadata import (
    FieldType,
    MetaOrigin,
    RawValue,
    as_text,
    infer_type,
    stored_as,
    stored_type,
)
from ragstream.core.models import FieldInfo, IndexedChunk, ParsedDocument, StoredValue

FIELDS_FILE = "fields.json"


class FieldRecord(BaseModel):
    """One field: its type, and the document and place its first reading came from."""

    type: FieldType
    first_doc: str = ""
    first_origin: MetaOrigin | None = None
    # the sources whose documents carry it: a tenant's filter knows the fields of its own
    # sources only (a field of another tenant's is no field to it, not even a near name)
    sources: list[str] = Field(default_factory=list)


class Admitted(BaseModel):
    """A document's metadata in stored form, where each field came from, and notes."""

    model_config = ConfigDict(frozen=True)

    meta: dict[str, StoredValue]
    origin: dict[str, MetaOrigin]
    notes: tuple[str, ...]


class FieldCatalog:
    """`state/fields.json`: field name -> `FieldRecord`, re-read when the file changes."""

    def __init__(self, state_dir: Path, zone: str = "UTC") -> None:
        self.path = state_dir / FIELDS_FILE
        self.zone = zone
        self._seen: tuple[int, int] | None = None
        self._records: dict[str, FieldRecord] = {}

    def records(self) -> dict[str, FieldRecord]:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self._seen:
            raw = read_json(self.path, {})
            self._records = {k: FieldRecord.model_validate(v) for k, v in raw.items()}
            self._seen = stamp
        return dict(self._records)

    def types(self, sources: Collection[str] | None = None) -> dict[str, FieldType]:
        """Each field's type; with `sources`, the fields their documents carry only."""
        return {
            name: rec.type
            for name, rec in self.records().items()
            if sources is None or not set(rec.sources).isdisjoint(sources)
        }

    def admit(self, doc: ParsedDocument) -> Admitted:
        """The document's metadata read as each field's type (a new field's first value fixes
        it; written to the catalogue at once)."""
        records = self.records()
        meta: dict[str, StoredValue] = {}
        notes = list(doc.metadata_notes)
        added = False
        for name, value in doc.metadata.items():
            record = records.get(name)
            if record is None:
                record = FieldRecord(
                    type=infer_type(value),
                    first_doc=doc.doc_id,
                    first_origin=doc.metadata_origin.get(name),
                )
            if doc.source not in record.sources:
                records[name] = record.model_copy(update={"sources": [*record.sources, doc.source]})
                added = True
            stored = _stored(value, record.type, self.zone)
            if stored is None:
                meta[name] = as_text(value)
                notes.append(f"{name}: {as_text(value)!r} is not a {record.type}; kept as text")
            else:
                meta[name] = stored
        if added:
            self._save(records)
        return Admitted(meta=meta, origin=dict(doc.metadata_origin), notes=tuple(notes))

    def learn(self, chunks: Iterable[IndexedChunk]) -> None:
        """Record the fields of chunks written without a reading (an import): a field not
        known yet takes the type its stored value reads as (`stored_type`)."""
        records = self.records()
        added = False
        for chunk in chunks:
            for name, value in chunk.meta.items():
                record = records.get(name)
                if record is None:
                    origin = chunk.meta_origin.get(name)
                    record = FieldRecord(
                        type=stored_type(value), first_doc=chunk.doc_id, first_origin=origin
                    )
                if chunk.source not in record.sources:
                    records[name] = record.model_copy(
                        update={"sources": [*record.sources, chunk.source]}
                    )
                    added = True
        if added:
            self._save(records)

    def _save(self, records: Mapping[str, FieldRecord]) -> None:
        write_json_atomic(self.path, {k: v.model_dump(mode="json") for k, v in records.items()})


def _stored(value: RawValue, field_type: FieldType, zone: str) -> StoredValue | None:
    """A list read into a single-valued field is not that field's type (kept as text)."""
    if isinstance(value, list) and field_type not in ("keyword", "keywords"):
        return None
    return stored_as(value, field_type, zone)


NO_META = Admitted(meta={}, origin={}, notes=())
EXAMPLES = 5


def field_catalogue(
    vectors: VectorStore, types: Mapping[str, FieldType], flt: SearchFilter
) -> list[FieldInfo]:
    """Each known field with the number of documents under `flt` (the caller's tenants and
    readers) that carry it, its commonest values and where it was read; a field none of
    them carries is left out (another tenant's fields are not shown)."""
    seen: dict[str, tuple[dict[str, StoredValue], dict[str, str]]] = {}
    for payload in vectors.live_payloads(flt, ["doc_id", "meta", "meta_origin"]):
        doc = str(payload.get("doc_id"))
        if doc not in seen:
            seen[doc] = (payload.get("meta") or {}, payload.get("meta_origin") or {})
    docs: Counter[str] = Counter()
    values: dict[str, Counter[str]] = {}
    origins: dict[str, Counter[str]] = {}
    for meta, origin in seen.values():
        for name, value in meta.items():
            docs[name] += 1
            items = value if isinstance(value, list) else [value]
            values.setdefault(name, Counter()).update(str(v) for v in items)
            origins.setdefault(name, Counter())[origin.get(name, "")] += 1
    return [
        FieldInfo(
            name=name,
            type=types[name],
            docs=docs[name],
            examples=tuple(v for v, _ in values[name].most_common(EXAMPLES)),
            origins=dict(origins[name]),
        )
        for name in sorted(docs)
        if name in types
    ]
