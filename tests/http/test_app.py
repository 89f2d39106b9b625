"""The HTTP app in process (`TestClient(create_app(...))`, no socket): authentication and
tenants, the body-size checks, every error body, and Server-Sent Events framing. The
real-uvicorn path is tests/http/test_http_api.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import MAX_BODY, Serving, create_app
from ragstream.service.served import ServedIndex, open_engine

KEYS = {"k-acme": "acme", "k-initech": "initech", "k-admin": "ops"}
ADMIN = {"Authorization": "Bearer k-admin"}


def app_over(settings: Settings) -> TestClient:
    return TestClient(create_app(Serving(settings)), raise_server_exceptions=False)


@pytest.fixture
def starting(tmp_path: Path) -> TestClient:
    """A server whose index is not open yet, with API keys."""
    s = Settings(data_dir=tmp_path, server={"api_keys": KEYS, "admin_api_keys": ["k-admin"]})
    return app_over(s)


def test_liveness_answers_while_readiness_waits(starting: TestClient) -> None:
    assert starting.get("/v1/health").json() == {"ok": True, "ready": False}
    ready = starting.get("/v1/ready")
    assert ready.status_code == 503 and ready.json()["ready"] is False


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer nope"}, 401, "unauthorized"),
        ({"Authorization": "Bearer k-acme"}, 503, "not_ready"),
    ],
)
def test_a_key_is_checked_before_anything_else(
    starting: TestClient, headers: dict[str, str], status: int, code: str
) -> None:
    got = starting.get("/v1/status", headers=headers)
    assert (got.status_code, got.json()["code"]) == (status, code)
    assert got.json()["error"]


@pytest.mark.parametrize("path", ["/v1/verify", "/v1/eval", "/v1/log"])
def test_admin_routes_refuse_a_tenant_key(starting: TestClient, path: str) -> None:
    got = starting.get(path, headers={"Authorization": "Bearer k-acme"})
    assert (got.status_code, got.json()["code"]) == (403, "forbidden")


def test_a_reindex_command_needs_an_admin_key(starting: TestClient) -> None:
    tenant = starting.post("/v1/admin/reindex/status", headers={"Authorization": "Bearer k-acme"})
    assert tenant.status_code == 403
    admin = starting.post("/v1/admin/reindex/status", headers=ADMIN)
    assert (admin.status_code, admin.json()["code"]) == (503, "not_ready")


def test_a_body_without_its_length_is_411_and_too_large_is_413(starting: TestClient) -> None:
    chunked = starting.post("/v1/query", content=iter([b'{"query": "x"}']), headers=ADMIN)
    assert (chunked.status_code, chunked.json()["code"]) == (411, "invalid_request")
    big = starting.post("/v1/query", content=b"x" * (MAX_BODY + 1), headers=ADMIN)
    assert big.status_code == 413 and "too large" in big.json()["error"]


def test_an_invalid_body_is_422_with_details(starting: TestClient) -> None:
    got = starting.post("/v1/query", json={"query": "x", "k": 0}, headers=ADMIN)
    body = got.json()
    assert got.status_code == 422 and body["code"] == "invalid_request"
    assert body["details"][0]["loc"][-1] == "k"


def test_an_unknown_route_is_a_json_404(starting: TestClient) -> None:
    got = starting.get("/v1/nothing-here", headers=ADMIN)
    assert got.status_code == 404
    assert got.json() == {"error": "no such endpoint: /v1/nothing-here", "code": "not_found"}


def test_the_live_feed_is_404_outside_watch_serve(starting: TestClient) -> None:
    got = starting.get("/v1/events", headers=ADMIN)
    assert (got.status_code, got.json()["code"]) == (404, "not_found")


def test_the_version_is_the_packages(starting: TestClient) -> None:
    from importlib.metadata import version

    assert starting.get("/openapi.json").json()["info"]["version"] == version("ragstream")


# ---- over a real index: two tenants, SSE, and no leak through any route -------------------
@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("tenants")
    texts = {
        "acme": "Acme valves are replaced yearly.",
        "initech": "TPS reports are due on Fridays.",
    }
    for name, text in texts.items():
        (root / name).mkdir()
        (root / name / f"{name}.md").write_text(f"# {name.title()}\n\n{text}\n")
    sources = [FolderConfig(name=n, root=root / n, tenant=n) for n in ("acme", "initech")]
    s = Settings(
        data_dir=root / "data",
        sources=sources,
        server={"api_keys": KEYS, "admin_api_keys": ["k-admin"]},
    )
    api.sync([], settings=s)
    with open_engine(s) as (engine, maintainer):
        yield TestClient(create_app(Serving(s, ServedIndex(engine, maintainer))))


@pytest.mark.slow
def test_a_streamed_answer_is_text_frames_then_one_answer(tenants: TestClient) -> None:
    body = {"query": "When are TPS reports due?", "stream": True}
    initech = {"Authorization": "Bearer k-initech"}
    with tenants.stream("POST", "/v1/query", json=body, headers=initech) as got:
        assert got.headers["content-type"].startswith("text/event-stream")
        frames = "".join(got.iter_text()).split("\n\n")
    events = [dict(line.split(": ", 1) for line in f.splitlines()) for f in frames if f]
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "answer" and set(kinds[:-1]) <= {"text"}
    answer = json.loads(events[-1]["data"])
    streamed = "".join(json.loads(e["data"])["delta"] for e in events[:-1])
    assert answer["refusal"] is None, answer["refusal"]
    assert streamed == answer["text"] and "Friday" in answer["text"]


ROUTES = st.sampled_from(["status", "files", "file", "query", "retrieve"])
QUESTIONS = st.sampled_from(
    ["When are TPS reports due?", "How often are valves replaced?", "acme", "initech", "reports"]
)


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(route=ROUTES, question=QUESTIONS, who=st.sampled_from(["acme", "initech"]))
def test_a_tenant_key_never_sees_another_tenants_doc_id(
    tenants: TestClient, route: str, question: str, who: str
) -> None:
    other = "initech" if who == "acme" else "acme"
    headers = {"Authorization": f"Bearer k-{who}"}
    if route in ("status", "files"):
        got = tenants.get(f"/v1/{route}", headers=headers)
    elif route == "file":  # the same answer as for a file that does not exist
        theirs = tenants.get(f"/v1/files/{other}:{other}.md", headers=headers)
        nobodys = tenants.get(f"/v1/files/{other}:none.md", headers=headers)
        assert theirs.status_code == nobodys.status_code == 404
        assert theirs.json()["error"].replace(f"{other}.md", "none.md") == nobodys.json()["error"]
        return
    else:
        got = tenants.post(f"/v1/{route}", json={"query": question}, headers=headers)
    assert f"{other}:" not in got.text and f"{other}.md" not in got.text
