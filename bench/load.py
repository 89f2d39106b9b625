"""Load test of the HTTP service: N concurrent clients against a real server on loopback.

The bench syncs a folder of real documents (default: the repo's samples/) into a data dir
under `--out` (one per folder, incremental: a data dir built before is reused), starts a slow
OpenAI-compatible stub in this process (a threaded HTTP server on 127.0.0.1 that waits
`--llm-delay` seconds, then answers with a sentence of the first source in the prompt,
cited, non-streaming or as Server-Sent Events), then starts the server as a subprocess on
127.0.0.1 with its generator pointed at the stub:

- `--mode serve`: `ragstream serve --data-dir D --port 0` (its URL from its stdout);
- `--mode watch`: `ragstream watch DOCS --data-dir D --serve --port 0` (its URL from
  `D/state/endpoint.json`).

`--no-llm` leaves the stub out: the server answers with the offline extractive generator, so
every request is CPU-bound. Once `GET /v1/ready` answers 200 and `--warmup` queries (one
pass over the questions, one at a time: models loaded, caches warm for every row alike) are
answered, `--concurrency` client threads, each with its own HTTP connection, `POST /v1/query`
with questions the documents answer, until `--requests` queries in all have been answered or
`--duration` seconds have passed (whichever is given first; default: twice the concurrency
in requests). A 429 is recorded with its `Retry-After` and not retried.

It reports, per concurrency: the wall time from the first request to the last response, the
throughput (2xx answers per second of wall time), p50/p95/p99 latency of the 2xx answers
(nearest rank), refusals among them, errors by status code (non-2xx other than 429, plus
`timeout` and `connection` for transport failures), the 429 rejections, the stub's LLM calls,
the server's resident memory (VmRSS) before and after the run and its peak (VmHWM), and the
machine's 1-minute load average at the end (other work on the machine skews every figure).
`--compare 1,8` runs the same request count at each concurrency against one server, side by
side in one run, with each row's ratio to the first. The server and the stub are stopped
whatever happens.

Two measurements run the clients twice against one server, a baseline row first, and report
`p95_ratio` (the second row's p95 over the baseline's) beside its target:

- `--bulk-add N` (`--mode watch` only): the clients on the idle server, then again while N
  new small markdown files (a few paragraphs of seeded words each, every one distinct) are
  written, at the start of that row, into a fresh subfolder of the watched folder. It also
  reports how many of the N the index had taken in (`GET /v1/status` `docs`, polled) by the
  end of the row. The subfolder is deleted once the server is stopped; these runs use a data
  dir of their own (`...-bulk`) over a fresh copy of the docs folder under `--out` (the
  source folder is never written), synced with `--allow-mass-delete`, so the next run drops
  the last run's files. Target: p95 during a bulk add of 2,000 files <= 3x the idle p95.
- `--verify-beside` (either mode): the clients alone, then again while one more thread calls
  `GET /v1/verify` in a loop for the row's duration; it reports the verifies completed.
  Target: a verify beside 4 querying clients raises their p95 by at most 2x.
- `--abuse` (either mode; the issue's bad input): the clients alone (`baseline`), then again
  while, beside them, `--idle-conns` raw connections (default 200) are opened and send
  nothing, `--trickle` slow clients (default 4) each send the headers of a `POST /v1/query`
  with the Content-Length of a small JSON body and then trickle the body a byte at a time
  over `--trickle-s` seconds (default 30, at most the row's `--duration`), and a flood of
  `--flood` queries (default 1000) is fired at an even pace within one second (asyncio, raw
  HTTP/1.1 on keep-alive connections, so the bench's side is cheap). It reports the normal
  clients of both rows ("everyone else": p50/p95/p99, errors, 429s) and `p95_ratio`; the
  flood's statuses (200/429/503/504/connection/timeout), how long firing it took and its
  answers' latency; what each slow client got (a status, or how the connection ended) and
  after how long; how many idle connections the server closed and when (all of them are
  watched, with 0.2 s read timeouts, until the row's other work is done). The server's
  limits are its own (`RAGSTREAM_SERVER__MAX_INFLIGHT`, `__MAX_QUEUE`,
  `__REQUEST_TIMEOUT_S` in the environment reach it; the document echoes them as
  `server_env`). The flood and the slow clients are waited for, each bounded by `--timeout`,
  and every socket is closed when the row ends. No numeric target: the issue asks that the
  abuse gets timeouts and 429s while everyone else keeps being answered.

With `--json`, stdout holds exactly one JSON document (everything else goes to stderr): the
keys `concurrency`, `requests`, `wall_s`, `qps`, `p50_s`, `p95_s`, `p99_s`, `errors`,
`rejected_429`, `rss_start_mb`, `rss_end_mb`, `mode`, `llm_delay_s` (and a few more); with
`--compare`, `{"runs": [one such document per concurrency], "ratios": [...]}`; with
`--bulk-add`, `--verify-beside` or `--abuse`, `{"measurement", "runs": [baseline, during]
(each with its `row`), "ratios", "p95_ratio", "target_p95_ratio"}` and `bulk_add` (`docs`,
`written`, `indexed`, ...), `verify` (`completed`, `errors`, `p50_s`, ...) or `abuse`
(`flood`, `trickle`, `idle`) with `normal_clients` (both rows) and `server_env`.

    .venv/bin/python bench/load.py [--concurrency 8] [--requests N | --duration S]
        [--llm-delay 1.0] [--no-llm] [--mode serve|watch] [--stream] [--docs DIR]
        [--out bench/out/load] [--warmup 8] [--compare 1,8] [--json]
        [--bulk-add N (with --mode watch) | --verify-beside | --abuse [--trickle 4]
         [--trickle-s 30] [--idle-conns 200] [--flood 1000]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import math
import os
import random
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._stdout import print_json, stdout_to_stderr  # noqa: E402

CLI = [sys.executable, "-m", "ragstream.cli"]
# questions the samples/ documents answer (one or two per document)
QUESTIONS = (
    "What is the default value of the constant k in reciprocal rank fusion?",
    "How many candidates does each retrieval leg return by default?",
    "How is the point id of a chunk derived?",
    "What does reindex promote check before it swaps the alias?",
    "How long is the retention window before tombstones are garbage collected?",
    "What happens when one pass would tombstone most of a source's documents?",
    "Where does the chunker cut a document into chunks?",
    "How does the parser rebuild paragraphs from the lines of a PDF?",
)
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

# Started in the background by a shell without job control, this process (and every child)
# would inherit SIGINT ignored, and the server would never see the Ctrl-C that stops it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the slow OpenAI-compatible stub -------------------------------------------------------

_SOURCE = re.compile(r"<<<SOURCE (S\d+)[^\n]*>>>\n(.*?)\n<<<END SOURCE \1>>>", re.S)


def stub_reply(messages: Sequence[dict[str, Any]]) -> str:
    """A short answer citing the first source in the prompt: its first sentence of prose."""
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    found = _SOURCE.search(prompt)
    if found is None:
        return "NOT_ANSWERABLE: the prompt holds no source."
    cid, text = found.groups()
    prose = " ".join(line for line in text.splitlines() if line.strip()[:1] not in "#|-*")
    sentence = re.split(r"(?<=[.!?])\s+", prose.strip(), maxsplit=1)[0][:300].rstrip(".")
    return f"{sentence} [{cid}]." if sentence else f"The answer is in the sources [{cid}]."


class StubLLM:
    """`/v1/chat/completions` (JSON or SSE) and `/v1/models` on 127.0.0.1, each request
    answered after `delay` seconds on its own thread."""

    def __init__(self, delay: float) -> None:
        self.delay, self.calls, self.lock = delay, 0, threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    return self._send(404, {"error": {"message": "not found"}})
                model = {"id": "stub", "object": "model", "created": 0, "owned_by": "bench"}
                self._send(200, {"object": "list", "data": [model]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                with stub.lock:
                    stub.calls += 1
                time.sleep(stub.delay)
                text = stub_reply(body.get("messages", []))
                base = {"id": "bench", "created": 0, "model": body.get("model", "stub")}
                if body.get("stream"):
                    return self._stream(base, text)
                message = {"role": "assistant", "content": text}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._send(200, {**base, "object": "chat.completion", "choices": [choice]})

            def _stream(self, base: dict[str, Any], text: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in re.findall(r"\S+\s*", text):
                    choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                    chunk = {**base, "object": "chat.completion.chunk", "choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


# --- the server under test ------------------------------------------------------------------


def child_env(stub_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and k != "RAGSTREAM_URL"}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("RAGSTREAM_GENERATOR__BASE_URL", None)
    if stub_url is not None:
        env |= {"RAGSTREAM_GENERATOR__BASE_URL": stub_url, "RAGSTREAM_GENERATOR__MODEL": "stub"}
    return env


def sync(docs: Path, data_dir: Path, env: dict[str, str], allow_mass_delete: bool = False) -> None:
    """`ragstream sync DOCS` into the data dir (incremental: only changes are indexed)."""
    started = time.perf_counter()
    cmd = [*CLI, "sync", str(docs), "--data-dir", str(data_dir), "--json"]
    cmd += ["--allow-mass-delete"] if allow_mass_delete else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"sync exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    note(f"synced {docs} into {data_dir} in {time.perf_counter() - started:.1f} s")


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, in MiB (empty once it is gone)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


@dataclass
class Server:
    """`ragstream serve` or `ragstream watch --serve` as a subprocess, its log in a file."""

    mode: str
    docs: Path
    data_dir: Path
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    url: str = ""

    def start(self, timeout: float = 300.0) -> str:
        where = ["--data-dir", str(self.data_dir), "--port", "0"]
        cmd = [*CLI, "serve", *where]
        if self.mode == "watch":
            cmd = [*CLI, "watch", str(self.docs), *where, "--serve"]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env
            )
        deadline = time.monotonic() + timeout
        self.url = self._serve_url() if self.mode == "serve" else self._watch_url(deadline)
        threading.Thread(target=self._drain, daemon=True).start()
        while not self._ready():
            self._alive(deadline, "ready")
            time.sleep(0.2)
        return self.url

    def _serve_url(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()  # {"url": ...} once listening
        if not line:
            self._alive(0.0, "listening")
        return str(json.loads(line)["url"])

    def _watch_url(self, deadline: float) -> str:
        assert self.proc is not None
        endpoint = self.data_dir / "state" / "endpoint.json"
        while True:
            with contextlib.suppress(OSError, ValueError):
                recorded = json.loads(endpoint.read_text())
                if recorded.get("pid") == self.proc.pid:
                    return str(recorded["url"])
            self._alive(deadline, "listening")
            time.sleep(0.2)

    def _drain(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            for _ in self.proc.stdout:
                pass

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v1/ready", timeout=5, trust_env=False).status_code == 200
        except httpx.TransportError:
            return False

    def _alive(self, deadline: float, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None or time.monotonic() > deadline:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{self.mode} never {what} (exit {self.proc.poll()}):\n{tail}")

    def memory(self) -> dict[str, float]:
        return memory_mb(self.proc.pid) if self.proc is not None else {}

    def stop(self) -> None:
        """Ctrl-C (a clean shutdown), then SIGTERM, then SIGKILL, a few seconds apart."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        steps = {"SIGINT": lambda: proc.send_signal(signal.SIGINT), "SIGTERM": proc.terminate}
        for name, stop in {**steps, "SIGKILL": proc.kill}.items():
            stop()
            try:
                note(f"{self.mode} stopped by {name} (exit {proc.wait(timeout=10)})")
                return
            except subprocess.TimeoutExpired:
                continue


