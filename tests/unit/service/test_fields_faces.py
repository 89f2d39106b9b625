"""The catalogue of metadata fields on every face: `Client.fields` embedded, `GET /v1/fields`,
`Client.fields` and `AsyncClient.fields` over HTTP, `ragstream fields --json`, the MCP
`fields` tool; the served index scoped to a tenant sees its own documents' fields only; and
a filter that names a field no document carries is refused on each face
(`InvalidRequestError`, a 422, exit 2), naming the nearest field, while a known one narrows
the results; and one filter, in its text and its JSON form, retrieves the same chunks on
every face (embedded and HTTP clients, `AsyncClient`, `POST /v1/retrieve`, the MCP `search`
tool in process and over `/mcp`, the CLI's `--where`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ragstream import api
from ragstream.cli import app, main
from ragstream.client import AsyncClient, Client
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import FieldInfo
from ragstream.core.settings import Settings, load_settings
from ragstream.mcp.schemas import FieldsResult, NoArgs, SearchArgs, SearchResult
from ragstream.mcp.server import tool_list
from ragstream.mcp.tools import TOOLS
from ragstream.service.served import ServedIndex, open_engine
from tests.harness.helpers import served_over_http
from tests.harness.mcp_client import call, http_session

BUDGET = (
    "---\ntags: [finance, q3]\nyear: 2024\ndraft: true\n---\n"
    "# Budget\n\nThe third quarter budget grew by four percent.\n"
)
ROTA = "---\ntags: [ops]\nyear: 2023\n---\n# Rota\n\nThe on-call rota changes every Monday.\n"
QUESTION = "quarter budget and the on-call rota"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Two Markdown files with front matter, synced with the static embedder."""
    root = tmp_path_factory.mktemp("fields")
    docs = root / "docs"
    docs.mkdir()
    (docs / "budget.md").write_text(BUDGET)
    (docs / "rota.md").write_text(ROTA)
    s = load_settings(root / "data", embedder="static")
    assert api.sync([docs], settings=s).docs_seen == 2
    return s


def check_catalogue(catalogue: list[FieldInfo]) -> None:
    by_name = {f.name: f for f in catalogue}
    tags, year, draft = by_name["tags"], by_name["year"], by_name["draft"]
    assert (tags.type, tags.docs) == ("keywords", 2)
    assert "finance" in tags.examples and "ops" in tags.examples
    assert tags.origins == {"front_matter": 2}
    assert (year.type, year.docs) == ("integer", 2)
    assert (draft.type, draft.docs) == ("bool", 1)
    assert [f.name for f in catalogue] == sorted(by_name)


def cli_fields(*args: str) -> list[FieldInfo]:
    result = CliRunner().invoke(app, ["fields", "--json", *args])
    assert result.exit_code == 0, result.output
    return [FieldInfo.model_validate(f) for f in json.loads(result.stdout)]


def test_the_embedded_client_the_cli_and_the_mcp_tool_list_the_fields(
    settings: Settings,
) -> None:
    with Client(data_dir=settings.data_dir) as client:
        embedded = client.fields()
        result, text = TOOLS["fields"].run(client._index, NoArgs())
    check_catalogue(embedded)
    assert isinstance(result, FieldsResult) and result.fields == embedded
    assert "tags (keywords, 2 docs): " in text and "finance" in text
    assert cli_fields("--data-dir", str(settings.data_dir)) == embedded
    table = CliRunner().invoke(app, ["fields", "--data-dir", str(settings.data_dir)])
    assert table.exit_code == 0 and "keywords" in table.stdout and "finance" in table.stdout


def test_an_embedded_filter_narrows_and_an_unknown_field_is_refused(settings: Settings) -> None:
    with Client(data_dir=settings.data_dir) as client:
        found = client.retrieve(QUESTION, k=8, filter="tags = finance")
        unfiltered = client.retrieve(QUESTION, k=8)
        with pytest.raises(InvalidRequestError, match="tags"):
            client.retrieve(QUESTION, filter="tgas = finance")
        with pytest.raises(InvalidRequestError, match="tags"):
            client.query(QUESTION, filter="tgas = finance")
    assert found.results and {r.doc_id for r in found.results} == {"docs:budget.md"}
    assert {r.doc_id for r in unfiltered.results} == {"docs:budget.md", "docs:rota.md"}


