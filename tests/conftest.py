"""Shared fixtures. Everything runs offline: no hub calls, ever."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import fcntl
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream.core.telemetry import install_exporter
from tests.harness.infinity_server import tiny_cross_encoder
from tests.harness.s3server import S3Server

# The watch/serve tests stop their child process with SIGINT (Ctrl-C). A shell without job
# control starts background commands (`cmd &`, nohup) with SIGINT *ignored*, children inherit
# that across exec, and Python then never turns SIGINT into KeyboardInterrupt: the child
# runs on and the test times out. A handled (not ignored) SIGINT is reset to the default on
# exec, so every child gets Python's usual Ctrl-C behaviour again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker and every process it starts sizes its pools by its
    share of the CPUs, so the workers do not oversubscribe the cores (unpinned, each sized
    its pools by the whole machine and the suite took as long as with one worker). With at
    least as many CPUs as workers, each worker is pinned to its own CPUs (the affinity mask,
    `core.cpus`). With more workers than CPUs (`make test` runs three on two cores, so one
    worker's waits on a subprocess, a server or a debounce are another's CPU time), no
    worker is pinned and each runs single-threaded (`RAGSTREAM_CPUS`, `OMP_NUM_THREADS`).
    Runs before collection, so before any test module imports torch or onnxruntime."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not worker or count < 2 or not cpus:
        return
    if len(cpus) >= count:
        os.sched_setaffinity(0, cpus[int(worker.removeprefix("gw")) % count :: count])
        return
    share = str(max(1, len(cpus) // count))
    for name in ("RAGSTREAM_CPUS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = share


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if not SHARED.exists():  # CI clones the repo elsewhere with shared/ beside it
    SHARED = Path(os.environ.get("RAGSTREAM_SHARED_DATA", "../shared/data")).resolve()
DOCS = SHARED / "docs"
SCIFACT = SHARED / "scifact"
SQUAD = SHARED / "squad2-half"


@pytest.fixture(scope="session")
def shared_docs() -> Path:
    assert DOCS.is_dir(), f"shared documents not found at {DOCS}"
    return DOCS


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on loopback, one per test process (tests/harness/s3server.py)."""
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, with boto3's environment pointing at it (endpoint, region, keys)."""
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    assert SCIFACT.is_dir(), f"SciFact not found at {SCIFACT}"
    return SCIFACT


@pytest.fixture(scope="session")
def squad_dir() -> Path:
    assert (SQUAD / "split.json").is_file(), f"the SQuAD 2.0 half set not found at {SQUAD}"
    return SQUAD


class StorePairing(NamedTuple):
    vector: str  # Settings.store.vector_backend
    lexical: str  # Settings.store.lexical_backend


@pytest.fixture(
    scope="module",
    params=[StorePairing("edge", "tantivy"), StorePairing("qdrant", "rank-bm25")],
    ids=["edge+tantivy", "qdrant-local+rank-bm25"],
)
def store_pairing(request: pytest.FixtureRequest) -> StorePairing:
    """Both store pairings (congruence): Qdrant Edge + tantivy, the embedded default, and
    qdrant-client local mode + rank-bm25, the server code path and the exact-BM25 reference.
    Module-scoped, so a module's expensive index is built once per pairing."""
    return request.param


@pytest.fixture(scope="session")
def spans() -> InMemorySpanExporter:
    """One in-memory span exporter for the session; tests clear it or filter by name."""
    exporter = InMemorySpanExporter()
    install_exporter(exporter)
    return exporter


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CrossEncoder built here (no trained cross-encoder weights exist offline)."""
    return tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"), positions=128)


# --- OpenAI-compatible stub (a test double at the generator boundary) ----------------------


@dataclass
class Stub:
    url: str
    replies: list[Any] = field(default_factory=list)  # str, or list[str] for SSE, or int status
    requests: list[dict[str, Any]] = field(default_factory=list)
    default: Any = None  # the reply once `replies` is used up (None: none scripted)
    delay_s: float = 0.0  # each completion waits this long (a slow endpoint)
    in_flight: int = 0
    most_in_flight: int = 0  # completions being written at once, at the most
    disconnects: int = 0  # clients that went away before their reply was written
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    state = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            with state.lock:
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            try:
                self._reply()
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.disconnects += 1
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _reply(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append({"path": self.path, "body": body})
                reply = state.replies.pop(0) if state.replies else state.default
            if state.delay_s:
                time.sleep(state.delay_s)
            if self.path != "/v1/chat/completions" or isinstance(reply, int):
                self.send_response(404 if isinstance(reply, str) else reply)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                return
            base = {"id": "c1", "created": 0, "model": body["model"]}
            self.send_response(200)
            if body.get("stream"):
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in reply:
                    choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                    chunk = {**base, "object": "chat.completion.chunk", "choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(state.delay_s / 10)  # the pieces arrive over time
                self.wfile.write(b"data: [DONE]\n\n")
                return
            message = {"role": "assistant", "content": reply}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            payload = json.dumps({**base, "object": "chat.completion", "choices": [choice]})
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


# --- the `llm` marker: tests that need a real LLM endpoint (`make test-llm`) -----------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `llm` run only when `-m` names that marker (`make test-llm` passes
    `-m llm`); otherwise (`make test`, `make test-fast`) they are deselected, and reported so."""
    if "llm" in (config.getoption("markexpr") or ""):
        return
    llm = [item for item in items if item.get_closest_marker("llm") is not None]
    if llm:
        config.hook.pytest_deselected(items=llm)
        items[:] = [item for item in items if item.get_closest_marker("llm") is None]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built once per run the way `make docs` builds it:
    `mkdocs build --strict` (a broken link or anchor, a page missing from the nav, a
    docstring that does not render: the build fails), into a temporary folder, not `site/`.
    Under pytest-xdist the workers share it: the first to ask builds it under a file lock in
    the run's own temporary folder, the others read it (no test writes to it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    with open(root / "site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        site = root / "site"
        if not (site / ".built").is_file():
            shutil.rmtree(site, ignore_errors=True)  # a build that failed midway
            _build_site(site)
            (site / ".built").touch()
    return site


def _build_site(site: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("RAGSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
