"""The framework retrievers (`ragstream.integrations`) over a real index: LangChain's
`invoke` / `ainvoke` and LlamaIndex's `retrieve` / `aretrieve`, each on an embedded `Client`,
on a data dir the retriever opens itself, on a served index by `Client`, `AsyncClient` and
URL; every document or node is one chunk `Client.retrieve` ranks, in its order, with its
provenance (doc id, path, section, char span, score, rank, file version); a metadata filter
in its text or JSON form keeps one file; an API key's retriever never sees another tenant's
documents; a LangChain chain and a LlamaIndex query engine run on them; and the remote
LangChain retriever loads no model or store."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from ragstream import api
from ragstream.client import AsyncClient, Client
from ragstream.core.answers import RetrievedChunk
from ragstream.core.settings import ServerSettings, Settings, load_settings
from ragstream.core.source_config import FolderConfig
from ragstream.integrations.langchain import RagstreamRetriever as LangChainRetriever
from ragstream.integrations.llamaindex import RagstreamRetriever as LlamaIndexRetriever
from tests.harness.helpers import served_over_http

BUDGET = (
    "---\ntags: [finance, q3]\nyear: 2024\ndraft: true\n---\n"
    "# Budget\n\nThe third quarter budget grew by four percent.\n"
)
ROTA = "---\ntags: [ops]\nyear: 2023\n---\n# Rota\n\nThe on-call rota changes every Monday.\n"
QUESTION = "quarter budget and the on-call rota"
BOTH = {"docs:budget.md", "docs:rota.md"}
# one filter, its text and its JSON form: only the budget carries the tag
FINANCE: list[str | dict[str, Any]] = [
    "tags = finance",
    {"field": "tags", "operator": "==", "value": "finance"},
]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Two Markdown files with front matter, synced with the static embedder."""
    root = tmp_path_factory.mktemp("frameworks")
    docs = root / "docs"
    docs.mkdir()
    (docs / "budget.md").write_text(BUDGET)
    (docs / "rota.md").write_text(ROTA)
    s = load_settings(root / "data", embedder="static")
    assert api.sync([docs], settings=s).docs_seen == 2
    return s


served = served_over_http


@pytest.fixture
def url(settings: Settings) -> Iterator[str]:
    with served(settings) as address:
        yield address


def expected(settings: Settings, **options: Any) -> list[RetrievedChunk]:
    """What `Client.retrieve` ranks (asked where the data dir is answered now)."""
    with Client(data_dir=settings.data_dir) as client:
        return client.retrieve(QUESTION, **options).results


def check_metadata(metadata: dict[str, Any], chunk: RetrievedChunk) -> None:
    """A document's or node's metadata is the chunk's provenance."""
    assert chunk.file_version is not None
    assert metadata["point_id"] == chunk.point_id
    assert metadata["doc_id"] == chunk.doc_id and metadata["path"] == chunk.path
    assert Path(chunk.path).name == chunk.doc_id.removeprefix("docs:")
    assert metadata["title"] == chunk.title and chunk.title in {"Budget", "Rota"}
    assert metadata["section_path"] == chunk.section_path == [chunk.title]
    assert metadata["section"] == chunk.title
    assert (metadata["char_start"], metadata["char_end"]) == (chunk.char_start, chunk.char_end)
    assert 0 <= chunk.char_start < chunk.char_end
    assert metadata["score"] == chunk.score and metadata["rank"] == chunk.rank
    version = metadata["file_version"]
    assert version == chunk.file_version.model_dump()
    assert version["size"] == Path(chunk.path).stat().st_size and version["digest"]
    assert metadata["indexed_at"] == chunk.indexed_at
    assert "page" not in metadata  # Markdown has no pages


def check_documents(documents: list[Document], chunks: list[RetrievedChunk]) -> None:
    assert [d.id for d in documents] == [c.point_id for c in chunks]
    assert [d.page_content for d in documents] == [c.text for c in chunks]
    for document, chunk in zip(documents, chunks, strict=True):
        check_metadata(document.metadata, chunk)


def check_nodes(nodes: list[NodeWithScore], chunks: list[RetrievedChunk]) -> None:
    assert [n.node.node_id for n in nodes] == [c.point_id for c in chunks]
    assert [n.score for n in nodes] == [c.score for c in chunks]
    for scored, chunk in zip(nodes, chunks, strict=True):
        node = scored.node
        assert isinstance(node, TextNode) and node.text == chunk.text
        assert node.ref_doc_id == chunk.doc_id
        assert (node.start_char_idx, node.end_char_idx) == (chunk.char_start, chunk.char_end)
        check_metadata(node.metadata, chunk)
        # a language model is shown where the chunk is, not its ids and scores
        shown = node.get_content(metadata_mode=MetadataMode.LLM)
        assert f"path: {chunk.path}" in shown and f"section: {chunk.title}" in shown
        assert "point_id" not in shown and "file_version" not in shown and chunk.text in shown


