"""Every `--json` of the CLI is exactly one JSON document on stdout (progress and notices go
to stderr), run in process on a two-file index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ragstream.cli import app

pytestmark = pytest.mark.slow  # an index is built (static embedder) and the query models load


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("json")
    docs, data = root / "docs", root / "data"
    docs.mkdir()
    (docs / "leave.md").write_text("# Leave\n\nStaff take their annual leave in August.\n")
    (docs / "valves.md").write_text("# Valves\n\nValve 17 was replaced after corrosion.\n")
    return docs, data


def run_json(*args: str) -> Any:
    """The command's stdout parsed as one JSON document (it fails on anything else)."""
    result = CliRunner().invoke(app, [*args, "--json"], env={"RAGSTREAM_EMBEDDER": "static"})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_json_command_prints_one_document(index: tuple[Path, Path]) -> None:
    docs, data = index
    d = ["--data-dir", str(data)]
    synced = run_json("sync", str(docs), *d)
    assert synced["docs_seen"] == 2 and synced["dead_letters"] == []
    assert run_json("status", *d)["docs"] == 2
    assert run_json("verify", *d)["ok"] is True
    ledger = run_json("files", *d)
    assert sorted(r["doc_id"].split(":", 1)[1] for r in ledger) == ["leave.md", "valves.md"]
    one = run_json("file", ledger[0]["doc_id"], *d)
    assert one["record"]["doc_id"] == ledger[0]["doc_id"] and one["chunks"]
    found = run_json("query", "Which valve was replaced?", "--no-generate", *d)
    assert found["results"][0]["path"].endswith("valves.md")
    answer = run_json("query", "Which valve was replaced?", *d)
    assert answer["refusal"] is None and "Valve 17" in answer["text"]
    assert run_json("log", *d)[-1]["query"] == "Which valve was replaced?"
    assert run_json("reindex", "status", *d)["open"] is False
    assert run_json("gc", *d) == {"vectors": 0, "lexical": 0}
    settings = {row["name"]: row for row in run_json("config", *d)}
    assert (
        json.loads(settings["embedder"]["value"]) == "static"
        and settings["embedder"]["source"] == "env RAGSTREAM_EMBEDDER"
    )
