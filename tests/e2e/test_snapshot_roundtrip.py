"""The round trip the issue names: a real folder with Markdown, a PDF and a scan (OCR, its
cache included), a tenant, and a reindex side backfilled beside the live one, snapshotted
and restored on another path: the same answers with the same citations, both sides with
the same counts, the tenant on every chunk, and a `sync` that embeds and OCRs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream import Client, api
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.service import snapshots
from ragstream.service.stores import open_live
from tests.harness.helpers import copy_docs
from tests.harness.scans import REPORT, render_page, save_pdf

pytestmark = pytest.mark.slow

DOCS = ["md/docling_integrations_langchain.md", "pdf/docling__2305.03393v1-pg9.pdf"]
QUESTIONS = ["How does docling plug into LangChain?", "Which valve showed corrosion?"]


def _answers(settings: Settings) -> list[tuple[str, list[tuple[str, str]]]]:
    with Client(settings=settings) as c:
        answers = [c.query(q) for q in QUESTIONS]
    return [(a.text, [(x.point_id, x.doc_id) for x in a.citations]) for a in answers]


def test_a_restored_snapshot_on_another_path_is_the_same_index(
    shared_docs: Path, tmp_path: Path
) -> None:
    folder = copy_docs(shared_docs, DOCS, tmp_path / "docs", flat=True)
    save_pdf([render_page(REPORT)], folder / "maintenance-scan.pdf")
    source = FolderConfig(name="docs", root=folder, tenant="acme")
    settings = Settings(data_dir=tmp_path / "data", sources=[source])
    first = api.sync([], settings=settings)
    assert first.chunks_embedded > 0
    with Client(settings=settings) as c:
        c.reindex_start("minilm-l3", wait=True)  # a second side, backfilled
        sides = sorted((s.collection, s.live) for s in c.reindex_status().sides)
        info = c.snapshot()
    before = _answers(settings)
    assert any("Valve 17" in text for text, _ in before)
    assert any(doc == "docs:maintenance-scan.pdf" for _, cited in before for _, doc in cited)
    assert len(sides) == 2 and sides[0][1] == sides[1][1] > 0

    members = {m.name for m in snapshots.verify(settings, Path(info.path)).members}
    assert "state/ocr.sqlite3" in members and "state/reindex.json" in members
    moved = settings.model_copy(update={"data_dir": tmp_path / "elsewhere" / "restored"})
    snapshots.restore(settings, Path(info.path), moved.data_dir)
    assert _answers(moved) == before
    with Client(settings=moved) as c:
        assert sorted((s.collection, s.live) for s in c.reindex_status().sides) == sides
    with open_live(moved) as live:
        assert live is not None
        tenants = {c.tenant for page in live[1].live_pages() for c in page}
    assert tenants == {"acme"}
    again = api.sync([], settings=moved)
    assert again.chunks_embedded == 0 and again.docs_changed == 0
