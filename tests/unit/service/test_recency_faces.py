"""`prefer_recent` end to end: two notes that say the same but for their numbers, one updated
last month and one three years ago; with the preference, the newer one ranks first on the
embedded client, over HTTP and from the CLI (`--prefer-recent`), and a preference on a field
that is no datetime field is refused (exit 2, a 422)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragstream import api
from ragstream.cli import app, main
from ragstream.client import Client
from ragstream.core.answers import RecencyPreference
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings, load_settings
from tests.harness.helpers import served_over_http

NOTE = "---\nupdated: {date}\n---\n# Pump\n\nThe pump delivers {rate} litres a minute.\n"
# the older note says it twice: without the preference it ranks first
OLD = (
    "---\nupdated: 2023-11-01\n---\n# Pump\n\n"
    "The pump delivers 40 litres a minute: a minute of pumping moves 40 litres.\n"
)
QUESTION = "How many litres a minute does the pump deliver?"
YEARLY = RecencyPreference(half_life="365d", field="updated")


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("recency")
    docs = root / "docs"
    docs.mkdir()
    (docs / "pump-2023.md").write_text(OLD)
    (docs / "pump-2026.md").write_text(NOTE.format(date="2026-11-01", rate=55))
    s = load_settings(root / "data", embedder="static")
    assert api.sync([docs], settings=s).docs_seen == 2
    return s


def first(results: list[object]) -> str:
    return str(getattr(results[0], "doc_id")).rpartition(":")[2]  # noqa: B009


@pytest.fixture
def url(settings: Settings) -> Iterator[str]:
    with served_over_http(settings) as address:
        yield address


def test_the_newer_note_ranks_first_with_the_preference(settings: Settings) -> None:
    with Client(data_dir=settings.data_dir) as client:
        preferred = client.retrieve(QUESTION, k=2, prefer_recent=YEARLY).results
        plain = client.retrieve(QUESTION, k=2).results
        with pytest.raises(InvalidRequestError, match="nearest: updated"):
            client.retrieve(QUESTION, prefer_recent={"half_life": "30d", "field": "updatd"})
        with pytest.raises(InvalidRequestError, match="not a datetime"):
            client.retrieve(QUESTION, prefer_recent={"half_life": "30d", "field": "extension"})
    assert first(preferred) == "pump-2026.md" and len(preferred) == 2
    assert first(plain) == "pump-2023.md"  # the preference is what put the newer first
    cli = CliRunner().invoke(
        app,
        ["query", QUESTION, "--no-generate", "--json", "--data-dir", str(settings.data_dir),
         "--prefer-recent", "365d", "--recent-field", "updated"],
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["results"][0]["doc_id"].endswith("pump-2026.md")
    with pytest.raises(SystemExit) as bad:
        main(["query", QUESTION, "--data-dir", str(settings.data_dir), "--prefer-recent", "soon"])
    assert bad.value.code == 2


def test_over_http_the_same(settings: Settings, url: str, tmp_path: Path) -> None:
    with Client(url=url) as client:
        preferred = client.retrieve(QUESTION, k=2, prefer_recent=YEARLY).results
        answer = client.query(QUESTION, k=2, prefer_recent=YEARLY)
        with pytest.raises(InvalidRequestError, match="nearest: updated"):
            client.retrieve(QUESTION, prefer_recent={"half_life": "30d", "field": "updatd"})
    assert first(preferred) == "pump-2026.md"
    # the answer leads with the newer value (the older copy may follow it, cited as such)
    stale = answer.text.find("40")
    assert "55" in answer.text and (stale == -1 or stale > answer.text.index("55")), answer.text
