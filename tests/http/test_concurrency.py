"""Serving many users at once, on a real uvicorn server over real documents: concurrent
answers equal the serial ones; completions of an OpenAI-compatible endpoint (the stub, a
test double at that boundary) are awaited side by side; past the in-flight limit the server
answers 429 and the client's retries get through; a request past its time is 504; a client
that leaves a stream cancels its completion; a shutdown lets the request in flight finish.
Timings are the benchmark's business (bench/load.py): these tests assert what happened."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.core.errors import ServerTimeoutError
from ragstream.core.settings import GeneratorSettings, ServerSettings, Settings
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex, open_engine
from tests.conftest import Stub
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # real models, a real index, a real server

DOCS = ("md/docling_concepts_chunking.md", "html/python311_tutorial_appetite.html")
QUESTIONS = (
    "What does the hybrid chunker do?",
    "Why is Python good for scripting?",
    "What is a chunker in Docling?",
    "Which tasks does Python automate?",
)
ANSWER = "Python is an easy to learn, powerful programming language [S1]."


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> Iterator[QueryEngine]:
    base = tmp_path_factory.mktemp("concurrency")
    root = copy_docs(shared_docs, DOCS, base / "docs", flat=True)
    settings = Settings(data_dir=base / "data")
    assert api.sync([root], settings=settings).chunks_live > 0
    with open_engine(settings) as (eng, _):
        yield eng


@contextmanager
def served(engine: QueryEngine, stub: Stub | None = None, **server: object) -> Iterator[str]:
    """The API over `engine`'s stores and models, with an endpoint generator when `stub`."""
    generator = GeneratorSettings(base_url=stub.url, model="stub") if stub else GeneratorSettings()
    settings = engine.settings.model_copy(
        update={"generator": generator, "server": ServerSettings(**server)}  # type: ignore[arg-type]
    )
    answering = QueryEngine(settings, engine.retriever, engine.models)
    with serving(Serving(settings, ServedIndex(answering)), "127.0.0.1", 0) as url:
        yield url


def ask(url: str, question: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/query", json={"query": question, **body}, timeout=60)


def test_eight_concurrent_answers_equal_the_serial_ones(engine: QueryEngine) -> None:
    with served(engine, max_inflight=8) as url:  # the default is one per core
        serial = [ask(url, q).json() for q in QUESTIONS * 2]
        with ThreadPoolExecutor(8) as pool:
            together = [r.json() for r in pool.map(lambda q: ask(url, q), QUESTIONS * 2)]
    keep = ("text", "refusal", "citations", "claims", "grounding")
    assert [{k: a[k] for k in keep} for a in together] == [{k: a[k] for k in keep} for a in serial]
    assert any(a["refusal"] is None for a in serial)


def test_completions_are_awaited_side_by_side(engine: QueryEngine, stub: Stub) -> None:
    stub.default, stub.delay_s = ANSWER, 0.5
    with served(engine, stub) as url, ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda q: ask(url, q), QUESTIONS))
    assert [r.status_code for r in replies] == [200] * 4
    assert stub.most_in_flight == 4  # four requests waited on the endpoint at once


def test_past_the_limit_429_then_the_clients_retries_get_through(
    engine: QueryEngine, stub: Stub
) -> None:
    stub.default, stub.delay_s = ANSWER, 0.4
    with served(engine, stub, max_inflight=1, max_queue=0) as url:
        with ThreadPoolExecutor(3) as pool:
            raw = list(pool.map(lambda q: ask(url, q), QUESTIONS[:3]))
        refused = [r for r in raw if r.status_code == 429]
        assert refused and all(r.headers["retry-after"] == "1" for r in refused)
        assert {r.json()["code"] for r in refused} == {"overloaded"}

        def through_client(question: str) -> str:
            with Client(url=url) as client:  # retries a 429 after its Retry-After
                return client.query(question).query  # an Answer, not an OverloadedError

        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(through_client, QUESTIONS[:2])) == list(QUESTIONS[:2])


def test_a_request_past_its_time_is_504_and_a_typed_error(engine: QueryEngine, stub: Stub) -> None:
    stub.default, stub.delay_s = ANSWER, 3.0
    with served(engine, stub, request_timeout_s=0.5) as url:
        late = ask(url, QUESTIONS[0])
        assert late.status_code == 504 and late.json()["code"] == "timeout"
        with Client(url=url) as client, pytest.raises(ServerTimeoutError):
            client.query(QUESTIONS[1])


def test_a_client_that_leaves_a_stream_cancels_its_completion(
    engine: QueryEngine, stub: Stub
) -> None:
    stub.default, stub.delay_s = [f"word{i} " for i in range(40)], 2.0  # pieces 0.2 s apart
    with served(engine, stub) as url:
        body = {"query": QUESTIONS[1], "stream": True}
        with httpx.stream("POST", f"{url}/v1/query", json=body, timeout=30) as reply:
            for line in reply.iter_lines():
                if line.startswith("event: text"):
                    break  # the first piece came: leave
        deadline = time.monotonic() + 15
        while stub.in_flight and time.monotonic() < deadline:
            time.sleep(0.1)
    assert stub.disconnects == 1  # the endpoint saw its request closed mid-answer


def test_a_shutdown_lets_the_request_in_flight_finish(engine: QueryEngine, stub: Stub) -> None:
    stub.default, stub.delay_s = ANSWER, 1.0
    result: dict[str, httpx.Response] = {}
    with served(engine, stub, shutdown_grace_s=10) as url:
        asking = threading.Thread(target=lambda: result.setdefault("r", ask(url, QUESTIONS[1])))
        asking.start()
        while not stub.in_flight:
            time.sleep(0.01)
    # the server has stopped: the answer it had started went out first
    asking.join(30)
    assert result["r"].status_code == 200 and result["r"].json()["text"]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/v1/health", timeout=2)
