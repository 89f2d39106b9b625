"""Every query is appended to a size-rotated JSON-lines log that `ragstream log` reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragstream import api
from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.core.answers import QueryFilters, QueryRequest
from ragstream.core.settings import Settings
from ragstream.query.engine import QueryEngine
from ragstream.service import ingest


def test_rotation_keeps_order_and_drops_only_the_oldest(tmp_path: Path) -> None:
    log = RetrievalLog(tmp_path / "r.jsonl", max_bytes=200, keep=3)
    for i in range(40):
        log.append({"i": i, "pad": "x" * 30})
    kept = [e["i"] for e in log.read()]
    assert kept == list(range(kept[0], 40)) and 0 < kept[0] < 40
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "r.jsonl", "r.jsonl.1", "r.jsonl.2", "r.jsonl.3"
    ]  # fmt: skip
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())


@pytest.mark.slow
def test_queries_are_logged_and_readable(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    settings = Settings(data_dir=tmp_path / "data")
    api.sync([root], settings=settings)
    with QueryEngine.open(settings) as engine:
        first = engine.answer(QueryRequest(query="How hot should green tea water be?"))
        second = engine.answer(
            QueryRequest(query="banana bread", filters=QueryFilters(path_prefix="notes:")),
            tenants=("t1",),
        )
    entries = ingest.query_log(settings=settings)
    assert [e["trace_id"] for e in entries] == [first.trace_id, second.trace_id]
    assert entries[0]["retrieved"][0]["doc_id"] == "notes:tea.md"
    assert entries[0]["cited"] and entries[0]["refusal"] is None
    assert entries[0]["embedder"] == first.embedder
    assert entries[1]["tenants"] == ["t1"] and entries[1]["filters"] == {"path_prefix": "notes:"}
    assert entries[1]["refusal"] == "insufficient_evidence"
    out = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "log", "--data-dir", str(settings.data_dir),
         "--json", "--limit", "1"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert [e["trace_id"] for e in json.loads(out.stdout)] == [second.trace_id]
