"""Store outages on the server code path: retried with backoff, nothing acknowledged is lost.

Faults are injected at the client boundary: a real qdrant-client (local mode) sits behind a
proxy that, for a scripted window, raises exactly what qdrant-client raises when a server is
down, times out or answers 5xx (`test_real_client_errors_*` checks those classes against the
real client on loopback). The real sync flow (docling, MiniLM, qdrant-client, tantivy) runs
over real documents while the store fails; afterwards the index must equal a clean index of
the same folder built without faults: the same live points, in both stores, nothing stale.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ragstream import api
from ragstream.connectors import qdrant_server
from ragstream.connectors.qdrant_server import StoreUnavailableError, is_transient
from ragstream.connectors.stores import open_vector_store
from ragstream.connectors.vector_stores import RetryPolicy
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from tests.harness.helpers import copy_docs
from tests.unit.connectors.test_vector_stores import EMB, make_corpus

FILES = [
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_architecture.md",
    "md/docling_concepts_plugins.md",
    "md/docling_faq_index.md",
    "html/python311_tutorial_appetite.html",
]


def fault(kind: str) -> Exception:
    """What qdrant-client raises for each kind of failure (REST transport)."""
    if kind == "refused":
        return ResponseHandlingException(httpx.ConnectError("[Errno 111] Connection refused"))
    if kind == "timeout":
        return ResponseHandlingException(httpx.ReadTimeout("timed out"))
    status = int(kind)
    return UnexpectedResponse(status, "scripted", b'{"status": "scripted"}', httpx.Headers())


@dataclass
class Outage:
    """Starts at the first call to `start_on` (any call if None); lasts `calls` failed calls
    or `seconds`; None for both = until lifted."""

    kind: str
    start_on: str | None = None
    calls: int | None = None
    seconds: float | None = None
    started: float | None = None
    failed: int = 0

    def hits(self, method: str) -> bool:
        if self.started is None:
            if self.start_on not in (None, method):
                return False
            self.started = time.monotonic()
        if self.calls is not None:
            return self.failed < self.calls
        if self.seconds is not None:
            return time.monotonic() - self.started < self.seconds
        return True


@dataclass
class Faults:
    """Every qdrant-client the store opens, wrapped; one scripted outage shared by all."""

    outage: Outage | None = None
    calls: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, method: str) -> None:
        with self.lock:
            self.calls[method] += 1
            if self.outage is not None and self.outage.hits(method):
                self.outage.failed += 1
                self.failures[method] += 1
                raise fault(self.outage.kind)


class FaultyClient:
    """A real QdrantClient whose every method call first passes `Faults.check`."""

    def __init__(self, real: QdrantClient, faults: Faults) -> None:
        self._real, self._faults = real, faults

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if name == "close" or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._faults.check(name)  # at call time: a retry of the same bound method re-checks
            return attr(*args, **kwargs)

        return call


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    state = Faults()

    def factory(**kwargs: Any) -> FaultyClient:
        return FaultyClient(QdrantClient(**kwargs), state)

    monkeypatch.setattr(qdrant_server, "QdrantClient", factory)
    return state


def make_folder(root: Path, shared_docs: Path) -> Path:
    return copy_docs(shared_docs, FILES, root)


def settings_for(data_dir: Path, **store: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        store={"vector_backend": "qdrant", **store},
        sync={"debounce_ms": 100},
    )


def index_state(settings: Settings, folder: Path) -> dict[str, Any]:
    """Live point ids per doc in the vector store, and what the lexical index holds of them."""
    with open_runtime(settings.with_paths([folder])) as rt:
        docs = {d: sorted(c.point_id for c in rt.vectors.live_chunks(d))
                for d in rt.vectors.live_doc_fingerprints()}  # fmt: skip
        ids = [i for pts in docs.values() for i in pts]
        lexical_live = sorted(c.point_id for c in rt.lexical.get(ids) if c.status == "live")
        return {
            "docs": docs,
            "vectors_live": rt.vectors.count("live"),
            "lexical_live": rt.lexical.count("live"),
            "lexical_of_vectors": lexical_live,
        }


def assert_index_equals_folder(
    settings: Settings, folder: Path, reference_dir: Path, faults: Faults
) -> None:
    """Same live points as a clean index of the folder (no fault), in both stores."""
    outage, faults.outage = faults.outage, None
    try:
        got = index_state(settings, folder)
        clean = settings_for(reference_dir)
        shutil.rmtree(reference_dir, ignore_errors=True)
        api.sync([folder], settings=clean)
        want = index_state(clean, folder)
    finally:
        faults.outage = outage
    live_files = {
        f"{folder.name}:{p.relative_to(folder)}" for p in folder.rglob("*") if p.is_file()
    }
    assert set(got["docs"]) == live_files  # every live file, no deleted one
    assert got["docs"] == want["docs"]  # no stale chunk, none missing
    all_ids = [i for pts in got["docs"].values() for i in pts]
    assert len(all_ids) == len(set(all_ids)) == got["vectors_live"]  # no duplicate / stray point
    assert got["lexical_live"] == got["vectors_live"] == want["vectors_live"]
    assert got["lexical_of_vectors"] == sorted(all_ids)


def retry_events(spans: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for s in spans.get_finished_spans() for e in s.events
            if e.name == "store.retry"]  # fmt: skip


@pytest.mark.slow
def test_sync_rides_out_outages_and_converges(
    tmp_path: Path, shared_docs: Path, faults: Faults, spans: InMemorySpanExporter
) -> None:
    folder = make_folder(tmp_path / "docs", shared_docs)
    settings = settings_for(tmp_path / "data")
    reference = tmp_path / "reference"

    # 1. first index: the server refuses connections for the first 3 writes
    spans.clear()
    faults.outage = Outage("refused", start_on="upsert", calls=3)
    report = api.sync([folder], settings=settings)
    assert faults.failures["upsert"] == 3 and report.dead_letters == []
    assert report.docs_changed == len(FILES)
    events = retry_events(spans)
    assert len(events) == 3 and {e["operation"] for e in events} == {"upsert"}
    assert all("Connection refused" in str(e["error"]) for e in events)
    assert_index_equals_folder(settings, folder, reference, faults)

    # 2. edit, delete, add while every call times out for 1 s from the first tombstone on
    faults.failures.clear()
    doc = folder / FILES[0]
    doc.write_text(doc.read_text().replace("\n\n", "\n\nEdited under a store outage. ", 1))
    (folder / FILES[1]).unlink()
    (folder / "md/new_note.md").write_text("# New note\n\nWritten while the store timed out.\n")
    faults.outage = Outage("timeout", start_on="set_payload", seconds=1.0)
    report = api.sync([folder], settings=settings)
    assert sum(faults.failures.values()) >= 2
    assert report.docs_deleted == 1 and report.chunks_tombstoned > 0
    assert_index_equals_folder(settings, folder, reference, faults)

    # 3. the server answers 503 from the first call of the pass (the catch-up scan) for 0.5 s
    faults.failures.clear()
    (folder / FILES[2]).unlink()
    shutil.move(folder / FILES[3], folder / "md/renamed.md")
    faults.outage = Outage("503", seconds=0.5)
    report = api.sync([folder], settings=settings)
    assert sum(faults.failures.values()) >= 1 and report.docs_deleted == 2
    assert_index_equals_folder(settings, folder, reference, faults)


@pytest.mark.slow
def test_permanent_outage_is_a_clear_error_and_nothing_is_lost(
    tmp_path: Path, shared_docs: Path, faults: Faults, monkeypatch: pytest.MonkeyPatch
) -> None:
    # backoff 10x shorter: the same number of attempts, less waiting in CI
    monkeypatch.setattr(qdrant_server, "FIRST_WAIT_S", 0.01)
    folder = make_folder(tmp_path / "docs", shared_docs)
    settings = settings_for(tmp_path / "data", retry_attempts=3, retry_max_wait_s=1.0)
    api.sync([folder], settings=settings)
    doc = folder / FILES[0]
    doc.write_text(doc.read_text() + "\n\nA paragraph written while the store was down.\n")
    (folder / FILES[1]).unlink()
    faults.outage = Outage("refused", start_on="upsert")  # down until lifted
    with pytest.raises(Exception) as raised:
        api.sync([folder], settings=settings)
    chain: list[BaseException] = []
    exc: BaseException | None = raised.value
    while exc is not None and len(chain) < 20:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    text = " | ".join(f"{type(e).__name__}: {e}" for e in chain)
    assert any(isinstance(e, StoreUnavailableError) for e in chain) or (
        "StoreUnavailableError" in text  # bytewax may re-raise it as text
    ), text
    assert "unavailable" in text and "Connection refused" in text
    assert faults.failures["upsert"] >= 3
    faults.outage = None  # the store is back: the next pass converges
    report = api.sync([folder], settings=settings)
    assert report.docs_changed >= 1 and report.docs_deleted == 1
    assert_index_equals_folder(settings, folder, tmp_path / "reference", faults)


# --- the retry policy at the store, without the flow ---------------------------------------


@pytest.fixture
def store_with(tmp_path: Path) -> Iterator[Callable[[RetryPolicy], Any]]:
    opened: list[Any] = []

    def open_(policy: RetryPolicy) -> Any:
        store = open_vector_store("qdrant", tmp_path, "t", EMB, retry=policy)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.mark.parametrize("kind", ["refused", "timeout", "503", "502", "429"])
def test_transient_errors_are_retried_until_the_store_answers(
    kind: str, faults: Faults, store_with: Callable[[RetryPolicy], Any]
) -> None:
    store = store_with(RetryPolicy(attempts=4, max_wait_s=5.0))
    chunks, vectors = make_corpus()
    faults.outage = Outage(kind, start_on="upsert", calls=3)
    store.upsert(chunks, vectors)
    assert faults.calls["upsert"] == 4 and faults.failures["upsert"] == 3
    assert store.count("live") == len(chunks)


@pytest.mark.parametrize("status", ["400", "404", "409", "422"])
def test_a_4xx_is_not_retried(
    status: str, faults: Faults, store_with: Callable[[RetryPolicy], Any]
) -> None:
    store = store_with(RetryPolicy(attempts=5, max_wait_s=5.0))
    chunks, vectors = make_corpus()
    faults.outage = Outage(status, start_on="upsert", calls=1)
    with pytest.raises(UnexpectedResponse) as raised:
        store.upsert(chunks, vectors)
    assert raised.value.status_code == int(status)
    assert faults.calls["upsert"] == 1


def test_retries_stop_at_the_attempt_budget(
    faults: Faults, store_with: Callable[[RetryPolicy], Any]
) -> None:
    store = store_with(RetryPolicy(attempts=3, max_wait_s=30.0))
    faults.outage = Outage("refused", start_on="count")
    with pytest.raises(StoreUnavailableError, match="count failed 3 times") as raised:
        store.count("live")
    assert isinstance(raised.value.__cause__, ResponseHandlingException)
    assert faults.calls["count"] == 3


def test_retries_stop_at_the_wait_budget(
    faults: Faults, store_with: Callable[[RetryPolicy], Any]
) -> None:
    store = store_with(RetryPolicy(attempts=100, max_wait_s=0.5))
    faults.outage = Outage("timeout", start_on="scroll")
    with pytest.raises(StoreUnavailableError, match="scroll failed"):
        store.live_chunks("src:a/x.md")
    # waits of ~0.1, 0.2 (+ jitter) fit in 0.5 s; the next (~0.4) would not
    assert 2 <= faults.calls["scroll"] <= 4


def test_policy_comes_from_settings() -> None:
    s = Settings(store={"retry_attempts": 2, "retry_max_wait_s": 0.25})
    assert RetryPolicy.from_settings(s) == RetryPolicy(2, 0.25)
    assert RetryPolicy.default() == RetryPolicy.from_settings(Settings.model_construct())


# --- what the real client raises, against real sockets on loopback --------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_real_client_errors_connection_refused_is_transient(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(StoreUnavailableError, match="failed 2 times") as raised:
        open_vector_store("qdrant", tmp_path, "t", EMB, url=url, retry=RetryPolicy(2, 1.0))
    cause = raised.value.__cause__
    assert isinstance(cause, ResponseHandlingException) and is_transient(cause)
    assert isinstance(cause.source, httpx.ConnectError)


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
@pytest.mark.parametrize(("status", "retried"), [(503, True), (429, True), (400, False)])
def test_real_client_errors_http_status(tmp_path: Path, status: int, retried: bool) -> None:
    """A loopback HTTP server answering every collection request with `status`."""
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/collections"):
                requests.append(self.path)
            body = b'{"status": {"error": "scripted"}}'
            self.send_response(status if self.path.startswith("/collections") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        expected = StoreUnavailableError if retried else UnexpectedResponse
        with pytest.raises(expected):
            open_vector_store("qdrant", tmp_path, "t", EMB, url=url, retry=RetryPolicy(3, 2.0))
        assert len(requests) == (3 if retried else 1)
    finally:
        server.shutdown()
        server.server_close()
