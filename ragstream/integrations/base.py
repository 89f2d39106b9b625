"""What the framework retrievers share, with no framework imported: the index they ask and
each retrieved chunk's metadata.

A `Connection` is a `Client` or `AsyncClient` given by the caller, or the fields to open one
(a data dir, or a running server's URL and an API key). A blocking question goes to a
`Client`; an awaited one to an `AsyncClient` where there is one (given, or opened for the
call from the URL), else to the `Client`'s blocking call on a worker thread (an embedded
index: its stores are not async). `chunk_metadata` is a `RetrievedChunk`'s provenance as a
flat dict, what a LangChain `Document` and a LlamaIndex `TextNode` carry.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from ragstream.client import AsyncClient, Client
from ragstream.core.answers import QueryFilters, RetrievedChunk

AnyClient = Client | AsyncClient
# the metadata a framework shows a language model; the rest is for citing and highlighting
PROMPT_METADATA = ("path", "title", "section", "page")


class Connection:
    """Where a retriever's questions go.

    Args:
        client: A `Client` (embedded or over HTTP) or an `AsyncClient`, owned by the caller
            (who closes it); or None, to open one from the fields below.
        data_dir: The index's data dir, opened here on the first question (or asked through
            the server a running `serve` / `watch --serve` recorded in it).
        url: A running `ragstream serve` or `watch --serve`.
        api_key: The key sent as `Authorization: Bearer ...` (it picks the tenant).
        timeout_s: Seconds an HTTP request may take.

    With no client, data dir or URL, the default data dir is opened (`.ragstream`, or the
    `data_dir` setting).
    """

    def __init__(
        self,
        client: AnyClient | None = None,
        *,
        data_dir: str | Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        if client is not None and not isinstance(client, Client | AsyncClient):
            raise TypeError(f"client must be a ragstream Client or AsyncClient, not {client!r}")
        if client is not None and (data_dir is not None or url is not None):
            raise ValueError("give a client, or data_dir or url to open one, not both")
        if data_dir is not None and url is not None:
            raise ValueError("give data_dir (an embedded index) or url (a server), not both")
        self.given, self.data_dir, self.url = client, data_dir, url
        self.api_key, self.timeout_s = api_key, timeout_s
        self._opened: Client | None = None
        self._lock = threading.Lock()

    def client(self) -> Client:
        """The blocking client: the one given, or the one opened on first use (kept open
        until `close`)."""
        if isinstance(self.given, Client):
            return self.given
        if isinstance(self.given, AsyncClient):
            raise TypeError(
                "an AsyncClient answers awaited calls only (ainvoke, aretrieve); give a "
                "Client, or url= and api_key= to have the retriever open both"
            )
        with self._lock:
            if self._opened is None:
                self._opened = Client(
                    self.data_dir, url=self.url, api_key=self.api_key, timeout_s=self.timeout_s
                )
            return self._opened

    def retrieve(self, question: str, options: dict[str, Any]) -> list[RetrievedChunk]:
        """The ranked chunks for `question`, asked with a blocking call."""
        return self.client().retrieve(question, **options).results

    async def aretrieve(self, question: str, options: dict[str, Any]) -> list[RetrievedChunk]:
        """The ranked chunks for `question`, awaited: on the given `AsyncClient`, on one
        opened for this call from the URL (an `AsyncClient` belongs to one event loop), or
        on a worker thread running the `Client`'s blocking call."""
        if isinstance(self.given, AsyncClient):
            return (await self.given.retrieve(question, **options)).results
        if self.given is None and self.url is not None:
            async with AsyncClient(
                self.url, api_key=self.api_key, timeout_s=self.timeout_s
            ) as client:
                return (await client.retrieve(question, **options)).results
        return await asyncio.to_thread(self.retrieve, question, options)

    def close(self) -> None:
        """Close the client this connection opened (a given one is its caller's to close)."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()


def retrieve_options(
    k: int,
    filter: str | dict[str, Any] | None,
    filters: QueryFilters | dict[str, Any] | None,
) -> dict[str, Any]:
    """A retriever's settings as `Client.retrieve`'s keyword options."""
    options: dict[str, Any] = {"k": k}
    if filter is not None:
        options["filter"] = filter
    if filters is not None:
        options["filters"] = filters
    return options


def chunk_metadata(chunk: RetrievedChunk) -> dict[str, Any]:
    """A retrieved chunk's provenance: its ids, where it is (path, section, page, char span
    in the document's text), how it ranked, and the file version it was read from. Fields
    the chunk does not know (a page, an unknown version) are left out."""
    metadata: dict[str, Any] = {
        "point_id": chunk.point_id,
        "doc_id": chunk.doc_id,
        "path": chunk.path,
        "section": " > ".join(chunk.section_path),
        "section_path": list(chunk.section_path),
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "score": chunk.score,
        "rank": chunk.rank,
    }
    optional = {
        "title": chunk.title or None,
        "page": chunk.page,
        "file_version": chunk.file_version.model_dump() if chunk.file_version else None,
        "indexed_at": chunk.indexed_at,
    }
    metadata.update({key: value for key, value in optional.items() if value is not None})
    return metadata
