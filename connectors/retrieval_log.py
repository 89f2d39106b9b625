"""An append-only JSON-lines log of every query, rotated by size, in the data dir.

Each line says what was asked, by which tenant, against which embedder, what came back
(chunk ids with scores), whether it was refused, and the trace id — enough to audit an
answer after the index has changed. Lines are only ever appended; rotation renames whole
files (`retrieval.jsonl` → `.1` → `.2` …) and drops the oldest beyond `keep`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class RetrievalLog:
    def __init__(self, path: Path, max_bytes: int = 10 * 1024 * 1024, keep: int = 5) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self._lock = threading.Lock()

    def _rotated(self, i: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{i}")

    def _rotate(self) -> None:
        self._rotated(self.keep).unlink(missing_ok=True)
        for i in range(self.keep - 1, 0, -1):
            if self._rotated(i).exists():
                os.replace(self._rotated(i), self._rotated(i + 1))
        os.replace(self.path, self._rotated(1))

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                self._rotate()
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()

    def read(self) -> Iterator[dict[str, Any]]:
        """Every entry still kept, oldest first (rotated files, then the current one)."""
        files = [self._rotated(i) for i in range(self.keep, 0, -1)] + [self.path]
        for file in files:
            if file.exists():
                with file.open(encoding="utf-8") as fh:
                    for line in fh:
                        if line.strip():
                            yield json.loads(line)
