"""`RagstreamRetriever`: a LangChain retriever over a ragstream index, embedded in this
process or a running server (`pip install 'ragstream[langchain]'`).

    from ragstream.integrations.langchain import RagstreamRetriever
    retriever = RagstreamRetriever(url="http://127.0.0.1:8765", api_key="...", k=5)
    docs = retriever.invoke("how are deleted files handled?")
    docs[0].metadata["path"], docs[0].metadata["char_start"], docs[0].metadata["score"]

Each `Document` is one ranked chunk (`Client.retrieve`: hybrid retrieval, fusion and
rerank, no generation): its text, the chunk's point id as the document id, and its
provenance as metadata (`ragstream.integrations.base.chunk_metadata`). `invoke` asks a
`Client`; `ainvoke` an `AsyncClient` where there is one, else the `Client` on a worker
thread. Importing this module imports `langchain_core`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr

from ragstream.client import AsyncClient, Client
from ragstream.core.answers import QueryFilters, RetrievedChunk
from ragstream.integrations.base import Connection, chunk_metadata, retrieve_options


class RagstreamRetriever(BaseRetriever):
    """The chunks a ragstream index ranks first for a question, as LangChain `Document`s.

    Give `client` (a `Client`, embedded or over HTTP, or an `AsyncClient`: the caller's to
    close), or `data_dir` or `url` (and `api_key`) for the retriever to open its own
    (`close` closes it). With none of them, the default data dir is opened.

    Attributes:
        client: A `ragstream.Client` or `ragstream.AsyncClient` to ask.
        data_dir: An index's data dir, opened on the first question (or asked through the
            server a running `serve` / `watch --serve` recorded in it).
        url: A running `ragstream serve` or `watch --serve`.
        api_key: The key sent as `Authorization: Bearer ...`: it picks the tenant.
        timeout_s: Seconds an HTTP request may take.
        k: How many chunks to return (1 to 50), after fusion and rerank.
        filter: A metadata filter, its text form (`"tags = finance AND year >= 2024"`) or
            its JSON form (docs/guide/filters.md), applied inside the stores.
        filters: Path prefix, file types and doc ids (`{"path_prefix": "docs:guides/"}`).
    """

    client: Client | AsyncClient | None = None
    data_dir: str | Path | None = None
    url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    timeout_s: float = 120.0
    k: int = Field(default=8, ge=1, le=50)
    filter: str | dict[str, Any] | None = None
    filters: QueryFilters | dict[str, Any] | None = None

    _connection: Connection = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._connection = Connection(
            self.client,
            data_dir=self.data_dir,
            url=self.url,
            api_key=self.api_key,
            timeout_s=self.timeout_s,
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        chunks = self._connection.retrieve(query, self._options())
        return [to_document(chunk) for chunk in chunks]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        chunks = await self._connection.aretrieve(query, self._options())
        return [to_document(chunk) for chunk in chunks]

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


def to_document(chunk: RetrievedChunk) -> Document:
    """One ranked chunk as a LangChain `Document`: its text, its point id, its provenance."""
    return Document(page_content=chunk.text, metadata=chunk_metadata(chunk), id=chunk.point_id)


__all__ = ["RagstreamRetriever", "to_document"]
