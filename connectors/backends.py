"""The Qdrant backend a store kind names: the one place that picks one.

`edge` is `connectors.qdrant_edge`, `qdrant` is `connectors.qdrant_server`, each imported on
first use (the edge path never pays for importing qdrant-client, nor the server path for
qdrant-edge). `connectors.stores` opens stores through it and `connectors.data_format`'s
migration steps rewrite them through it; neither backend imports those modules, so no
import runs in a circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ragstream.connectors.vector_stores import BaseQdrantStore, RetryPolicy
from ragstream.core.models import EmbedderVersion


class Backend(Protocol):
    """What `connectors.qdrant_edge` and `connectors.qdrant_server` each provide."""

    def open_store(
        self,
        base_dir: Path,
        index_name: str,
        embedder: EmbedderVersion,
        url: str | None,
        retry: RetryPolicy | None = None,
        sparse: bool = False,
    ) -> BaseQdrantStore: ...

    def read_live(
        self, base_dir: Path, index_name: str, url: str | None
    ) -> tuple[str, EmbedderVersion] | None: ...

    def write_live(
        self, base_dir: Path, index_name: str, collection: str, url: str | None
    ) -> None: ...

    def drop(self, base_dir: Path, index_name: str, collection: str, url: str | None) -> bool:
        """Delete a collection of this index for good; False if there was none.

        Refuses (ValueError) the collection the live pointer names, a name that is not one of
        this index's collections, and (StoreBusyError) a collection open in this process.
        """
        ...

    def list(self, base_dir: Path, index_name: str, url: str | None) -> dict[str, EmbedderVersion]:
        """This index's collections with the embedder version recorded on each."""
        ...


def backend_of(kind: str) -> Backend:
    """The backend a store kind names, imported on first use."""
    if kind == "edge":
        from ragstream.connectors import qdrant_edge

        return qdrant_edge.BACKEND
    if kind == "qdrant":
        from ragstream.connectors import qdrant_server

        return qdrant_server.BACKEND
    raise ValueError(f"unknown vector store kind {kind!r} (expected 'edge' or 'qdrant')")
