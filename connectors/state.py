"""Small JSON records in the data dir: dead letters, sync and reindex bookkeeping.

They are written atomically (temp file + rename), so a crash leaves the old or the new
version, never half a file. Dead letters are keyed by doc_id: a later success or a delete
clears the entry, and the catch-up scan retries a dead-lettered file only when it changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, TypeAdapter

from ragstream.connectors.protocols import STALE_FINGERPRINT, ParserKeys, parsed_elsewise
from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.models import DeadLetter, Redaction, ReindexRecord, VerifyReport
from ragstream.core.source_config import SourceConfig

M = TypeVar("M", bound=BaseModel)


ENDPOINT_FILE = "endpoint.json"


def endpoint_path(state_dir: Path) -> Path:
    """Where a serving process records its URL and pid (removed when it stops)."""
    return state_dir / ENDPOINT_FILE


class DocBook(Generic[M]):
    """doc_id -> record (a pydantic model with a `doc_id`), persisted as one JSON file."""

    def __init__(self, path: Path, model: type[M]) -> None:
        self._path = path
        raw = read_json(self._path, {})
        self._records: dict[str, M] = {k: model.model_validate(v) for k, v in raw.items()}

    def put(self, record: M) -> None:
        self._records[getattr(record, "doc_id")] = record  # noqa: B009

    def clear(self, doc_id: str) -> None:
        self._records.pop(doc_id, None)

    def save(self) -> None:
        write_json_atomic(self._path, {k: v.model_dump() for k, v in self._records.items()})

    def all(self) -> list[M]:
        return [self._records[k] for k in sorted(self._records)]


class DeadLetterBook(DocBook[DeadLetter]):
    """Files that could not be indexed, in `<state_dir>/dead_letters.json`."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir / "dead_letters.json", DeadLetter)

    def fingerprints(self, parser: ParserKeys | None = None) -> dict[str, set[str]]:
        """What the catch-up scan treats as 'already seen' for dead-lettered files; with
        `parser`, one read under a parser key it would no longer get is `STALE_FINGERPRINT`
        (retried: e.g. an image-only PDF dead-lettered while OCR was off)."""
        return {
            d.doc_id: {
                STALE_FINGERPRINT
                if parsed_elsewise(d.parser, d.path, parser)
                else d.fingerprint.token
            }
            for d in self.all()
            if d.fingerprint is not None
        }


class RedactionBook(DocBook[Redaction]):
    """Documents indexed with secrets redacted, in `<state_dir>/redactions.json`."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir / "redactions.json", Redaction)


class SyncState:
    """Bookkeeping that status shows: when the last pass finished."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / "sync.json"

    @property
    def last_sync(self) -> float | None:
        value = read_json(self._path, {}).get("last_sync")
        return float(value) if value is not None else None

    def mark(self, at: float) -> None:
        write_json_atomic(self._path, {"last_sync": at})


class ReindexBook:
    """The open blue/green reindex, `<state_dir>/reindex.json` (absent = none open)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "reindex.json"

    def load(self) -> ReindexRecord | None:
        raw = read_json(self.path, None)
        return ReindexRecord.model_validate(raw) if raw else None

    def save(self, record: ReindexRecord) -> None:
        write_json_atomic(self.path, record.model_dump(mode="json"))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


class SourcesBook:
    """The sources (folders, git repositories at a ref) last synced into this data dir,
    `<state_dir>/sources.json`: `verify` and `files` audit them when no PATH is given and none
    is configured (a `sync ./docs` names its folder on the command line only)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "sources.json"

    def load(self) -> list[SourceConfig]:
        return [_CONFIG.validate_python(recorded_config(v)) for v in read_json(self.path, [])]

    def record(self, sources: list[SourceConfig]) -> None:
        """Merge by name: a later sync of another folder adds it, of the same name replaces."""
        merged = {s.name: s for s in self.load()} | {s.name: s for s in sources}
        write_json_atomic(self.path, [merged[k].model_dump(mode="json") for k in sorted(merged)])


_CONFIG: TypeAdapter[SourceConfig] = TypeAdapter(SourceConfig)


def recorded_config(fields: dict[str, object]) -> dict[str, object]:
    """A source as a data dir recorded it, in today's form: a folder recorded before each
    kind had its own config carries the git fields empty (`git: null, ref: "HEAD"`)."""
    if fields.get("kind") or fields.get("git"):
        return fields
    return {k: v for k, v in fields.items() if k not in ("git", "ref")}


class VerifyBook:
    """The last `verify` report, `<state_dir>/verify.json` (status shows its drift counts)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "verify.json"

    def load(self) -> VerifyReport | None:
        raw = read_json(self.path, None)
        return VerifyReport.model_validate(raw) if raw else None

    def save(self, report: VerifyReport) -> None:
        write_json_atomic(self.path, report.model_dump(mode="json"))
