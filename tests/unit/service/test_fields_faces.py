"""The catalogue of metadata fields on every face: `Client.fields` embedded, `GET /v1/fields`,
`Client.fields` and `AsyncClient.fields` over HTTP, `ragstream fields --json`, the MCP
`fields` tool; the served index scoped to a tenant sees its own documents' fields only; and
a filter that names a field no document carries is refused on each face
(`InvalidRequestError`, a 422, exit 2), naming the nearest field, while a known one narrows
the results."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from ragstream import api
from ragstream.cli import app, main
from ragstream.client import AsyncClient, Client
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import FieldInfo
from ragstream.core.settings import Settings, load_settings
from ragstream.http import Serving, serving
from ragstream.mcp.schemas import FieldsResult, NoArgs
from ragstream.mcp.tools import TOOLS
from ragstream.service.served import ServedIndex, open_engine

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


@pytest.fixture
def url(settings: Settings) -> Iterator[str]:
    """The data dir served over HTTP (recorded in it: `--data-dir` clients ask the server)."""
    with (
        open_engine(settings) as (engine, maintainer),
        serving(Serving(settings, ServedIndex(engine, maintainer)), "127.0.0.1", 0) as address,
    ):
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