def test_the_cli_refuses_an_unknown_field_with_exit_2(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["query", QUESTION, "--no-generate", "--data-dir", str(settings.data_dir)]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--where", "tgas = x"])
    assert exited.value.code == InvalidRequestError.exit_code == 2
    assert "tags" in capsys.readouterr().err


served = served_over_http


@pytest.fixture
def url(settings: Settings) -> Iterator[str]:
    with served(settings) as address:
        yield address


async def _async_fields(url: str) -> list[FieldInfo]:
    async with AsyncClient(url) as client:
        return await client.fields()


def test_every_http_face_lists_the_same_fields(settings: Settings, url: str) -> None:
    with Client(url=url) as client:
        remote = client.fields()
    check_catalogue(remote)
    got = httpx.get(f"{url}/v1/fields", trust_env=False)
    assert got.status_code == 200
    assert [FieldInfo.model_validate(f) for f in got.json()] == remote
    assert asyncio.run(_async_fields(url)) == remote
    assert cli_fields("--url", url) == remote
    assert cli_fields("--data-dir", str(settings.data_dir)) == remote  # asks the server


def test_an_http_filter_on_an_unknown_field_is_a_422_naming_the_nearest(url: str) -> None:
    body = {"query": QUESTION, "filter": "tgas = finance"}
    got = httpx.post(f"{url}/v1/retrieve", json=body, trust_env=False)
    assert got.status_code == 422 and got.json()["code"] == "invalid_request"
    assert "tags" in got.json()["error"]
    with Client(url=url) as client:
        found = client.retrieve(QUESTION, k=8, filter="tags = finance")
        with pytest.raises(InvalidRequestError, match="tags"):
            client.retrieve(QUESTION, filter="tgas = finance")
    assert found.results and {r.doc_id for r in found.results} == {"docs:budget.md"}


def test_a_tenant_sees_only_the_fields_of_its_own_documents(settings: Settings) -> None:
    with open_engine(settings) as (engine, _):
        index = ServedIndex(engine)
        check_catalogue(index.fields())
        assert index.scoped(("someone-else",)).fields() == []


# A shelf of six notes for the faces' agreement: a filter keeps three, in an order worth
# comparing. name -> (tags, year, draft or None, body)
SHELF: dict[str, tuple[list[str], int, bool | None, str]] = {
    "ledger.md": (["finance"], 2019, None, "The ledger review closes the quarter report."),
    "rota.md": (["ops"], 2023, None, "The team rota for the quarter changes every Monday."),
    "incident.md": (
        ["ops", "security"],
        2021,
        False,
        "The incident review reports what the team learned this quarter.",
    ),
    "minutes.md": (["ops"], 2020, True, "Minutes of the team meeting on the quarter report."),
    "plan.md": (["planning"], 2024, True, "Next quarter the team writes one report a week."),
    "budget.md": (["finance", "q3"], 2024, None, "The budget report of the quarter grew."),
}
SHELF_QUESTION = "the team's quarter report and its review"
SHELF_WHERE = "(tags = ops or year < 2022) and not draft"
SHELF_JSON = {
    "operator": "AND",
    "conditions": [
        {
            "operator": "OR",
            "conditions": [
                {"field": "tags", "operator": "==", "value": "ops"},
                {"field": "year", "operator": "<", "value": 2022},
            ],
        },
        {"operator": "NOT", "conditions": [{"field": "draft", "operator": "==", "value": True}]},
    ],
}


def shelf_kept() -> set[str]:
    """The oracle: the notes SHELF_WHERE keeps, read from their front matter here."""
    return {
        f"docs:{name}"
        for name, (tags, year, draft, _) in SHELF.items()
        if ("ops" in tags or year < 2022) and draft is not True
    }


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("shelf")
    docs = root / "docs"
    docs.mkdir()
    for name, (tags, year, draft, body) in SHELF.items():
        front = f"tags: [{', '.join(tags)}]\nyear: {year}\n"
        front += "" if draft is None else f"draft: {str(draft).lower()}\n"
        (docs / name).write_text(f"---\n{front}---\n# {name[:-3].title()}\n\n{body}\n")
    s = load_settings(root / "data", embedder="static")
    assert api.sync([docs], settings=s).docs_seen == len(SHELF)
    return s


Spans = list[tuple[str, int, int]]  # (doc id, char_start, char_end) of each result, in order
K = 20  # above every chunk of either index: the unfiltered list holds every file


def spans(results: list[Any]) -> Spans:
    def get(r: Any, key: str) -> Any:
        return r[key] if isinstance(r, dict) else getattr(r, key)

    return [(get(r, "doc_id"), get(r, "char_start"), get(r, "char_end")) for r in results]


def cli_spans(question: str, where: str | None, *args: str) -> Spans:
    cmd = ["query", question, "--no-generate", "--json", "--k", str(K), *args]
    result = CliRunner().invoke(app, cmd + (["--where", where] if where else []))
    assert result.exit_code == 0, result.output
    return spans(json.loads(result.stdout)["results"])


async def _async_spans(url: str, question: str, flt: object) -> Spans:
    async with AsyncClient(url) as client:
        return spans((await client.retrieve(question, k=K, filter=flt)).results)


async def _mcp_spans(url: str, question: str, flts: list[object]) -> list[Spans]:
    async with http_session(url) as session:
        return [
            spans((await call(session, "search", query=question, k=K, filter=flt))["hits"])
            for flt in flts
        ]


FACE_CASES = {  # index fixture -> (question, text form, JSON form, oracle of the kept docs)
    "settings": (
        QUESTION,
        "tags = finance and year >= 2024",
        {
            "operator": "AND",
            "conditions": [
                {"field": "tags", "operator": "==", "value": "finance"},
                {"field": "year", "operator": ">=", "value": 2024},
            ],
        },
        {"docs:budget.md"},
    ),
    "shelf": (SHELF_QUESTION, SHELF_WHERE, SHELF_JSON, shelf_kept()),
}


@pytest.mark.parametrize("index", sorted(FACE_CASES))
def test_every_face_retrieves_the_same_chunks_for_the_same_filter(
    index: str, request: pytest.FixtureRequest
) -> None:
    """The text and the JSON form of one filter, on every face: the embedded `Client`, the
    MCP `search` tool in process and over `/mcp`, the CLI (`--data-dir`, `--url`), the HTTP
    `Client` and `AsyncClient`, and `POST /v1/retrieve`: the same chunks in the same order,
    those of the files the filter keeps (some, not all)."""
    s: Settings = request.getfixturevalue(index)
    question, where, as_json, kept = FACE_CASES[index]
    forms: list[object] = [where, as_json]
    got: dict[str, Spans] = {}
    with Client(data_dir=s.data_dir) as client:
        assert client.mode == "embedded"
        unfiltered = spans(client.retrieve(question, k=K).results)
        for i, flt in enumerate(forms):
            got[f"embedded {i}"] = spans(client.retrieve(question, k=K, filter=flt).results)
            args = SearchArgs.model_validate({"query": question, "k": K, "filter": flt})
            result, _ = TOOLS["search"].run(client._index, args)
            assert isinstance(result, SearchResult)
            got[f"mcp tool {i}"] = spans(result.hits)
    got["cli --data-dir"] = cli_spans(question, where, "--data-dir", str(s.data_dir))
    with served(s) as url:
        for i, flt in enumerate(forms):
            with Client(url=url) as remote:
                assert remote.mode == "http"
                got[f"http client {i}"] = spans(remote.retrieve(question, k=K, filter=flt).results)
            got[f"async client {i}"] = asyncio.run(_async_spans(url, question, flt))
            body = {"query": question, "k": K, "filter": flt}
            reply = httpx.post(f"{url}/v1/retrieve", json=body, trust_env=False, timeout=60)
            assert reply.status_code == 200, reply.text
            got[f"POST /v1/retrieve {i}"] = spans(reply.json()["results"])
        for i, hits in enumerate(asyncio.run(_mcp_spans(url, question, forms))):
            got[f"mcp /mcp {i}"] = hits
        got["cli --url"] = cli_spans(question, where, "--url", url)
        assert cli_spans(question, None, "--url", url) == unfiltered
    everything = {d for d, *_ in unfiltered}
    assert len(everything) == len(list(s.data_dir.parent.joinpath("docs").glob("*.md")))
    reference = got["embedded 0"]
    assert {d for d, *_ in reference} == kept and kept < everything
    assert {face: spans_ for face, spans_ in got.items() if spans_ != reference} == {}


def test_a_tenant_s_filter_error_names_no_field_of_another_tenant(settings: Settings) -> None:
    """The catalogue a tenant lists holds its own documents' fields only; the error a
    mistyped filter gets must not name a field that catalogue hides (`tags` is carried by
    documents of the tenant "" alone)."""
    with open_engine(settings) as (engine, _):
        other = ServedIndex(engine).scoped(("someone-else",))
        assert other.fields() == []
        with pytest.raises(InvalidRequestError) as refused:
            other.retrieve(QUESTION, filter="tgas = finance")
    assert "tags" not in str(refused.value)


def test_the_mcp_tools_advertise_the_text_form_of_a_filter() -> None:
    """A host that checks arguments against a tool's `inputSchema` may send what the
    description offers: `filter` as text."""
    for tool in tool_list():
        if tool.name in ("search", "ask"):
            prop = tool.input_schema["properties"]["filter"]
            kinds = prop.get("anyOf", [prop])
            assert any(k.get("type") == "string" for k in kinds), (tool.name, prop)
