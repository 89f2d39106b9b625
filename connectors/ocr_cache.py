"""What OCR already read, by content (`<state_dir>/ocr.sqlite3`).

OCR is the costliest parse step (a fraction of a second to seconds per page), so its output
is kept by key: the content hash of a file's bytes, or of one rendered page's pixels, with
the engine's identity (name, version, languages, language data) and the settings that change
what it reads (`operators.ocr`, `operators.parse._OcrRun`). An unchanged scan is never read
twice: not on a re-sync or a restart, not after a chunker or embedder change (the cache sits
before chunking), and a blue/green reindex never parses at all. A PDF with one page changed
re-reads that page only (the other pages' pixels hit).

sqlite (stdlib) in WAL mode: each `put` is one committed transaction, and several parse
workers or processes may share the file. The connection opens on first use, so a reader
holding the cache can be built before the flow runs. Rows are never deleted: a page's text
is a few kilobytes, and a scan that disappears may come back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ocr (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    at REAL NOT NULL
)
"""


class OcrPageCache:
    """key -> OCR output (JSON text), persisted; safe to share between threads."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "ocr.sqlite3"
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30.0
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            self._db = db
        return self._db

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._conn().execute("SELECT value FROM ocr WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        """Record one result (committed on return; idempotent by key)."""
        with self._lock:
            self._conn().execute(
                "INSERT OR REPLACE INTO ocr VALUES (?, ?, ?)", (key, value, time.time())
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn().execute("SELECT COUNT(*) FROM ocr").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path}  # a copy in another process opens its own connection

    def __setstate__(self, state: dict[str, object]) -> None:
        self.path = Path(str(state["path"]))
        self._lock = threading.Lock()
        self._db = None
