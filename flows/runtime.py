"""Opening and closing everything one ingest process owns (stores, embedder, state).

One process owns an embedded data dir (Qdrant Edge and tantivy lock it), so the runtime
is a context manager that always closes the stores, even on Ctrl-C.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from connectors.lexical import open_lexical_index
from connectors.protocols import LexicalIndex, VectorStore
from connectors.state import DeadLetterBook, RedactionBook, SyncState
from connectors.vector_stores import open_vector_store
from core.settings import Settings
from core.telemetry import configure
from operators.chunk import ChunkerConfig
from operators.embed import Embedder, load_embedder


@dataclass
class Runtime:
    settings: Settings
    embedder: Embedder
    vectors: VectorStore
    lexical: LexicalIndex
    dead_letters: DeadLetterBook
    redactions: RedactionBook
    sync_state: SyncState
    # Held by each index batch and by each query served from this process (`watch --serve`):
    # the embedded stores see one writer or one reader at a time.
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def chunker(self) -> ChunkerConfig:
        cfg = self.settings.chunk
        budget = min(cfg.max_tokens, self.embedder.max_seq_length - 2)
        return ChunkerConfig(
            max_tokens=budget,
            min_tokens=min(cfg.min_tokens, budget // 2),
            boundary_modulus=cfg.boundary_modulus,
            tokenizer=self.embedder.tokenizer_name,
        )


@contextmanager
def open_runtime(settings: Settings) -> Iterator[Runtime]:
    configure(settings.telemetry_exporter, settings.otlp_endpoint)
    embedder = load_embedder(settings.embedder)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    vectors = open_vector_store(
        settings.vector_backend,
        settings.vectors_dir,
        settings.index_name,
        embedder.version,
        url=settings.qdrant_url,
    )
    try:
        lexical = open_lexical_index(settings.lexical_backend, settings.lexical_dir)
        try:
            yield Runtime(
                settings,
                embedder,
                vectors,
                lexical,
                DeadLetterBook(settings.state_dir),
                RedactionBook(settings.state_dir),
                SyncState(settings.state_dir),
            )
        finally:
            lexical.close()
    finally:
        vectors.close()