# --- the clients ----------------------------------------------------------------------------


@dataclass
class Sample:
    latency_s: float
    status: int | str  # HTTP status, or "timeout" / "connection" / an exception name
    refused: bool = False
    first_byte_s: float | None = None
    retry_after: str | None = None


@dataclass
class Plan:
    url: str
    concurrency: int
    requests: int | None
    duration_s: float | None
    timeout_s: float
    stream: bool
    tickets: Iterator[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float = 0.0

    def next_ticket(self) -> int | None:
        """The next request's number, or None once the run is over."""
        if self.duration_s is not None and time.perf_counter() - self.started >= self.duration_s:
            return None
        with self.lock:
            ticket = next(self.tickets)
        return ticket if self.requests is None or ticket < self.requests else None


def ask(client: httpx.Client, plan: Plan, question: str) -> Sample:
    body = {"query": question, "stream": plan.stream}
    started = time.perf_counter()
    try:
        with client.stream("POST", f"{plan.url}/v1/query", json=body) as response:
            first: float | None = None
            chunks = []
            for chunk in response.iter_bytes():
                first = time.perf_counter() - started if first is None else first
                chunks.append(chunk)
    except httpx.TimeoutException:
        return Sample(time.perf_counter() - started, "timeout")
    except httpx.TransportError:
        return Sample(time.perf_counter() - started, "connection")
    latency, text = time.perf_counter() - started, b"".join(chunks).decode(errors="replace")
    status: int | str = response.status_code
    if status == 429:
        return Sample(latency, 429, retry_after=response.headers.get("retry-after"))
    if status != 200:
        return Sample(latency, status)
    if plan.stream:
        if "event: error" in text or "event: answer" not in text:
            return Sample(latency, "sse_error")
        text = text.split("event: answer\ndata: ", 1)[1].split("\n\n", 1)[0]
    refused = json.loads(text).get("refusal") is not None
    return Sample(latency, status, refused, first if plan.stream else None)


def client_loop(plan: Plan, barrier: threading.Barrier, out: list[Sample]) -> None:
    with httpx.Client(trust_env=False, timeout=plan.timeout_s) as client:
        barrier.wait()
        while (ticket := plan.next_ticket()) is not None:
            out.append(ask(client, plan, QUESTIONS[ticket % len(QUESTIONS)]))


def drive(plan: Plan) -> tuple[list[Sample], float]:
    """All clients at once; the samples and the wall time from start to the last response."""
    per_client: list[list[Sample]] = [[] for _ in range(plan.concurrency)]

    def go() -> None:  # the barrier's action: the clock starts as they are all released
        plan.started = time.perf_counter()

    barrier = threading.Barrier(plan.concurrency, action=go)
    threads = [
        threading.Thread(target=client_loop, args=(plan, barrier, out), daemon=True)
        for out in per_client
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [s for out in per_client for s in out], time.perf_counter() - plan.started


def nearest_rank(sorted_xs: Sequence[float], q: float) -> float | None:
    if not sorted_xs:
        return None
    return round(sorted_xs[max(0, math.ceil(q * len(sorted_xs)) - 1)], 4)


def is_2xx(status: int | str) -> bool:
    return isinstance(status, int) and 200 <= status < 300


def summarize(samples: Sequence[Sample], wall_s: float) -> dict[str, Any]:
    ok = sorted(s.latency_s for s in samples if is_2xx(s.status))
    errors = Counter(str(s.status) for s in samples if not is_2xx(s.status) and s.status != 429)
    firsts = sorted(s.first_byte_s for s in samples if s.first_byte_s is not None)
    retry_after = sorted({s.retry_after for s in samples if s.retry_after is not None})
    return {
        "requests": len(samples),
        "ok": len(ok),
        "refused": sum(s.refused for s in samples),
        "wall_s": round(wall_s, 3),
        "qps": round(len(ok) / wall_s, 3) if wall_s > 0 else None,
        "p50_s": nearest_rank(ok, 0.50),
        "p95_s": nearest_rank(ok, 0.95),
        "p99_s": nearest_rank(ok, 0.99),
        "max_s": round(ok[-1], 4) if ok else None,
        "first_byte_p50_s": nearest_rank(firsts, 0.50),
        "errors": dict(sorted(errors.items())),
        "rejected_429": sum(s.status == 429 for s in samples),
        "retry_after": retry_after,
    }


# --- work beside the clients: a bulk add, a verify loop ------------------------------------

_ONSETS = ("b", "br", "c", "d", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "ou")
_CODAS = ("", "n", "r", "s", "t", "l", "nd", "rk")
# a fixed vocabulary of made-up words: the files say nothing the questions ask about
WORDS = tuple(
    random.Random(7).sample(
        [o + n + c + n2 for o in _ONSETS for n in _NUCLEI for c in _CODAS for n2 in ("", "o")],
        600,
    )
)


def bulk_text(rng: random.Random, title: str) -> str:
    """A small markdown document: a heading, then three to five paragraphs of seeded words."""
    paragraphs = []
    for _ in range(rng.randint(3, 5)):
        sentences = []
        for _ in range(rng.randint(3, 6)):
            words = rng.choices(WORDS, k=rng.randint(6, 14))
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    return f"# {title}\n\n" + "\n\n".join(paragraphs) + "\n"


def get_json(url: str, timeout: float) -> Any:
    response = httpx.get(url, timeout=timeout, trust_env=False)
    response.raise_for_status()
    return response.json()


class Beside:
    """Work started just before a row's clients and stopped once they are done."""

    label = ""

    def start(self) -> None: ...

    def stop(self) -> dict[str, Any]:
        return {}


class BulkAdd(Beside):
    """`n` new markdown files written at once into `folder` (a fresh subfolder of the watched
    one) on a thread of their own, the index's `docs` polled until the row ends."""

    label = "bulk_add"

    def __init__(self, url: str, folder: Path, n: int, timeout: float, poll_s: float = 1.0):
        self.url, self.folder, self.n, self.timeout, self.poll_s = url, folder, n, timeout, poll_s
        self.done = threading.Event()
        self.written, self.write_s = 0, 0.0
        self.all_in_s: float | None = None
        self.docs_before = self.docs_now = 0
        self.threads: list[threading.Thread] = []

    def docs(self) -> int:
        return int(get_json(f"{self.url}/v1/status", self.timeout)["docs"])

    def start(self) -> None:
        self.docs_before = self.docs_now = self.docs()
        self.started = time.perf_counter()
        self.threads = [
            threading.Thread(target=self._write, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _write(self) -> None:
        rng = random.Random(self.folder.name)  # distinct text in every run
        self.folder.mkdir(parents=True)
        for i in range(self.n):
            text = bulk_text(rng, f"{self.folder.name} note {i}")
            (self.folder / f"note-{i:05d}.md").write_text(text)
            self.written += 1
        self.write_s = time.perf_counter() - self.started

    def _poll(self) -> None:
        while not self.done.wait(self.poll_s):
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                self.docs_now = self.docs()
            if self.all_in_s is None and self.docs_now - self.docs_before >= self.n:
                self.all_in_s = time.perf_counter() - self.started

    def stop(self) -> dict[str, Any]:
        self.done.set()
        for thread in self.threads:
            thread.join()
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            self.docs_now = self.docs()
        indexed = max(0, min(self.n, self.docs_now - self.docs_before))
        if self.all_in_s is None and indexed >= self.n:
            self.all_in_s = time.perf_counter() - self.started
        return {
            "docs": self.n,
            "written": self.written,
            "write_s": round(self.write_s, 3),
            "indexed": indexed,
            "all_in_s": None if self.all_in_s is None else round(self.all_in_s, 1),
            "docs_before": self.docs_before,
            "docs_after": self.docs_now,
            "folder": str(self.folder),
        }


class VerifyLoop(Beside):
    """One thread calling `GET /v1/verify` again and again until the row ends."""

    label = "verify_beside"

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout
        self.done = threading.Event()
        self.samples: list[Sample] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        with httpx.Client(trust_env=False, timeout=self.timeout) as client:
            while not self.done.is_set():
                started = time.perf_counter()
                status: int | str
                try:
                    status = client.get(f"{self.url}/v1/verify").status_code
                except httpx.TimeoutException:
                    status = "timeout"
                except httpx.TransportError:
                    status = "connection"
                self.samples.append(Sample(time.perf_counter() - started, status))
                if status == 429:
                    self.done.wait(1.0)

    def stop(self) -> dict[str, Any]:
        self.done.set()
        self.thread.join()
        ok = sorted(s.latency_s for s in self.samples if is_2xx(s.status))
        errors = Counter(str(s.status) for s in self.samples if not is_2xx(s.status))
        return {
            "completed": len(ok),
            "calls": len(self.samples),
            "errors": dict(sorted(errors.items())),
            "p50_s": nearest_rank(ok, 0.50),
            "max_s": round(ok[-1], 4) if ok else None,
        }


# --- abuse beside the clients: slow bodies, idle connections, a flood ----------------------


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def query_body(i: int) -> bytes:
    return json.dumps({"query": QUESTIONS[i % len(QUESTIONS)], "stream": False}).encode()


def post_head(host: str, port: int, length: int, close: bool) -> bytes:
    """The request line and headers of a `POST /v1/query` with a JSON body of `length`."""
    head = f"POST /v1/query HTTP/1.1\r\nHost: {host}:{port}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
    head += "Connection: close\r\n" if close else ""
    return (head + "\r\n").encode()


def status_of(data: bytes) -> int | None:
    """The status code of the HTTP response `data` starts with, if it does."""
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[0].startswith(b"HTTP/") else None


def spread(xs: Sequence[float]) -> dict[str, float | None]:
    ordered = sorted(xs)
    high = round(ordered[-1], 3) if ordered else None
    low = round(ordered[0], 3) if ordered else None
    return {"min_s": low, "p50_s": nearest_rank(ordered, 0.50), "max_s": high}


class IdleConns:
    """`n` connections that are opened and never send a byte. A thread watches them all
    (epoll, 0.2 s timeouts) until stopped and records which the server closed, and when
    (seconds after they were opened), and anything it wrote to them first."""

    def __init__(self, host: str, port: int, n: int) -> None:
        self.host, self.port, self.n = host, port, n
        self.socks: list[socket.socket] = []
        self.connect_errors: Counter[str] = Counter()
        self.closed: dict[int, tuple[float, str]] = {}  # index -> (after_s, "eof" | "reset")
        self.got: dict[int, str] = {}  # index -> the first line the server wrote
        self.selector = selectors.DefaultSelector()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.opened_at = self.connect_s = 0.0

    def start(self) -> None:
        self.opened_at = time.perf_counter()
        for _ in range(self.n):
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5)
            except OSError as exc:
                self.connect_errors[type(exc).__name__] += 1
                continue
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, len(self.socks))
            self.socks.append(sock)
        self.connect_s = time.perf_counter() - self.opened_at
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock, index = key.fileobj, key.data
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data, how = b"", "reset"
                else:
                    how = "eof"
                if data:
                    self.got.setdefault(index, data.split(b"\r\n", 1)[0].decode("latin-1"))
                    continue
                self.closed[index] = (time.perf_counter() - self.opened_at, how)
                self.selector.unregister(sock)

    def stop(self) -> dict[str, Any]:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
        observed = time.perf_counter() - self.opened_at
        for sock in self.socks:
            sock.close()
        self.selector.close()
        return {
            "conns": self.n,
            "opened": len(self.socks),
            "connect_s": round(self.connect_s, 3),
            "connect_errors": dict(sorted(self.connect_errors.items())),
            "closed_by_server": len(self.closed),
            "closed_how": dict(sorted(Counter(how for _, how in self.closed.values()).items())),
            "closed_after": spread([after for after, _ in self.closed.values()]),
            "server_wrote": dict(sorted(Counter(self.got.values()).items())),
            "open_at_end": len(self.socks) - len(self.closed),
            "observed_s": round(observed, 1),
        }


def trickle_one(
    host: str, port: int, i: int, over_s: float, read_timeout: float, cancel: threading.Event
) -> dict[str, Any]:
    """One slow client: the headers of a `POST /v1/query` at once, then its small JSON body a
    byte at a time, spread over `over_s` seconds (it stops sending as soon as the server
    writes or closes), then the answer read until the server closes (`Connection: close`)
    or `read_timeout` passes. What it got: a status, or how the connection ended, and when."""
    body = query_body(i)
    out: dict[str, Any] = {"body_bytes": len(body), "sent_bytes": 0}
    started = time.perf_counter()

    def since() -> float:
        return round(time.perf_counter() - started, 2)

    try:
        sock = socket.create_connection((host, port), timeout=5)
    except OSError as exc:
        return {**out, "result": f"connect_{type(exc).__name__}", "after_s": since()}
    data, result = b"", ""
    with sock, selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        try:
            sock.sendall(post_head(host, port, len(body), close=True))
            step = over_s / len(body)
            for k in range(len(body)):
                if selector.select(timeout=step) or cancel.is_set():
                    break  # the server answered or closed before the body was complete
                sock.sendall(body[k : k + 1])
                out["sent_bytes"] += 1
        except OSError as exc:
            out["send_error"] = type(exc).__name__
        out["body_s"] = since()
        deadline = time.perf_counter() + read_timeout
        try:
            while True:
                left = deadline - time.perf_counter()
                if cancel.is_set() or left <= 0:
                    result = "cancelled" if cancel.is_set() else "timeout"
                    break
                if not selector.select(timeout=min(left, 0.5)):
                    continue
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            result = "reset" if isinstance(exc, ConnectionResetError) else type(exc).__name__
    status = status_of(data)
    out |= {"result": status if status is not None else (result or "closed"), "after_s": since()}
    if status is not None and status != 200:
        with contextlib.suppress(ValueError):
            out["code"] = json.loads(data.split(b"\r\n\r\n", 1)[1]).get("code")
    return out


class Flood:
    """`n` `POST /v1/query` fired at an even pace over `spread_s` seconds, each when its time
    comes whatever the others are doing: one asyncio loop on a thread of its own, raw HTTP/1.1
    on keep-alive connections (a free one if there is one, else a new one), each answer read
    (status, headers, body) with a timeout. Cheap on the client side, so on a small machine
    the pace is the server's, not the bench's."""

    statuses = ("200", "429", "503", "504", "connection", "timeout")

    def __init__(self, host: str, port: int, n: int, spread_s: float, timeout: float) -> None:
        self.host, self.port, self.n, self.spread_s, self.timeout = host, port, n, spread_s, timeout
        self.cancel = threading.Event()
        self.samples: list[Sample] = []
        self.sent_at: list[float] = []
        self.opened = 0
        self.started = self.done_s = 0.0
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.free: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.writers: set[asyncio.StreamWriter] = set()

    def start(self) -> None:
        self.thread.start()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.started = time.perf_counter()
        tasks = [
            asyncio.create_task(self._one(i, t0 + i * self.spread_s / self.n))
            for i in range(self.n)
        ]
        everything = asyncio.gather(*tasks, return_exceptions=True)
        deadline = t0 + self.spread_s + self.timeout + 5
        while not everything.done() and not self.cancel.is_set() and loop.time() < deadline:
            await asyncio.wait({everything}, timeout=0.2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.done_s = time.perf_counter() - self.started
        for writer in self.writers:
            writer.close()
        await asyncio.sleep(0)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        now = time.perf_counter()
        while self.free:
            freed, reader, writer = self.free.pop()
            if now - freed < 3.0:  # well inside the server's 5 s keep-alive
                return reader, writer
            writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        self.writers.add(writer)
        return reader, writer

    async def _one(self, i: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - asyncio.get_running_loop().time()))
        started = time.perf_counter()
        writer: asyncio.StreamWriter | None = None
        status: int | str = "cancelled"
        retry_after = None
        try:
            reader, writer = await self._connection()
            body = query_body(i)
            writer.write(post_head(self.host, self.port, len(body), close=False) + body)
            self.sent_at.append(time.perf_counter() - self.started)
            async with asyncio.timeout(self.timeout):
                await writer.drain()
                status, headers, keep = await read_response(reader)
            retry_after = headers.get("retry-after")
            if keep:
                self.free.append((time.perf_counter(), reader, writer))
                writer = None
        except TimeoutError:
            status = "timeout"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            status = "connection"
        finally:
            if writer is not None:
                writer.close()
                self.writers.discard(writer)
            self.samples.append(
                Sample(time.perf_counter() - started, status, False, None, retry_after)
            )

    def stop(self, wait_s: float) -> dict[str, Any]:
        self.thread.join(timeout=wait_s)
        if self.thread.is_alive():
            self.cancel.set()
            self.thread.join(timeout=10)
        counts = Counter(str(s.status) for s in self.samples)
        by = {k: counts.pop(k, 0) for k in self.statuses}
        sent = sorted(self.sent_at)
        fire_s = sent[-1] if sent else None
        return {
            "requests": self.n,
            "sent": len(sent),
            "answered": len(self.samples),
            "fire_s": None if fire_s is None else round(fire_s, 3),
            "fire_rate_per_s": round(len(sent) / fire_s, 1) if fire_s else None,
            "done_s": round(self.done_s, 3),
            "connections": self.opened,
            "status": {**by, **dict(sorted(counts.items()))},
            "latency_429": spread([s.latency_s for s in self.samples if s.status == 429]),
            "latency_200": spread([s.latency_s for s in self.samples if s.status == 200]),
            "retry_after": sorted({s.retry_after for s in self.samples if s.retry_after}),
        }


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """One HTTP/1.1 response off a keep-alive connection: its status, its headers (lower
    case), and whether the connection can carry the next request."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close"
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            await reader.readexactly(size + 2)
        await reader.readexactly(2)
    else:
        await reader.read()  # until the server closes
        keep = False
    return status, headers, keep


class Abuse(Beside):
    """The issue's bad input, all at once beside the clients: `trickle` slow clients, each
    trickling a query's body over `trickle_s` seconds; `idle` connections that send nothing;
    and a flood of `flood` queries fired within about a second. Stopped once the clients are
    done: the flood and the slow clients are waited for (their answers, bounded by their
    timeouts), then the idle connections are closed."""

    label = "abuse"

    def __init__(
        self, url: str, trickle: int, trickle_s: float, idle: int, flood: int, timeout: float
    ) -> None:
        host, port = host_port(url)
        self.trickle_s, self.timeout = trickle_s, timeout
        self.cancel = threading.Event()
        self.trickles: list[dict[str, Any]] = [{} for _ in range(trickle)]
        self.trickle_threads = [
            threading.Thread(target=self._trickle, args=(host, port, i), daemon=True)
            for i in range(trickle)
        ]
        self.idle = IdleConns(host, port, idle)
        self.flood = Flood(host, port, flood, 1.0, timeout)
        self.started = 0.0

    def _trickle(self, host: str, port: int, i: int) -> None:
        self.trickles[i] = trickle_one(host, port, i, self.trickle_s, self.timeout, self.cancel)

    def start(self) -> None:
        self.started = time.perf_counter()
        self.idle.start()  # the idle connections first, then the slow bodies, then the flood
        for thread in self.trickle_threads:
            thread.start()
        if self.flood.n:
            self.flood.start()

    def stop(self) -> dict[str, Any]:
        # every part ends by itself within these bounds; past them it is cancelled
        deadline = self.started + self.trickle_s + self.timeout + 10
        flood = self.flood.stop(max(0.0, deadline - time.perf_counter())) if self.flood.n else {}
        for thread in self.trickle_threads:
            thread.join(timeout=max(0.0, deadline - time.perf_counter()))
        if any(thread.is_alive() for thread in self.trickle_threads):
            self.cancel.set()
            for thread in self.trickle_threads:
                thread.join(timeout=5)
        results = Counter(str(t.get("result")) for t in self.trickles)
        return {
            "flood": flood,
            "trickle": {
                "clients": len(self.trickles),
                "over_s": self.trickle_s,
                "results": dict(sorted(results.items())),
                "each": self.trickles,
            },
            "idle": self.idle.stop(),
            "abuse_s": round(time.perf_counter() - self.started, 1),
        }


# --- one bench run --------------------------------------------------------------------------


def measure(
    args: argparse.Namespace,
    server: Server,
    stub: StubLLM | None,
    n: int,
    beside: Beside | None = None,
    row: str | None = None,
) -> dict[str, Any]:
    """One run at concurrency `n` against the running server (with `beside` running from
    just before the clients start until they are done); `row` names it."""
    requests = args.requests
    if requests is None and args.duration is None:
        requests = 2 * max(args.compare or [n])
    plan = Plan(server.url, n, requests, args.duration, args.timeout, args.stream)
    calls_before = stub.calls if stub is not None else 0
    before = server.memory()
    row = beside.label if beside is not None else row
    what = f", {row}" if row else ""
    note(f"{n} client(s){what}: {requests or 'unbounded'} requests, duration {args.duration} s ...")
    if beside is not None:
        beside.start()
    try:
        samples, wall = drive(plan)
    finally:
        extra = beside.stop() if beside is not None else {}
    after = server.memory()
    named = {"row": row} if row else {}
    return {
        "concurrency": n,
        **named,
        **({row: extra} if beside is not None and row else {}),
        **summarize(samples, wall),
        "llm_calls": (stub.calls - calls_before) if stub is not None else 0,
        "rss_start_mb": before.get("VmRSS"),
        "rss_end_mb": after.get("VmRSS"),
        "rss_peak_mb": after.get("VmHWM"),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "mode": args.mode,
        "stream": args.stream,
        "llm_delay_s": None if args.no_llm else args.llm_delay,
    }


def warm_up(url: str, queries: int, timeout: float) -> None:
    """`queries` questions one at a time, not measured; each must be answered."""
    plan = Plan(url, 1, queries, None, timeout, False)
    with httpx.Client(trust_env=False, timeout=timeout) as client:
        samples = [ask(client, plan, QUESTIONS[i % len(QUESTIONS)]) for i in range(queries)]
    failed = [s.status for s in samples if s.status != 200]
    if failed:
        raise SystemExit(f"warm-up queries failed: {failed}")
    took = ", ".join(f"{s.latency_s:.2f}" for s in samples)
    note(f"warm-up: {queries} queries, {sum(s.refused for s in samples)} refused; s: {took}")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    docs = args.docs.resolve()
    if args.bulk_add is not None:  # a copy is watched: the added files never touch the source
        copy = args.out.resolve() / f"docs-{docs.name}-bulk"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(docs, copy)
        docs = copy
    # one data dir per folder, so another --docs never reads as a mass delete of the first;
    # bulk-add runs have their own (the last run's files, deleted since, are dropped by sync)
    data_dir = args.out / f"data-{docs.name}-{hashlib.sha1(bytes(docs)).hexdigest()[:8]}"
    bulk = args.bulk_add is not None
    data_dir = data_dir.with_name(data_dir.name + "-bulk") if bulk else data_dir
    args.out.mkdir(parents=True, exist_ok=True)
    # a fresh subfolder per run: its files are new documents every time
    folder = docs / f"bulk-add-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    with contextlib.ExitStack() as stack:
        # removed last, once the server is stopped (the index keeps them until the next sync)
        stack.callback(lambda: shutil.rmtree(folder, ignore_errors=True) if bulk else None)
        stub = None if args.no_llm else stack.enter_context(StubLLM(args.llm_delay))
        env = child_env(stub.url if stub is not None else None)
        sync(docs, data_dir, env, allow_mass_delete=bulk)
        server = Server(args.mode, docs, data_dir, args.out / f"{args.mode}.log", env)
        stack.callback(server.stop)
        url = server.start()
        note(f"{args.mode} at {url} (pid {server.proc.pid if server.proc else '?'}); ready")
        note(f"server memory when ready: {server.memory()}")
        warm_up(url, args.warmup, args.timeout)
        if bulk or args.verify_beside or args.abuse:
            n = args.concurrency
            first = "idle" if bulk else "baseline" if args.abuse else "alone"
            baseline = measure(args, server, stub, n, row=first)
            beside: Beside
            if bulk:
                beside = BulkAdd(url, folder, args.bulk_add, args.timeout)
            elif args.abuse:
                over = min(args.trickle_s, args.duration or args.trickle_s)  # within the row
                what = (args.trickle, over, args.idle_conns, args.flood, args.timeout)
                beside = Abuse(url, *what)
            else:
                beside = VerifyLoop(url, args.timeout)
            return [baseline, measure(args, server, stub, n, beside)]
        return [measure(args, server, stub, n) for n in (args.compare or [args.concurrency])]


# --- output ---------------------------------------------------------------------------------


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's wall time, throughput and latency over the first row's."""
    base = rows[0]

    def over(row: dict[str, Any], key: str) -> float | None:
        a, b = row.get(key), base.get(key)
        return round(a / b, 3) if a is not None and b else None

    keys = ("wall_s", "qps", "p50_s", "p95_s", "p99_s")
    named = [{"row": r["row"]} if "row" in r else {} for r in rows]
    return [
        {"concurrency": r["concurrency"], **name, **{k: over(r, k) for k in keys}}
        for r, name in zip(rows, named, strict=True)
    ]


# the targets: the second row's p95 over the baseline's, at most (none for abuse:
# there the issue asks that everyone else keeps being answered)
TARGETS: dict[str, float | None] = {"bulk_add": 3.0, "verify_beside": 2.0, "abuse": None}
BESIDE_KEY = {"bulk_add": "bulk_add", "verify_beside": "verify", "abuse": "abuse"}
NORMAL_KEYS = ("requests", "ok", "p50_s", "p95_s", "p99_s", "max_s", "errors", "rejected_429")


def side_by_side(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The document of a --bulk-add, --verify-beside or --abuse run: both rows, the ratios,
    what ran beside the clients, and the p95 ratio beside its target."""
    during = rows[1]["row"]
    ratio = ratios(rows)[1]["p95_s"]
    target = TARGETS[during]
    doc = {
        "measurement": during,
        "runs": list(rows),
        "ratios": ratios(rows),
        "p95_ratio": ratio,
        "target_p95_ratio": target,
        "within_target": None if ratio is None or target is None else ratio <= target,
        BESIDE_KEY[during]: rows[1][during],
    }
    if during == "abuse":  # "everyone else": the normal clients of both rows, side by side
        normal = [{"row": r["row"], **{k: r[k] for k in NORMAL_KEYS}} for r in rows]
        env = {k: v for k, v in os.environ.items() if k.startswith("RAGSTREAM_SERVER__")}
        doc |= {"normal_clients": normal, "server_env": env}
    return doc


def cell(value: Any, width: int) -> str:
    if value is None:
        return f"{'-':>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.2f}"
    return f"{value!s:>{width}}"


def table(rows: Sequence[dict[str, Any]]) -> None:
    cols: tuple[str, ...] = ("row",) if "row" in rows[0] else ()
    cols += ("concurrency", "requests", "ok", "refused", "wall_s", "qps")
    cols += ("p50_s", "p95_s", "p99_s", "rejected_429", "llm_calls")
    cols += ("rss_start_mb", "rss_end_mb", "rss_peak_mb")
    first = rows[0]
    print(f"mode {first['mode']}; LLM delay {first['llm_delay_s']} s; stream {first['stream']}")
    width = {"row": 13}  # "verify_beside"
    print(" ".join(f"{c:>{width.get(c, 12)}}" for c in cols) + "  errors")
    for row in rows:
        line = " ".join(cell(row[c], width.get(c, 12)) for c in cols)
        print(line + f"  {row['errors'] or '-'}")
    if "row" in first:
        return side_by_side_table(side_by_side(rows))
    if len(rows) > 1:
        print(f"\nratios to concurrency {first['concurrency']} (same request count):")
        keys = ("concurrency", "wall_s", "qps", "p50_s", "p95_s", "p99_s")
        print(" ".join(f"{k:>12}" for k in keys))
        for r in ratios(rows):
            print(" ".join(cell(r[k], 12) for k in keys))


def side_by_side_table(doc: dict[str, Any]) -> None:
    base, during = doc["runs"]
    ratio, target = doc["p95_ratio"], doc["target_p95_ratio"]
    verdict = (
        "-" if doc["within_target"] is None else ("within" if doc["within_target"] else "over")
    )
    goal = f"target <= {target:g}: {verdict}" if target is not None else "no target"
    print(
        f"\np95 {during['row']} / p95 {base['row']}: {cell(ratio, 0).strip()} "
        f"({goal}); p50 ratio {cell(doc['ratios'][1]['p50_s'], 0).strip()}"
    )
    if "abuse" in doc:
        return abuse_table(doc)
    if "bulk_add" in doc:
        b = doc["bulk_add"]
        all_in = f"all in after {b['all_in_s']} s" if b["all_in_s"] is not None else "not all in"
        print(
            f"bulk add: {b['written']} of {b['docs']} files written in {b['write_s']:.2f} s; "
            f"{b['indexed']} of {b['docs']} in the index by the end of the row ({all_in}; "
            f"docs {b['docs_before']} -> {b['docs_after']})"
        )
    else:
        v = doc["verify"]
        print(
            f"verify beside: {v['completed']} completed of {v['calls']} calls, p50 "
            f"{cell(v['p50_s'], 0).strip()} s, max {cell(v['max_s'], 0).strip()} s; "
            f"errors {v['errors'] or '-'}"
        )


def abuse_table(doc: dict[str, Any]) -> None:
    a = doc["abuse"]
    for r in doc["normal_clients"]:
        print(
            f"normal clients, {r['row']}: {r['ok']} of {r['requests']} answered; p50/p95/p99 "
            f"{cell(r['p50_s'], 0)}/{cell(r['p95_s'], 0)}/{cell(r['p99_s'], 0)} s; "
            f"429s {r['rejected_429']}; errors {r['errors'] or '-'}"
        )
    if f := a["flood"]:
        status = ", ".join(f"{k} x{v}" for k, v in f["status"].items() if v)
        print(
            f"flood: {f['sent']} of {f['requests']} fired in {cell(f['fire_s'], 0)} s "
            f"({f['fire_rate_per_s']}/s) on {f['connections']} connections, all answered in "
            f"{cell(f['done_s'], 0)} s: {status or '-'}; 429 p50 "
            f"{cell(f['latency_429']['p50_s'], 0)} s; Retry-After {f['retry_after'] or '-'}"
        )
    t = a["trickle"]
    each = "; ".join(
        f"{x.get('result')} after {x.get('after_s')} s ({x.get('sent_bytes')}/"
        f"{x.get('body_bytes')} bytes sent)"
        for x in t["each"]
    )
    print(f"trickle: {t['clients']} client(s), body over {t['over_s']:g} s: {each or '-'}")
    i = a["idle"]
    closed = i["closed_after"]
    when = f" after {closed['min_s']}..{closed['max_s']} s" if i["closed_by_server"] else ""
    print(
        f"idle: {i['opened']} of {i['conns']} connections open; closed by the server "
        f"{i['closed_by_server']}{when}{' ' + str(i['closed_how']) if i['closed_how'] else ''}; "
        f"still open at the end {i['open_at_end']} (watched {i['observed_s']} s)"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--requests", type=int, help="queries in all (default: 2 x concurrency)")
    ap.add_argument("--duration", type=float, help="seconds to keep sending")
    ap.add_argument("--llm-delay", type=float, default=1.0, help="stub latency, s (default 1)")
    ap.add_argument("--no-llm", action="store_true", help="no stub: the extractive generator")
    ap.add_argument("--mode", choices=("serve", "watch"), default="serve")
    ap.add_argument("--stream", action="store_true", help='ask with "stream": true (SSE)')
    ap.add_argument("--docs", type=Path, default=REPO / "samples", help="folder to index")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "load")
    ap.add_argument("--warmup", type=int, default=len(QUESTIONS), help="unmeasured queries")
    ap.add_argument("--timeout", type=float, default=120.0, help="per request, s")
    ap.add_argument("--compare", help="concurrencies side by side in one run, e.g. 1,8")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    beside = ap.add_mutually_exclusive_group()
    beside.add_argument(
        "--bulk-add",
        type=int,
        metavar="N",
        help="--mode watch: a row idle, then one while N new files go into the watched folder",
    )
    beside.add_argument(
        "--verify-beside",
        action="store_true",
        help="a row alone, then one with GET /v1/verify called in a loop beside the clients",
    )
    beside.add_argument(
        "--abuse",
        action="store_true",
        help="a baseline row, then one beside slow bodies, idle connections and a flood",
    )
    ap.add_argument("--trickle", type=int, default=4, help="--abuse: slow clients (default 4)")
    ap.add_argument(
        "--trickle-s", type=float, default=30.0, help="--abuse: seconds to trickle a body over"
    )
    ap.add_argument(
        "--idle-conns", type=int, default=200, help="--abuse: silent connections (default 200)"
    )
    ap.add_argument(
        "--flood", type=int, default=1000, help="--abuse: queries fired in ~1 s (default 1000)"
    )
    args = ap.parse_args(argv)
    if args.bulk_add is not None and args.mode != "watch":
        ap.error("--bulk-add needs --mode watch (the watched folder takes the files in)")
    if args.bulk_add is not None and args.bulk_add < 1:
        ap.error("--bulk-add must be at least 1")
    if (args.bulk_add is not None or args.verify_beside or args.abuse) and args.compare:
        ap.error("--bulk-add, --verify-beside and --abuse run one concurrency: not --compare")
    if min(args.trickle, args.idle_conns, args.flood) < 0 or args.trickle_s <= 0:
        ap.error("--trickle, --idle-conns and --flood must be at least 0, --trickle-s positive")
    args.compare = [int(c) for c in args.compare.split(",")] if args.compare else None
    if min([args.concurrency, *(args.compare or [])]) < 1:
        ap.error("concurrencies must be at least 1")
    if args.warmup < 0:
        ap.error("--warmup must be at least 0")
    if args.requests is not None and args.requests < 1:
        ap.error("--requests must be at least 1")
    if args.duration is not None and args.duration <= 0:
        ap.error("--duration must be positive")
    return args


def enough_files(n: int) -> None:
    """Lift the soft limit on open files to `n` (within the hard one): this process holds
    the abuse's sockets, and the server, started after, inherits it for its end of them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (n if hard == resource.RLIM_INFINITY else min(n, hard), hard)
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.abuse:
        enough_files(args.idle_conns + args.flood + args.trickle + args.concurrency + 1024)
    with stdout_to_stderr(args.json):
        rows = run(args)
    if args.json and "row" in rows[0]:
        print_json(side_by_side(rows))
    elif args.json:
        print_json(rows[0] if len(rows) == 1 else {"runs": rows, "ratios": ratios(rows)})
    else:
        table(rows)


if __name__ == "__main__":
    main()
