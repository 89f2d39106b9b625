"""Opening an embedded data dir's stores alone, without any model: an audit, a status, the
ledger (the served index over every side is `served.open_served`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager

from ragstream.connectors.protocols import LexicalIndex, VectorStore
from ragstream.connectors.stores import configured_live, open_configured, open_lexical_index
from ragstream.core.settings import Settings
from ragstream.query.retrieve import no_index

LiveStores = tuple[str, VectorStore, LexicalIndex]  # the live collection, its store, BM25


@contextmanager
def live_vectors(settings: Settings) -> Iterator[tuple[str, VectorStore] | None]:
    """The live collection's name and vector store, opened with its recorded embedder's
    version (no model); None when nothing is indexed yet."""
    live = configured_live(settings)
    if live is None:
        yield None
        return
    vectors = open_configured(settings, live[1])
    try:
        yield live[0], vectors
    finally:
        vectors.close()


@contextmanager
def open_live(settings: Settings) -> Iterator[LiveStores | None]:
    """`live_vectors` and the lexical index beside them; None when nothing is indexed."""
    s = settings
    with live_vectors(s) as live:
        if live is None:
            yield None
            return
        name, vectors = live
        with closing(open_lexical_index(s.lexical, s.lexical_dir, lambda: vectors)) as lexical:
            yield name, vectors, lexical


@contextmanager
def open_stores(settings: Settings) -> Iterator[tuple[VectorStore, LexicalIndex]]:
    """The live vector store and the lexical index, opened without any model (an audit)."""
    with open_live(settings) as live:
        if live is None:
            raise no_index(settings)
        yield live[1], live[2]
