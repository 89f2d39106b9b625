"""OTLP/HTTP export end to end: the real CLI sends its spans to a receiver we read back.

`make traces` points ragstream at a local trace viewer with two settings
(RAGSTREAM_TELEMETRY__EXPORTER=otlp, RAGSTREAM_TELEMETRY__OTLP_ENDPOINT); this test does
exactly that, with an OTLP/HTTP receiver built here (stdlib server + the protobuf types of
opentelemetry-proto, which the OTLP exporter itself depends on) standing in for the viewer.
The CLI runs in subprocesses because the exporter is configured once per process (and the
test session's own provider must not start exporting), and a process flushes its batch
span processor when it exits.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ragstream.core.answers import Answer

pytestmark = pytest.mark.slow  # the CLI in subprocesses

QUERY_STAGES = {
    "ragstream.query",
    "ragstream.query.retrieve",
    "ragstream.query.fuse",
    "ragstream.query.rerank",
    "ragstream.query.gate",
    "ragstream.query.assemble",
    "ragstream.query.generate",
    "ragstream.query.verify",
}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


SCALARS = {"string_value", "int_value", "double_value", "bool_value"}


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in SCALARS else str(v)


def _decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                    )
                )
    return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (protobuf, optionally gzip)."""
    state = Receiver(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with lock:
                state.paths.append(self.path)
                if self.path == "/v1/traces":
                    state.spans.extend(_decode(body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    yield state
    server.shutdown()
    server.server_close()


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_cli_spans_reach_an_otlp_http_receiver(tmp_path: Path, receiver: Receiver) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = tmp_path / "data"
    proxies = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
    env = {k: v for k, v in os.environ.items() if k not in proxies}
    env |= {
        "RAGSTREAM_TELEMETRY__EXPORTER": "otlp",
        "RAGSTREAM_TELEMETRY__OTLP_ENDPOINT": receiver.url,
    }

    _cli(env, "sync", str(root), "--data-dir", str(data), "--json")
    ingest = {s.name: s for s in receiver.spans if s.name.startswith("ragstream.ingest.")}
    for stage in ("parse", "chunk", "diff", "embed", "write"):
        assert f"ragstream.ingest.{stage}" in ingest, sorted(ingest)
    assert ingest["ragstream.ingest.parse"].attributes["docs_in"] == 1
    assert ingest["ragstream.ingest.embed"].attributes["reembedded"] == 1

    answer = Answer.model_validate_json(
        _cli(env, "query", "How long is green tea steeped?", "--data-dir", str(data), "--json")
    )
    assert answer.refusal is None and "two minutes" in answer.text
    traced = [s for s in receiver.spans if s.trace_id == answer.trace_id]
    assert {s.name for s in traced} >= QUERY_STAGES, sorted(s.name for s in traced)
    assert not any(s.name.startswith("ragstream.ingest") for s in traced)
    (root_span,) = [s for s in traced if s.name == "ragstream.query"]
    assert root_span.parent_id == "" and root_span.attributes["k"] == 8
    by_id = {s.span_id: s for s in traced}
    for s in traced:  # every stage hangs under the one root span of this answer
        top = s
        while top.parent_id:
            top = by_id[top.parent_id]
        assert top is root_span, s.name
    retrieve = next(s for s in traced if s.name == "ragstream.query.retrieve")
    assert retrieve.attributes["n"] == 100
    assert set(receiver.paths) == {"/v1/traces"}
