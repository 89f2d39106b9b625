"""Every ingest stage opens a span with the counts that explain it."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.core.telemetry import install_exporter


def test_ingest_spans_carry_counts(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    install_exporter(exporter)
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nAlpha paragraph about spans.\n\nSecond paragraph here.\n")
    api.sync([root], settings=Settings(data_dir=tmp_path / "data"))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for stage in ("parse", "chunk", "diff", "embed", "write"):
        assert f"ragstream.ingest.{stage}" in spans, stage
    assert spans["ragstream.ingest.parse"].attributes["docs_in"] == 1
    assert spans["ragstream.ingest.chunk"].attributes["chunks_out"] >= 1
    embed = spans["ragstream.ingest.embed"].attributes
    assert embed["reembedded"] >= 1 and embed["reused"] == 0
    assert spans["ragstream.ingest.write"].attributes["upserts"] >= 1
