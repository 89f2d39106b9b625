"""`RagstreamRetriever`: a LlamaIndex retriever over a ragstream index, embedded in this
process or a running server (`pip install 'ragstream[llamaindex]'`).

    from ragstream.integrations.llamaindex import RagstreamRetriever
    retriever = RagstreamRetriever(url="http://127.0.0.1:8765", api_key="...", k=5)
    nodes = retriever.retrieve("how are deleted files handled?")
    nodes[0].score, nodes[0].node.metadata["path"], nodes[0].node.ref_doc_id

Each `NodeWithScore` is one ranked chunk (`Client.retrieve`: hybrid retrieval, fusion and
rerank, no generation) and its score; its `TextNode` holds the text, the chunk's point id
as the node id, the document as its source node (`ref_doc_id`), the char span in the
document's text, and the provenance as metadata (`ragstream.integrations.base.chunk_metadata`),
of which a language model is shown the path, title, section and page. `retrieve` asks a
`Client`; `aretrieve` an `AsyncClient` where there is one, else the `Client` on a worker
thread. Importing this module imports `llama_index.core`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from ragstream.client import AsyncClient, Client
from ragstream.core.answers import QueryFilters, RetrievedChunk
from ragstream.integrations.base import (
    PROMPT_METADATA,
    Connection,
    chunk_metadata,
    retrieve_options,
)


class RagstreamRetriever(BaseRetriever):
    """The chunks a ragstream index ranks first for a question, as LlamaIndex nodes.

    Args:
        client: A `ragstream.Client` (embedded or over HTTP) or `ragstream.AsyncClient` to
            ask, the caller's to close; or None, to open one from `data_dir` or `url`
            (`close` closes it). With none of the three, the default data dir is opened.
        data_dir: An index's data dir, opened on the first question (or asked through the
            server a running `serve` / `watch --serve` recorded in it).
        url: A running `ragstream serve` or `watch --serve`.
        api_key: The key sent as `Authorization: Bearer ...`: it picks the tenant.
        timeout_s: Seconds an HTTP request may take.
        k: How many chunks to return (1 to 50), after fusion and rerank.
        filter: A metadata filter, its text form (`"tags = finance AND year >= 2024"`) or
            its JSON form (docs/guide/filters.md), applied inside the stores.
        filters: Path prefix, file types and doc ids (`{"path_prefix": "docs:guides/"}`).
        callback_manager: LlamaIndex's callbacks (default: `Settings.callback_manager`).
        verbose: LlamaIndex's verbose flag.
    """

    def __init__(
        self,
        client: Client | AsyncClient | None = None,
        *,
        data_dir: str | Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        k: int = 8,
        filter: str | dict[str, Any] | None = None,
        filters: QueryFilters | dict[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not 1 <= k <= 50:
            raise ValueError(f"k must be between 1 and 50, not {k}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.k, self.filter, self.filters = k, filter, filters
        self._connection = Connection(
            client, data_dir=data_dir, url=url, api_key=api_key, timeout_s=timeout_s
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        chunks = self._connection.retrieve(query_bundle.query_str, self._options())
        return [to_node(chunk) for chunk in chunks]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        chunks = await self._connection.aretrieve(query_bundle.query_str, self._options())
        return [to_node(chunk) for chunk in chunks]

    def _options(self) -> dict[str, Any]:
        return retrieve_options(self.k, self.filter, self.filters)

    def close(self) -> None:
        """Close the client the retriever opened from `data_dir` or `url` (a given client
        is its caller's to close)."""
        self._connection.close()

    def __enter__(self) -> RagstreamRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def to_node(chunk: RetrievedChunk) -> NodeWithScore:
    """One ranked chunk as a LlamaIndex node and its score: the text, the point id as the
    node id, the document as the source node, the char span, the provenance as metadata
    (the path, title, section and page shown to a language model, the rest kept out)."""
    metadata = chunk_metadata(chunk)
    hidden = [key for key in metadata if key not in PROMPT_METADATA]
    node = TextNode(
        id_=chunk.point_id,
        text=chunk.text,
        metadata=metadata,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=hidden,
        start_char_idx=chunk.char_start,
        end_char_idx=chunk.char_end,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=chunk.doc_id)},
    )
    return NodeWithScore(node=node, score=chunk.score)


__all__ = ["RagstreamRetriever", "to_node"]
