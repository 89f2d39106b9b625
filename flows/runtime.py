"""Opening and closing everything one ingest process owns (stores, embedders, state).

One process owns an embedded data dir (Qdrant Edge and tantivy lock it), so the runtime
is a context manager that always closes the stores, even on Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ragstream.connectors.ocr_cache import OcrPageCache
from ragstream.connectors.protocols import LexicalIndex, ParserKeys, VectorStore
from ragstream.connectors.state import DeadLetterBook, RedactionBook, SyncState
from ragstream.connectors.stores import open_lexical_index
from ragstream.core.rwlock import IndexLock
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure
from ragstream.flows.sides import IndexSides, open_sides
from ragstream.flows.situate import SituateStep, open_situate, situate_model
from ragstream.operators.chunk import ChunkerConfig
from ragstream.operators.embed import Embedder
from ragstream.operators.ocr import OcrOptions
from ragstream.operators.parse import parser_keys
from ragstream.operators.situate import situate_identity

if TYPE_CHECKING:
    from ragstream.flows.reindex import BackgroundBackfill


@dataclass
class Runtime:
    settings: Settings
    sides: IndexSides
    lexical: LexicalIndex
    dead_letters: DeadLetterBook
    redactions: RedactionBook
    sync_state: SyncState
    backfill: BackgroundBackfill | None = None  # in `watch`: where a reindex backfill runs
    situate: SituateStep | None = None  # `chunk.situate`: the LLM sentence step and its cache

    @property
    def lock(self) -> IndexLock:
        """One writer at a time (index batches, backfill pages, pointer swaps); queries
        served from this process (`watch --serve`) read together, kept out only while the
        stores change (`lock.read()`)."""
        return self.sides.lock

    @property
    def embedder(self) -> Embedder:
        return self.sides.live.embedder

    @property
    def vectors(self) -> VectorStore:
        return self.sides.live.vectors

    @property
    def chunker(self) -> ChunkerConfig:
        return chunker_for(self.settings, self.embedder)


MIN_TEXT_TOKENS = 16  # what is left for chunk text after header + sentence (ChunkSettings' floor)


def ocr_options(settings: Settings) -> OcrOptions:
    """The `parse.*` OCR settings as the parse operator takes them."""
    p = settings.parse
    return OcrOptions(
        mode=p.ocr,
        engine=p.ocr_engine,
        languages=p.ocr_languages,
        dpi=p.ocr_dpi,
        max_page_pixels=p.ocr_max_page_pixels,
        max_pages=p.ocr_max_pages,
    )


def parser_keys_of(settings: Settings) -> ParserKeys:
    """A file's path -> the parser keys under which it reads now as it did then: what the
    catch-up scan and the audit hold each indexed or dead-lettered file's key against.
    Remembered per path: every point of a file asks for the same keys."""
    options = ocr_options(settings)

    @lru_cache(maxsize=65536)
    def keys(path: str) -> Collection[str]:
        return parser_keys(path, options)

    return keys


def ocr_cache(settings: Settings) -> OcrPageCache:
    """The data dir's OCR cache (opened on first use)."""
    return OcrPageCache(settings.state_dir)


def chunker_for(settings: Settings, embedder: Embedder) -> ChunkerConfig:
    """The chunker of the live embedder: chunks never exceed its max sequence length. Every
    side of a reindex gets the very same chunks (one chunking, several embeddings)."""
    cfg = settings.chunk
    # the contextual header and sentence are embedded with the text: they come out of its budget
    context_tokens = cfg.header_tokens + (cfg.situate_tokens if cfg.situate else 0)
    budget = min(cfg.max_tokens, embedder.max_seq_length - 2) - context_tokens
    if budget < MIN_TEXT_TOKENS:
        raise ValueError(
            f"chunk.header_tokens + chunk.situate_tokens ({context_tokens}) leave {budget} "
            f"tokens of chunk text within {embedder.version.name}'s max sequence length "
            f"({embedder.max_seq_length}); at least {MIN_TEXT_TOKENS} are needed"
        )
    situate = situate_identity(situate_model(settings), cfg.situate_tokens) if cfg.situate else ""
    return ChunkerConfig(
        max_tokens=budget,
        min_tokens=min(cfg.min_tokens, budget // 2),
        boundary_modulus=cfg.boundary_modulus,
        tokenizer=embedder.tokenizer_name,
        header_tokens=cfg.header_tokens,
        situate=situate,
    )


def mark_lexical(settings: Settings) -> str:
    """The BM25 leg in effect, recorded in the data dir for "auto" to read from now on;
    called before any store opens ("auto" looks at the data dir)."""
    kind = settings.lexical
    if not settings.lexical_marker.exists():
        settings.lexical_marker.parent.mkdir(parents=True, exist_ok=True)
        settings.lexical_marker.write_text(kind + "\n", encoding="utf-8")
    return kind


@contextmanager
def open_runtime(settings: Settings) -> Iterator[Runtime]:
    configure(settings.telemetry.exporter, settings.telemetry.otlp_endpoint)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    situate = open_situate(settings)  # first: a misconfiguration fails before any store opens
    lexical_kind = mark_lexical(settings)
    try:
        with open_sides(settings) as sides:
            lexical = open_lexical_index(
                lexical_kind, settings.lexical_dir, lambda: sides.live.vectors
            )
            try:
                yield Runtime(
                    settings,
                    sides,
                    lexical,
                    DeadLetterBook(settings.state_dir),
                    RedactionBook(settings.state_dir),
                    SyncState(settings.state_dir),
                    situate=situate,
                )
            finally:
                lexical.close()
    finally:
        if situate is not None:
            situate.close()
