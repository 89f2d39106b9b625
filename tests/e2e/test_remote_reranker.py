"""Models served by infinity, a real third-party server on loopback: its `/rerank` as the
query path's reranker (`rerank:<model>`); its `/embeddings` serving the very MiniLM-L6
weights the `minilm-l6` preset ships, which must give the preset's vectors; and a blue/green
reindex between two served models of different dimensions on the same endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.client import Client
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import load_embedder, open_embedder
from ragstream.operators.remote_embed import PROBE_TEXTS
from tests.harness.embedding_server import free_port
from tests.harness.helpers import copy_docs
from tests.harness.infinity_server import InfinityServer, projected_minilm, tiny_cross_encoder

pytestmark = pytest.mark.slow

FILES = [  # small files: the blue/green test embeds every chunk twice over HTTP
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_plugins.md",
    "md/docling_concepts_architecture.md",
]
QUESTION = "Which chunkers does Docling offer?"


@pytest.fixture(scope="module")
def infinity(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfinityServer]:
    cross_encoder = tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))
    projected = projected_minilm(tmp_path_factory.mktemp("minilm-128") / "model")
    server = InfinityServer(cross_encoder, projected).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> Settings:
    root = tmp_path_factory.mktemp("reranked")
    folder = copy_docs(shared_docs, FILES, root / "docs")
    settings = Settings(data_dir=root / "data", embedder="static", query={"log_queries": False})
    api.sync([folder], settings=settings)
    return settings


def with_reranker(settings: Settings, url: str, timeout_s: float = 30.0) -> Settings:
    query = settings.query.model_copy(update={"reranker": "rerank:tiny-ce"})
    endpoint = settings.rerank_endpoint.model_copy(update={"base_url": url, "timeout_s": timeout_s})
    return settings.model_copy(update={"query": query, "rerank_endpoint": endpoint})


def test_served_scores_order_the_candidates(indexed: Settings, infinity: InfinityServer) -> None:
    settings = with_reranker(indexed, infinity.url)
    with Client(settings=settings) as client:
        answer = client.query(QUESTION, k=5)
    assert answer.reranker.startswith("rerank:tiny-ce") and "failed" not in answer.reranker
    got = [c.rerank_score for c in answer.candidates]
    assert all(s is not None for s in got) and got == sorted(got, reverse=True)  # type: ignore[type-var]
    with open_runtime(settings) as rt:  # the server's own scores for the same texts
        chunks = {
            c.point_id: c
            for d in rt.vectors.live_doc_fingerprints()
            for c in rt.vectors.live_chunks(d)
        }
    texts = [
        embedding_text(chunks[c.point_id].context, chunks[c.point_id].text)
        for c in answer.candidates
    ]
    body = {"model": "tiny-ce", "query": QUESTION, "documents": texts}
    served = httpx.post(f"{infinity.url}/rerank", json=body, timeout=60).json()["results"]
    by_index = {r["index"]: r["relevance_score"] for r in served}
    assert got == pytest.approx([by_index[i] for i in range(len(texts))], abs=1e-5)


def test_a_reranker_that_is_down_leaves_the_fused_order_and_says_so(
    indexed: Settings, spans: InMemorySpanExporter
) -> None:
    with Client(settings=indexed) as client:
        fused = client.query(QUESTION, k=5)
    down = with_reranker(indexed, f"http://127.0.0.1:{free_port()}", timeout_s=2.0)
    spans.clear()
    with Client(settings=down) as client:
        answer = client.query(QUESTION, k=5)
    assert "failed, fused order kept" in answer.reranker
    assert [c.point_id for c in answer.candidates] == [c.point_id for c in fused.candidates]
    assert all(c.rerank_score is None for c in answer.candidates)
    assert answer.text == fused.text  # answered all the same
    failed = [s for s in spans.get_finished_spans() if s.name == "ragstream.query.rerank"]
    assert failed and "ConnectError" in str((failed[-1].attributes or {}).get("failed"))


def test_the_served_preset_weights_give_the_presets_vectors(
    tmp_path: Path, infinity: InfinityServer, shared_docs: Path
) -> None:
    texts = [*PROBE_TEXTS, *(shared_docs / FILES[0]).read_text().split("\n\n")[:40]]
    texts = [t for t in texts if t.strip()]
    settings = Settings(
        data_dir=tmp_path, embedder="openai:minilm", embedding_endpoint={"base_url": infinity.url}
    )
    served = open_embedder("openai:minilm", settings).encode_passages(texts)
    local = load_embedder("minilm-l6").encode_passages(texts)
    cosines = (np.asarray(served) * np.asarray(local)).sum(axis=1)
    assert cosines.min() >= 0.999, cosines


def test_a_blue_green_reindex_between_two_served_models_of_other_dimensions(
    tmp_path: Path, infinity: InfinityServer, shared_docs: Path
) -> None:
    folder = copy_docs(shared_docs, FILES, tmp_path / "docs")
    endpoint = {"base_url": infinity.url}
    settings = Settings(
        data_dir=tmp_path / "data", embedder="openai:minilm", embedding_endpoint=endpoint
    )
    api.sync([folder], settings=settings)
    with Client(settings=settings) as client:
        assert client.reindex_start("openai:minilm-128", wait=True).lag == 0
        during = client.status().embedder
        assert during is not None and (during.name, during.dimension) == ("openai:minilm", 384)
        assert client.query(QUESTION).citations  # the live side still answers
        client.reindex_promote()
        after = client.status().embedder
        assert after is not None and (after.name, after.dimension) == ("openai:minilm-128", 128)
        assert client.query(QUESTION).citations
        client.reindex_rollback()
        back = client.status().embedder
        assert back is not None and back.dimension == 384
