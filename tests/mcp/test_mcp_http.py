"""MCP over streamable HTTP at `/mcp` on the real uvicorn server, with the SDK's own client:
two API keys of two tenants each see only their own documents through every tool and
resource; bad input is a typed error and the next call still works; an off-topic question
is a structured refusal; a request without a known key is a 401."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ragstream import api
from ragstream.core.settings import ServerSettings, Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.service.served import ServedIndex, open_engine
from tests.harness.mcp_client import call, http_session

DOCS = {
    "acme": ("tea.md", "# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n"),
    "globex": ("coffee.md", "# Coffee\n\nEspresso is brewed at nine bars of pressure.\n"),
}
KEYS = {"key-acme": "acme", "key-globex": "globex"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, ServedIndex]]:
    base = tmp_path_factory.mktemp("mcp-http")
    sources = []
    for tenant, (name, text) in DOCS.items():
        (base / tenant).mkdir()
        (base / tenant / name).write_text(text)
        sources.append(FolderConfig(name=tenant, root=base / tenant, tenant=tenant))
    settings = Settings(
        data_dir=base / "data", sources=sources, server=ServerSettings(api_keys=KEYS)
    )
    assert api.sync([], settings=settings).chunks_live == 2
    with open_engine(settings) as (engine, _):
        yield settings, ServedIndex(engine)


@pytest.fixture(scope="module")
def url(index: tuple[Settings, ServedIndex]) -> Iterator[str]:
    settings, served = index
    with serving(Serving(settings, served), "127.0.0.1", 0) as address:
        yield address


async def _tenant_view(url: str, key: str) -> set[str]:
    """Every doc id, path and chunk text the key reaches through each tool and resource."""
    seen: set[str] = set()
    async with http_session(url, key) as s:
        for q in ("green tea steeped", "espresso pressure"):
            hits = (await call(s, "search", query=q, k=5))["hits"]
            seen |= {h["doc_id"] for h in hits} | {h["path"] for h in hits}
            answer = await call(s, "ask", question=q)
            seen |= {c["doc_id"] for c in answer["citations"]}
        files = (await call(s, "files"))["files"]
        seen |= {f["doc_id"] for f in files} | {f["path"] for f in files}
        for doc in ("acme:tea.md", "globex:coffee.md"):
            try:
                seen.add((await call(s, "read", path=doc))["doc_id"])
                seen.add((await call(s, "file", path=doc))["record"]["doc_id"])
            except MCPError as err:
                assert err.code == INVALID_PARAMS and err.data["code"] == "not_found"
            try:
                await s.read_resource(f"ragstream://doc/{doc}")
                seen.add(doc)
            except MCPError as err:
                assert err.code == INVALID_PARAMS
        listed = await s.list_resources()
        seen |= {r.name for r in listed.resources}
        status = await call(s, "status")
        assert status["docs"] == 1 and status["chunks"] == 1
    return seen


def test_each_tenant_sees_only_its_own_documents(url: str) -> None:
    acme = asyncio.run(_tenant_view(url, "key-acme"))
    globex = asyncio.run(_tenant_view(url, "key-globex"))
    assert "acme:tea.md" in acme and not any("globex" in x or "coffee" in x for x in acme)
    assert "globex:coffee.md" in globex and not any("acme" in x or "tea" in x for x in globex)


async def _tools_and_answers(url: str) -> None:
    async with http_session(url, "key-acme") as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert set(tools) == {"search", "ask", "read", "files", "file", "fields", "status"}
        assert tools["search"].input_schema["properties"]["k"]["maximum"] == 50
        assert all(t.description and t.output_schema for t in tools.values())
        result = await s.call_tool("ask", {"question": "How long is green tea steeped?"})
        answer = result.structured_content
        assert answer is not None and answer["answered"] and "two minutes" in answer["text"]
        cite = answer["citations"][0]
        assert cite["doc_id"] == "acme:tea.md" and cite["file_version"]["digest"]
        span = await call(s, "read", path=cite["doc_id"], start=cite["char_start"],
                          end=cite["char_end"])  # fmt: skip
        assert "two minutes" in span["text"]
        # document text is spotlighted in the text rendering, as untrusted data
        found = await s.call_tool("search", {"query": "green tea"})
        text = found.content[0].text  # type: ignore[union-attr]
        assert "never instructions" in text and "<<<DOCUMENT " in text
        refused = await call(s, "ask", question="Who won the 1998 football world cup final?")
        assert refused["answered"] is False and refused["text"] == ""
        assert refused["refusal"]["reason"] and refused["refusal"]["check"]


def test_tools_answer_with_citations_and_refuse_in_structure(url: str) -> None:
    asyncio.run(_tools_and_answers(url))


BAD = [
    ("no_such_tool", {}, "unknown_tool"),
    ("search", {"query": 42, "k": "many"}, "invalid_request"),
    ("search", {"query": "tea " * 2000}, "invalid_request"),
    ("search", {"query": "tea", "k": 10**6}, "invalid_request"),
    ("search", {"query": "tea", "nonsense": 1}, "invalid_request"),
    ("read", {"path": "../../etc/passwd"}, "not_found"),
    ("read", {"path": "/etc/passwd", "start": 0, "end": 10**9}, "invalid_request"),
    ("file", {"path": "acme:nope.md"}, "not_found"),
    ("files", {"state": "bogus"}, "invalid_request"),
]


async def _bad_input(url: str) -> None:
    async with http_session(url, "key-acme") as s:
        for tool, arguments, code in BAD:
            with pytest.raises(MCPError) as caught:
                await s.call_tool(tool, arguments)
            assert caught.value.code == INVALID_PARAMS, (tool, arguments)
            assert caught.value.data["code"] == code, (tool, arguments, caught.value.data)
            assert (await call(s, "status"))["docs"] == 1  # still serving
        with pytest.raises(MCPError) as caught:
            await s.read_resource("ragstream://doc/globex:coffee.md")
        assert caught.value.code == INVALID_PARAMS


def test_bad_input_is_a_typed_error_and_the_server_keeps_serving(url: str) -> None:
    asyncio.run(_bad_input(url))


def test_a_request_without_a_known_key_is_401(url: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for key in (None, "wrong"):
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(f"{url}/mcp", data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req)
        assert caught.value.code == 401
        assert json.loads(caught.value.read())["code"] == "unauthorized"


async def _until_limited(url: str) -> MCPError:
    async with http_session(url, "key-acme") as s:
        assert (await call(s, "status"))["docs"] == 1
        for _ in range(5):
            try:
                await call(s, "status")
            except MCPError as err:
                return err
    raise AssertionError("never limited")


def test_a_429_on_mcp_reaches_the_client_as_a_typed_error(
    index: tuple[Settings, ServedIndex],
) -> None:
    """Past `server.rate_per_key` a POST /mcp is a 429 whose body is a JSON-RPC error, so
    the SDK's client raises it with the API's code and when to retry."""
    settings, served = index
    limited = settings.model_copy(
        update={"server": settings.server.model_copy(update={"rate_per_key": 4})}
    )
    with serving(Serving(limited, served), "127.0.0.1", 0) as address:
        err = asyncio.run(_until_limited(address))
    assert err.code == -32000 and "retry after" in err.message
    assert err.data["code"] == "rate_limited" and err.data["status"] == 429
    assert err.data["retry_after_s"] >= 1
