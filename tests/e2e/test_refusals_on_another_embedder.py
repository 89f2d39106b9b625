"""Refusals on another embedder's cosine scale: an index built with the static preset has
its cosines read on the scale of the embedder the floors were fitted on (MiniLM-L6),
through a map measured on its own chunks the first time a query needs it, kept in the data
dir, and measured again once the collection has doubled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.client import Client
from ragstream.core.jsonfile import write_json_atomic
from ragstream.core.settings import Settings
from ragstream.operators.embed import load_embedder
from tests.harness.helpers import copy_docs

FILES = [
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_plugins.md",
    "md/docling_concepts_architecture.md",
    "html/python311_tutorial_interactive.html",
]
ANSWERABLE = "Which chunker should I use if I want to keep lines of code or logs intact?"


def settings_for(data_dir: Path, embedder: str, **query: object) -> Settings:
    return Settings(data_dir=data_dir, embedder=embedder, query={"log_queries": False, **query})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> Path:
    return copy_docs(shared_docs, FILES, tmp_path_factory.mktemp("scale") / "docs")


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("static-data")
    report = api.sync([folder], settings=settings_for(data, "static"))
    assert report.chunks_live >= 8
    yield data


def gate_spans(spans: InMemorySpanExporter) -> list[dict[str, object]]:
    return [
        dict(s.attributes or {})
        for s in spans.get_finished_spans()
        if s.name == "ragstream.query.gate"
    ]


def test_a_static_index_is_read_on_minilms_scale_measured_on_its_own_chunks(
    static_dir: Path, spans: InMemorySpanExporter
) -> None:
    settings = settings_for(static_dir, "static")
    static, minilm = load_embedder("static"), load_embedder("minilm-l6")
    kept = settings.scales_dir / f"{static.version.slug}.json"
    spans.clear()
    with Client(settings=settings) as client:
        answer = client.query(ANSWERABLE)
        assert answer.refusal is None and answer.citations
        assert any("chunking" in c.path for c in answer.citations)
        count = client.status().chunks_live
    scale = json.loads(kept.read_text())
    assert scale["reference"] == minilm.version.slug and scale["chunks"] == count
    assert len(scale["knots"]) >= 10 and scale["pairs"] > count
    (gate,) = gate_spans(spans)
    raw, read = float(gate["best_raw"]), float(gate["best_score"])  # type: ignore[arg-type]
    assert read != raw  # the floor read the mapped cosine

    spans.clear()
    with Client(settings=settings_for(static_dir, "static", cosine_scale=False)) as client:
        client.query(ANSWERABLE)
    (gate,) = gate_spans(spans)
    assert gate["best_raw"] == gate["best_score"] == raw


def test_a_kept_scale_is_read_back_and_measured_again_once_the_index_doubled(
    static_dir: Path,
) -> None:
    settings = settings_for(static_dir, "static")
    kept = settings.scales_dir / f"{load_embedder('static').version.slug}.json"
    with Client(settings=settings) as client:
        client.query(ANSWERABLE)
        count = client.status().chunks_live
    scale = json.loads(kept.read_text())
    marked = {**scale, "knots": [[0.0, 0.0], [1.0, 0.5]]}  # a scale only this test wrote
    write_json_atomic(kept, marked)
    with Client(settings=settings) as client:
        client.query(ANSWERABLE)
    assert json.loads(kept.read_text()) == marked  # read back, not measured again
    write_json_atomic(kept, {**marked, "chunks": count // 2})
    with Client(settings=settings) as client:
        client.query(ANSWERABLE)
    again = json.loads(kept.read_text())
    assert again["chunks"] == count and again["knots"] == scale["knots"]  # the same sample
    write_json_atomic(kept, {"knots": "torn"})  # no scale: measured again, never fatal
    with Client(settings=settings) as client:
        assert client.query(ANSWERABLE).refusal is None
    assert json.loads(kept.read_text())["knots"] == scale["knots"]


def test_the_reference_embedder_reads_its_own_cosines(tmp_path: Path, folder: Path) -> None:
    settings = settings_for(tmp_path / "data", "minilm-l6")
    api.sync([folder], settings=settings)
    with Client(settings=settings) as client:
        assert client.query(ANSWERABLE).refusal is None
    assert not settings.scales_dir.exists()
