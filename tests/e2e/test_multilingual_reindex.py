"""A blue/green reindex onto the multilingual preset is an upgrade like any other: an index
built with the static preset gets a `multilingual-e5-small` side beside it, backfilled from
the stored chunks while the static side answers, promoted, rolled back and promoted again,
then the static side cleaned up. After the swap, a Chinese question finds the Chinese
document by its dense leg, and the new side's cosines are read on its own scale.

e5 puts unrelated text near cosine 0.8, so an index built with the preset is read on
MiniLM-L6's scale as a served e5 is (tests/e2e/test_remote_embedder.py): off-topic
questions that pass the floors read raw are refused on the scale, and an answerable one is
still answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.core.settings import Settings
from ragstream.operators.embed import E5_MODEL, load_embedder
from tests.harness.helpers import copy_docs, off_topic_on_and_off_the_scale

pytestmark = pytest.mark.slow

FILES = ["md/docling_concepts_plugins.md", "md/docling_faq_index.md"]
SCALE_FILES = [  # small files: every chunk is embedded by the 4-bit e5 on one CPU
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_plugins.md",
    "md/docling_concepts_architecture.md",
    "html/python311_tutorial_interactive.html",
]
GREAT_WALL = """# 长城

长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。明长城全长约八千八百五十公里，
大部分城墙修建于明朝，用于抵御北方游牧民族的侵扰。

城墙上每隔一段距离设有烽火台。发现敌情时，守军白天燃烟、夜间举火，把消息一站一站传到
京城。
"""
WALL_QUESTION = "明长城全长多少公里？"  # How long is the Ming Great Wall, in kilometres?


@pytest.fixture
def folder(tmp_path: Path, shared_docs: Path) -> Path:
    root = copy_docs(shared_docs, FILES, tmp_path / "docs")
    (root / "great_wall.md").write_text(GREAT_WALL, encoding="utf-8")
    return root


def dense_first(client: Client, question: str) -> str:
    """The path of the chunk the dense leg ranks first for `question`."""
    results = client.retrieve(question).results
    return next(r.path for r in results if r.ranks.get("dense") == 1)


def test_a_blue_green_reindex_from_the_static_preset_to_the_multilingual_one(
    tmp_path: Path, folder: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedder="static", query={"log_queries": False})
    api.sync([folder], settings=settings)
    static = load_embedder("static").version
    with Client(settings=settings) as client:
        before = client.query("What does a Docling plugin add?")
        started = client.reindex_start("multilingual-e5-small", wait=True)
        assert started.open and started.lag == 0
        during = client.query("What does a Docling plugin add?")  # still the static side
        assert during.citations and during.embedder == before.embedder == static.slug
        client.reindex_promote()
        status = client.status()
        assert status.embedder is not None and status.embedder.name == E5_MODEL
        assert status.embedder.query_prefix == "query: " and status.chunks_live > 0
        after = client.query("What does a Docling plugin add?")
        assert after.refusal is None and after.citations and before.citations
        assert after.embedder == load_embedder("multilingual-e5-small").version.slug
        assert dense_first(client, WALL_QUESTION).endswith("great_wall.md")
        scaled = {p.stem for p in settings.scales_dir.glob("*.json")}  # each side its own
        assert after.embedder in scaled
        client.reindex_rollback()
        assert client.status().embedder == static
        client.reindex_promote()  # forward again, then retire the static side
        client.reindex_cleanup(confirm=True)
        assert client.status().embedder.name == E5_MODEL  # type: ignore[union-attr]
        assert client.query("What does a Docling plugin add?").citations


def test_the_presets_cosines_are_read_on_the_floors_scale(
    tmp_path: Path, shared_docs: Path
) -> None:
    folder = copy_docs(shared_docs, SCALE_FILES, tmp_path / "docs")
    settings = Settings(
        data_dir=tmp_path / "data", embedder="multilingual-e5-small", query={"log_queries": False}
    )
    api.sync([folder], settings=settings)
    answered_raw, answered, on_topic = off_topic_on_and_off_the_scale(settings)
    assert answered_raw and not answered, (answered_raw, answered)
    assert on_topic.refusal is None and any("chunking" in c.path for c in on_topic.citations)
    (kept,) = settings.scales_dir.glob("*.json")
    assert kept.stem == load_embedder("multilingual-e5-small").version.slug
