"""Every route is one call on the served index as the caller's tenants see it: the app runs
over a recording fake of `ServedService`, and each request must leave exactly one recorded
call, to the method the route stands for, scoped to the tenants of the caller's key (admin
commands: the whole index). The real served index is driven end to end in the other tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ragstream.core.answers import Answer, ChatRequest, QueryRequest, Retrieval
from ragstream.core.models import (
    DocOutcome,
    FieldInfo,
    FileDetail,
    FileRecord,
    ReindexStatus,
    StatusReport,
    VerifyReport,
)
from ragstream.core.permissions import Principal
from ragstream.core.settings import Settings
from ragstream.core.snapshot import LegCounts, SnapshotInfo
from ragstream.http import Serving, create_app
from ragstream.service.base import Followed, ServedService, Tenants

Call = tuple[str, Tenants, tuple[Any, ...]]
TENANT = {"Authorization": "Bearer key-acme"}
ADMIN = {"Authorization": "Bearer key-admin"}
CHAT = [
    {"role": "user", "content": "what broke?"},
    {"role": "assistant", "content": "the valve"},
    {"role": "user", "content": "why?"},
]


def answer(query: str) -> Answer:
    return Answer(
        query=query, text="", citations=[], claims=[], grounding=0.0,
        embedder="e", reranker="r", generator="g", trace_id="t",
    )  # fmt: skip


STATUS = StatusReport(
    docs=1, chunks_live=2, chunks_deleted=0, lexical_live=2,
    embedder=None, collection="c", last_sync=None, dead_letters=[],
)  # fmt: skip
RECORD = FileRecord(doc_id="acme:a.md", source="acme", path="/x/a.md", state="indexed")
REINDEX = ReindexStatus(open=False, embedder=None, collection=None)
SNAPSHOT = SnapshotInfo(
    id="s1", path="/x/s1.tar", size=1, created_at=0.0, embedder=None,
    counts=LegCounts(chunks_live=0, chunks_deleted=0, lexical_live=0),
)  # fmt: skip


@dataclass
class RecordingIndex:
    """A `ServedService` that records each call (method, the view's tenants, arguments)."""

    calls: list[Call] = field(default_factory=list)
    tenants: Tenants = None

    def scoped(self, tenants: Tenants, principal: Principal | None = None) -> RecordingIndex:
        return RecordingIndex(self.calls, tenants)

    def _record(self, method: str, *args: Any) -> None:
        self.calls.append((method, self.tenants, args))

    @property
    def mode(self) -> str:
        return "embedded"

    @property
    def url(self) -> None:
        return None

    def health(self) -> dict[str, Any]:
        self._record("health")
        return {"ok": True, "ready": True}

    def readiness(self) -> dict[str, Any]:
        self._record("readiness")
        return {"ready": True}

    def status(self) -> StatusReport:
        self._record("status")
        return STATUS

    def query(self, question: Any, **options: Any) -> Answer:
        raise AssertionError("a route awaits `query_async`")

    async def query_async(
        self, request: QueryRequest, on_text: Callable[[str], None] | None = None, **_: Any
    ) -> Answer:
        self._record("query_async", request.query)
        if on_text is not None:
            on_text("streamed ")
        return answer(request.query)

    def stream(self, question: Any, **options: Any) -> Iterator[Any]:
        raise AssertionError("a route streams through `query_async`")

    def chat(self, messages: Any, **options: Any) -> Answer:
        raise AssertionError("a route awaits `chat_async`")

    def chat_stream(self, messages: Any, **options: Any) -> Iterator[Any]:
        raise AssertionError("a route streams a chat through `chat_async`")

    async def chat_async(
        self, request: ChatRequest, on_text: Callable[[str], None] | None = None, **_: Any
    ) -> Answer:
        self._record("chat_async", len(request.messages), request.question)
        if on_text is not None:
            on_text("streamed ")
        return answer(request.question)

    def retrieve(self, question: QueryRequest, **options: Any) -> Retrieval:
        self._record("retrieve", question.query)
        return Retrieval(query=question.query, results=[], embedder="e", reranker="r", trace_id="t")

    def verify(self, *, sample: int | None = None, pause: Any = None, **_: Any) -> VerifyReport:
        self._record("verify", sample)
        return VerifyReport(ok=True, drift={})

    def files(self, *, state: Any = None, paths: Any = ()) -> list[FileRecord]:
        self._record("files", tuple(state or ()))
        return [RECORD]

    def file(self, doc_id: str) -> FileDetail:
        self._record("file", doc_id)
        return FileDetail(record=RECORD, chunks=[])

    def fields(self) -> list[FieldInfo]:
        self._record("fields")
        return [FieldInfo(name="tags", type="keywords", docs=1, examples=("finance",))]

    def log(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        self._record("log", limit)
        return [{"query": "q"}]

    def eval_reports(self) -> list[dict[str, Any]]:
        self._record("eval_reports")
        return []

    def follow(self, wait_s: float) -> Followed:
        self._record("follow")
        outcome = DocOutcome(doc_id="acme:a.md")
        return Followed({"stale": 0}, iter([outcome]))

    def snapshot(self) -> SnapshotInfo:
        self._record("snapshot")
        return SNAPSHOT

    def snapshots(self) -> list[SnapshotInfo]:
        self._record("snapshots")
        return [SNAPSHOT]

    def snapshot_file(self, snapshot_id: str) -> Path:
        self._record("snapshot_file", snapshot_id)
        return Path(__file__)

    def reindex_status(self) -> ReindexStatus:
        self._record("reindex_status")
        return REINDEX

    def reindex_start(self, embedder: str, **_: Any) -> ReindexStatus:
        self._record("reindex_start", embedder)
        return REINDEX

    def reindex_run(self, on_progress: Any = None) -> ReindexStatus:
        self._record("reindex_run")
        return REINDEX

    def reindex_promote(self, **options: Any) -> ReindexStatus:
        self._record("reindex_promote", options.get("eval_split"))
        return REINDEX

    def reindex_rollback(self) -> ReindexStatus:
        self._record("reindex_rollback")
        return REINDEX

    def reindex_cleanup(self, *, confirm: bool = False) -> ReindexStatus:
        self._record("reindex_cleanup", confirm)
        return REINDEX

    def reindex_abort(self) -> ReindexStatus:
        self._record("reindex_abort")
        return REINDEX

    def close(self) -> None:
        pass

    def __enter__(self) -> RecordingIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def app(tmp_path: Path) -> tuple[TestClient, RecordingIndex]:
    settings = Settings(
        data_dir=tmp_path,
        server={
            "api_keys": {"key-acme": "acme", "key-admin": "ops"},
            "admin_api_keys": ["key-admin"],
        },
    )
    index = RecordingIndex()
    assert isinstance(index, ServedService)  # the fake is the protocol the routes call
    return TestClient(create_app(Serving(settings, index))), index


ROUTES: list[tuple[str, str, dict[str, Any] | None, dict[str, str], Call]] = [
    # router "service"
    ("GET", "/v1/health", None, TENANT, ("health", None, ())),
    ("GET", "/v1/ready", None, TENANT, ("readiness", None, ())),
    # router "query"
    ("POST", "/v1/query", {"query": "why?"}, TENANT, ("query_async", ("acme",), ("why?",))),
    ("POST", "/v1/retrieve", {"query": "why?"}, TENANT, ("retrieve", ("acme",), ("why?",))),
    ("POST", "/v1/chat", {"messages": CHAT}, TENANT, ("chat_async", ("acme",), (3, "why?"))),
    # router "completions"
    ("POST", "/v1/chat/completions", {"messages": CHAT}, TENANT,
     ("chat_async", ("acme",), (3, "why?"))),
    ("GET", "/v1/models", None, TENANT, ("readiness", ("acme",), ())),
    # router "index"
    ("GET", "/v1/status", None, TENANT, ("status", ("acme",), ())),
    ("GET", "/v1/files?state=dead", None, TENANT, ("files", ("acme",), (("dead",),))),
    ("GET", "/v1/files/acme:a.md", None, TENANT, ("file", ("acme",), ("acme:a.md",))),
    ("GET", "/v1/fields", None, TENANT, ("fields", ("acme",), ())),
    ("GET", "/v1/verify?sample=3", None, ADMIN, ("verify", None, (3,))),
    ("GET", "/v1/log?limit=2", None, ADMIN, ("log", None, (2,))),
    ("GET", "/v1/events", None, TENANT, ("follow", ("acme",), ())),
    # router "quality"
    ("GET", "/v1/eval", None, ADMIN, ("eval_reports", None, ())),
    # router "reindex"
    ("POST", "/v1/admin/reindex/status", None, ADMIN, ("reindex_status", None, ())),
    ("POST", "/v1/admin/reindex/start", {"embedder": "static"}, ADMIN,
     ("reindex_start", None, ("static",))),
    ("POST", "/v1/admin/reindex/run", None, ADMIN, ("reindex_run", None, ())),
    ("POST", "/v1/admin/reindex/promote", {"eval_split": "dev"}, ADMIN,
     ("reindex_promote", None, ("dev",))),
    ("POST", "/v1/admin/reindex/rollback", None, ADMIN, ("reindex_rollback", None, ())),
    ("POST", "/v1/admin/reindex/cleanup", {"confirm": True}, ADMIN,
     ("reindex_cleanup", None, (True,))),
    ("POST", "/v1/admin/reindex/abort", None, ADMIN, ("reindex_abort", None, ())),
    # router "snapshots"
    ("POST", "/v1/snapshots", None, ADMIN, ("snapshot", None, ())),
    ("GET", "/v1/snapshots", None, ADMIN, ("snapshots", None, ())),
    ("GET", "/v1/snapshots/s1", None, ADMIN, ("snapshot_file", None, ("s1",))),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "key", "expected"), ROUTES)
def test_each_route_is_one_service_call_with_the_callers_tenants(
    app: tuple[TestClient, RecordingIndex],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    key: dict[str, str],
    expected: Call,
) -> None:
    client, index = app
    got = client.request(method, path, json=body, headers=key)
    assert got.status_code == 200, got.text
    assert index.calls == [expected]


def test_every_api_route_is_covered_here(app: tuple[TestClient, RecordingIndex]) -> None:
    """A route added without a line above fails here."""
    client, _ = app
    paths = set(client.get("/openapi.json").json()["paths"])
    covered = {path.split("?")[0] for _, path, *_ in ROUTES}
    named = {"{doc_id}": "acme:a.md", "{snapshot_id}": "s1"}
    assert {
        next((p.replace(k, v) for k, v in named.items() if k in p), p) for p in paths
    } == covered


def test_a_streamed_answer_is_one_call_and_ends_with_its_answer(
    app: tuple[TestClient, RecordingIndex],
) -> None:
    client, index = app
    got = client.post("/v1/query", json={"query": "why?", "stream": True}, headers=TENANT)
    frames = [f for f in got.text.split("\n\n") if f]
    assert frames[0] == 'event: text\ndata: {"delta": "streamed "}'
    assert frames[-1].startswith("event: answer\ndata: ")
    assert json.loads(frames[-1].split("data: ", 1)[1])["query"] == "why?"
    assert index.calls == [("query_async", ("acme",), ("why?",))]


def test_a_streamed_chat_is_one_call_and_ends_with_its_answer(
    app: tuple[TestClient, RecordingIndex],
) -> None:
    client, index = app
    got = client.post("/v1/chat", json={"messages": CHAT, "stream": True}, headers=TENANT)
    frames = [f for f in got.text.split("\n\n") if f]
    assert frames[0] == 'event: text\ndata: {"delta": "streamed "}'
    assert json.loads(frames[-1].split("data: ", 1)[1])["query"] == "why?"
    assert index.calls == [("chat_async", ("acme",), (3, "why?"))]


def test_a_tenant_key_is_refused_the_admin_routes_before_any_call(
    app: tuple[TestClient, RecordingIndex],
) -> None:
    client, index = app
    for method, path, body, key, _ in ROUTES:
        if key is ADMIN:
            assert client.request(method, path, json=body, headers=TENANT).status_code == 403
    assert client.get("/v1/status").status_code == 401  # no key at all
    assert index.calls == []
