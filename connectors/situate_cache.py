"""The situating sentences already paid for, by chunk content hash (`<state_dir>/situate.sqlite3`).

An LLM call is the one ingest cost that is money, not CPU, so every sentence is kept: a
re-sync, a chunk moved within or between files, a restart after a crash and a reindex
backfill never ask for it again. The content hash carries the situating identity (model,
prompt version, cap) through the chunker key, so a row can never be served for another
configuration; the identity is stored too, for inspection.

sqlite (stdlib) in WAL mode: each `put` is one transaction, durable when it returns, so a
crash leaves the rows committed before it and none half-written. The indexer commits a
batch's new sentences *before* it writes the chunks that carry them, hence a crash between
the two re-uses them on the next pass. Rows are never deleted (a sentence is a few hundred
bytes, and a chunk that disappears may come back — an undo, a revert, a moved file).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS situations (
    content_hash TEXT PRIMARY KEY,
    sentence TEXT NOT NULL,
    identity TEXT NOT NULL,
    at REAL NOT NULL
)
"""
_BATCH = 500  # sqlite's host-parameter limit is far above; keeps each IN (...) modest


class SituateCache:
    """content hash -> situating sentence, persisted; safe to share between threads."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "situate.sqlite3"
        self._lock = threading.Lock()  # bytewax workers may call from different threads
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def get(self, hashes: Iterable[str]) -> dict[str, str]:
        """The cached sentence of each hash that has one."""
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, str] = {}
        with self._lock:
            for i in range(0, len(wanted), _BATCH):
                part = wanted[i : i + _BATCH]
                rows = self._db.execute(
                    "SELECT content_hash, sentence FROM situations WHERE content_hash IN "
                    f"({','.join('?' * len(part))})",
                    part,
                )
                out.update(dict(rows.fetchall()))
        return out

    def put(self, sentences: Mapping[str, str], identity: str) -> None:
        """Record sentences in one transaction (durable on return; idempotent by hash)."""
        if not sentences:
            return
        now = time.time()
        rows = [(h, s, identity, now) for h, s in sentences.items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO situations VALUES (?, ?, ?, ?)", rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM situations").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