def doc_ids(items: list[Document] | list[NodeWithScore]) -> set[str]:
    return {
        item.metadata["doc_id"] if isinstance(item, Document) else item.node.metadata["doc_id"]
        for item in items
    }


# ---- embedded: a Client of this process, or a data dir the retriever opens -------------------
def test_langchain_on_an_embedded_client(settings: Settings) -> None:
    chunks = expected(settings, k=8)
    assert {c.doc_id for c in chunks} == BOTH
    with Client(data_dir=settings.data_dir) as client:
        assert client.mode == "embedded"
        retriever = LangChainRetriever(client=client)
        check_documents(retriever.invoke(QUESTION), chunks)
        check_documents(asyncio.run(retriever.ainvoke(QUESTION)), chunks)  # on a thread
        assert len(LangChainRetriever(client=client, k=1).invoke(QUESTION)) == 1
        for where in FINANCE:
            narrowed = LangChainRetriever(client=client, filter=where)
            assert doc_ids(narrowed.invoke(QUESTION)) == {"docs:budget.md"}
            assert doc_ids(asyncio.run(narrowed.ainvoke(QUESTION))) == {"docs:budget.md"}
        by_path = LangChainRetriever(client=client, filters={"doc_ids": ["docs:rota.md"]})
        assert doc_ids(by_path.invoke(QUESTION)) == {"docs:rota.md"}
        # a chain: the retriever's documents formatted into a prompt's context
        chain = LangChainRetriever(client=client, k=2) | RunnableLambda(
            lambda docs: "\n\n".join(f"[{d.metadata['path']}] {d.page_content}" for d in docs)
        )
        context = chain.invoke(QUESTION)
        assert "four percent" in context and "every Monday" in context


def test_llamaindex_on_an_embedded_client(settings: Settings) -> None:
    chunks = expected(settings, k=8)
    with Client(settings=settings) as client:
        assert client.mode == "embedded"
        retriever = LlamaIndexRetriever(client)
        check_nodes(retriever.retrieve(QUESTION), chunks)
        check_nodes(asyncio.run(retriever.aretrieve(QUESTION)), chunks)
        for where in FINANCE:
            narrowed = LlamaIndexRetriever(client, filter=where)
            assert doc_ids(narrowed.retrieve(QUESTION)) == {"docs:budget.md"}
            assert doc_ids(asyncio.run(narrowed.aretrieve(QUESTION))) == {"docs:budget.md"}
        # a query engine over it (a mock LLM: the answer is not the point, the sources are)
        engine = RetrieverQueryEngine.from_args(LlamaIndexRetriever(client, k=2), llm=MockLLM())
        response = engine.query(QUESTION)
        assert [n.node.node_id for n in response.source_nodes] == [c.point_id for c in chunks[:2]]


def test_a_retriever_opens_and_closes_its_own_data_dir(settings: Settings) -> None:
    chunks = expected(settings, k=8)
    with LangChainRetriever(data_dir=settings.data_dir) as retriever:
        check_documents(retriever.invoke(QUESTION), chunks)
        check_documents(asyncio.run(retriever.ainvoke(QUESTION)), chunks)
        assert retriever._connection.client().mode == "embedded"
    # closed: the stores are free again, for a LlamaIndex retriever of the same data dir
    with LlamaIndexRetriever(data_dir=settings.data_dir, filter="year < 2024") as nodes:
        assert doc_ids(nodes.retrieve(QUESTION)) == {"docs:rota.md"}
        assert doc_ids(asyncio.run(nodes.aretrieve(QUESTION))) == {"docs:rota.md"}


# ---- over HTTP: a served index asked by Client, AsyncClient or URL ----------------------------
def test_langchain_over_http(settings: Settings, url: str) -> None:
    chunks = expected(settings, k=8)  # asked through the server that holds the data dir
    with Client(url=url) as client:
        check_documents(LangChainRetriever(client=client).invoke(QUESTION), chunks)
    by_url = LangChainRetriever(url=url)
    check_documents(by_url.invoke(QUESTION), chunks)
    check_documents(asyncio.run(by_url.ainvoke(QUESTION)), chunks)  # an AsyncClient per call
    check_documents(asyncio.run(by_url.ainvoke(QUESTION)), chunks)  # ... in another loop
    by_url.close()

    async def on_async_client(where: str | dict[str, Any] | None) -> list[Document]:
        async with AsyncClient(url) as client:
            return await LangChainRetriever(client=client, filter=where).ainvoke(QUESTION)

    check_documents(asyncio.run(on_async_client(None)), chunks)
    for where in FINANCE:
        assert doc_ids(asyncio.run(on_async_client(where))) == {"docs:budget.md"}
        with LangChainRetriever(url=url, filter=where) as narrowed:
            assert doc_ids(narrowed.invoke(QUESTION)) == {"docs:budget.md"}


