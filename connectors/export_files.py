"""Export records as files: JSON lines (one `ExportRecord` object a line) or Parquet (one row
a record: the same keys as columns, `span`, `sparse`, `file_version` and `embedder_version`
as structs, `dense` a list of float32, `payload` a JSON string), written and read a batch at
a time. A file is written as `<name>.partial` and renamed once whole; a record that does not
read is refused with its line or row named.

Parquet needs pyarrow (`pip install 'ragstream[parquet]'`), imported only when used.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import ValidationError

from ragstream.core.errors import InvalidRequestError
from ragstream.core.export import EXPORT_FORMATS, ExportRecord

if TYPE_CHECKING:
    import pyarrow as pa

BATCH = 1000
PARQUET_MAGIC = b"PAR1"
PARTIAL = ".partial"


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise InvalidRequestError(
            "Parquet needs pyarrow: pip install 'ragstream[parquet]' (or use --format jsonl)"
        ) from exc
    return pyarrow


def _schema(pa: Any) -> pa.Schema:
    return pa.schema(
        [
            ("chunk_id", pa.string()),
            ("doc_id", pa.string()),
            ("path", pa.string()),
            ("span", pa.struct([("start", pa.int64()), ("end", pa.int64()), ("page", pa.int64())])),
            ("text", pa.string()),
            ("dense", pa.list_(pa.float32())),
            (
                "sparse",
                pa.struct([("indices", pa.list_(pa.uint32())), ("values", pa.list_(pa.float32()))]),
            ),
            ("embedder", pa.string()),
            (
                "embedder_version",
                pa.struct(
                    [
                        ("name", pa.string()),
                        ("fingerprint", pa.string()),
                        ("dimension", pa.int64()),
                        ("normalize", pa.bool_()),
                        ("query_prefix", pa.string()),
                        ("passage_prefix", pa.string()),
                    ]
                ),
            ),
            (
                "file_version",
                pa.struct(
                    [
                        ("size", pa.int64()),
                        ("mtime_ns", pa.int64()),
                        ("digest", pa.string()),
                        ("commit", pa.string()),
                        ("indexed_at", pa.float64()),
                    ]
                ),
            ),
            ("payload", pa.string()),
        ]
    )


def _batches(records: Iterable[ExportRecord]) -> Iterator[list[ExportRecord]]:
    batch: list[ExportRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


@contextmanager
def _whole(out: Path) -> Iterator[Path]:
    """A path to write `out` through: renamed into place only when the block ends cleanly."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + PARTIAL)
    try:
        yield partial
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)


def write_records(records: Iterable[ExportRecord], fmt: str, out: Path | None) -> int:
    """Write `records` as `fmt` to `out` (JSON lines to stdout when None); how many."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidRequestError(f"unknown export format {fmt!r}: jsonl or parquet")
    if fmt == "jsonl":
        if out is None:
            return _jsonl(records, sys.stdout)
        with _whole(out) as partial, partial.open("w", encoding="utf-8") as fh:
            return _jsonl(records, fh)
    if out is None:
        raise InvalidRequestError("Parquet is a binary file: name it with --out FILE")
    pa = _pyarrow()
    schema = _schema(pa)
    n = 0
    with _whole(out) as partial, pa.parquet.ParquetWriter(partial, schema) as writer:
        for batch in _batches(records):
            rows = [{**r.model_dump(mode="json"), "payload": json.dumps(r.payload)} for r in batch]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            n += len(batch)
        if n == 0:
            writer.write_table(schema.empty_table())
    return n


def _jsonl(records: Iterable[ExportRecord], fh: IO[str]) -> int:
    n = 0
    for record in records:
        fh.write(record.model_dump_json())
        fh.write("\n")
        n += 1
    fh.flush()
    return n


def file_format(path: Path) -> str:
    """ "parquet" or "jsonl", told by the file's first bytes."""
    if not path.is_file():
        raise InvalidRequestError(f"no export file {path}")
    with path.open("rb") as fh:
        return "parquet" if fh.read(4) == PARQUET_MAGIC else "jsonl"


def read_records(path: Path) -> Iterator[ExportRecord]:
    """The records of an export file, Parquet or JSON lines."""
    parquet = file_format(path) == "parquet"
    yield from (_parquet_rows(path) if parquet else _jsonl_rows(path))


def _record(raw: Any, where: str) -> ExportRecord:
    try:
        return ExportRecord.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "record"
        raise InvalidRequestError(f"{where}: {at}: {first['msg']}") from None


def _jsonl_rows(path: Path) -> Iterator[ExportRecord]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidRequestError(f"{path} line {number}: not JSON ({exc})") from None
            yield _record(raw, f"{path} line {number}")


def _parquet_rows(path: Path) -> Iterator[ExportRecord]:
    pa = _pyarrow()
    try:
        table = pa.parquet.ParquetFile(path)
        row = 0
        for batch in table.iter_batches(batch_size=BATCH):
            for raw in batch.to_pylist():
                row += 1
                where = f"{path} row {row}"
                try:
                    raw["payload"] = json.loads(raw.get("payload") or "null")
                except (json.JSONDecodeError, TypeError) as exc:
                    raise InvalidRequestError(f"{where}: payload: not JSON ({exc})") from None
                yield _record(raw, where)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidRequestError(f"{path}: not a readable Parquet file ({exc})") from None