def test_llamaindex_over_http(settings: Settings, url: str) -> None:
    chunks = expected(settings, k=8)
    with Client(url=url) as client:
        check_nodes(LlamaIndexRetriever(client).retrieve(QUESTION), chunks)
    with LlamaIndexRetriever(url=url) as by_url:
        check_nodes(by_url.retrieve(QUESTION), chunks)
        check_nodes(asyncio.run(by_url.aretrieve(QUESTION)), chunks)

    async def on_async_client(where: str | dict[str, Any] | None) -> list[NodeWithScore]:
        async with AsyncClient(url) as client:
            return await LlamaIndexRetriever(client, filter=where).aretrieve(QUESTION)

    check_nodes(asyncio.run(on_async_client(None)), chunks)
    for where in FINANCE:
        assert doc_ids(asyncio.run(on_async_client(where))) == {"docs:budget.md"}
        with LlamaIndexRetriever(url=url, filter=where) as narrowed:
            assert doc_ids(narrowed.retrieve(QUESTION)) == {"docs:budget.md"}


# ---- tenants: an API key's retriever sees its own tenant's documents only -------------------
@pytest.fixture(scope="module")
def tenants_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The budget in tenant t1's source, the rota in t2's; key k1 reads t1, k2 reads t2."""
    root = tmp_path_factory.mktemp("tenants")
    (root / "one").mkdir()
    (root / "two").mkdir()
    (root / "one" / "budget.md").write_text(BUDGET)
    (root / "two" / "rota.md").write_text(ROTA)
    s = load_settings(
        root / "data",
        embedder="static",
        sources=[
            FolderConfig(name="one", root=root / "one", tenant="t1"),
            FolderConfig(name="two", root=root / "two", tenant="t2"),
        ],
        server=ServerSettings(api_keys={"k1": "t1", "k2": "t2"}),
    )
    assert api.sync([root / "one", root / "two"], settings=s).docs_seen == 2
    with served(s) as address:
        yield address


@pytest.mark.parametrize(("key", "own"), [("k1", "one:budget.md"), ("k2", "two:rota.md")])
def test_a_key_s_retriever_never_sees_another_tenant(tenants_url: str, key: str, own: str) -> None:
    """Asked for both files' words, each key gets its own tenant's file only."""
    seen: list[set[str]] = []
    with LangChainRetriever(url=tenants_url, api_key=key) as documents:
        seen += [doc_ids(documents.invoke(QUESTION))]
        seen += [doc_ids(asyncio.run(documents.ainvoke(QUESTION)))]
    with LlamaIndexRetriever(url=tenants_url, api_key=key) as nodes:
        seen += [doc_ids(nodes.retrieve(QUESTION)), doc_ids(asyncio.run(nodes.aretrieve(QUESTION)))]

    async def on_async_client() -> set[str]:
        async with AsyncClient(tenants_url, api_key=key) as client:
            return doc_ids(await LangChainRetriever(client=client).ainvoke(QUESTION))

    seen.append(asyncio.run(on_async_client()))
    assert seen == [{own}] * 5
    # another tenant's file is not there even when asked for by its doc id
    other = "two:rota.md" if key == "k1" else "one:budget.md"
    with LangChainRetriever(url=tenants_url, api_key=key, filters={"doc_ids": [other]}) as r:
        assert r.invoke(QUESTION) == []


# ---- how a retriever is built ---------------------------------------------------------------
def test_a_retriever_refuses_an_unclear_connection() -> None:
    client = Client(url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="not both"):
        LangChainRetriever(client=client, url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="not both"):
        LlamaIndexRetriever(data_dir="data", url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="Client or AsyncClient"):
        LlamaIndexRetriever("http://127.0.0.1:9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        LlamaIndexRetriever(client, k=0)
    with pytest.raises(ValueError):
        LangChainRetriever(client=client, k=51)
    client.close()


def test_a_blocking_call_on_an_async_client_is_refused_with_the_fix() -> None:
    retriever = LangChainRetriever(client=AsyncClient("http://127.0.0.1:9"))
    with pytest.raises(TypeError, match="awaited calls only"):
        retriever.invoke(QUESTION)
    with pytest.raises(TypeError, match="awaited calls only"):
        LlamaIndexRetriever(AsyncClient("http://127.0.0.1:9")).retrieve(QUESTION)


def test_the_remote_langchain_retriever_loads_no_model_or_store() -> None:
    heavy = ("torch", "docling", "bytewax", "tantivy", "qdrant_edge", "qdrant_client",
             "sentence_transformers", "transformers", "onnxruntime", "numpy")  # fmt: skip
    probe = (
        "import sys\n"
        "from ragstream.integrations.langchain import RagstreamRetriever\n"
        "RagstreamRetriever(url='http://127.0.0.1:9').close()\n"
        f"print('HEAVY', [m for m in {heavy!r} if m in sys.modules])"
    )
    repo = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []"
