"""Scans through the real sync flow and query engine: a 150-dpi scan saved as a PNG and as an
image-only PDF becomes searchable and answerable, cited to the scan's page 1 as OCR text; a
mixed PDF is OCR'd on its image page only; the ledger shows OCR'd files indexed with their
page count; bad scans are dead letters with one-line reasons while the rest indexes; an
unchanged scan is never OCR'd again (re-sync, touch, restart, chunker change); with
`parse.ocr=off` everything is as it was before OCR existed; and an OCR setting change re-reads
the scans it concerns, untouched, and nothing else. Real Tesseract, real models.
"""

from __future__ import annotations

import os
from pathlib import Path

import pypdfium2
import pytest
from PIL import Image

from ragstream import api
from ragstream.core.answers import Answer, QueryFilters, QueryRequest
from ragstream.core.models import DocOutcome, SyncReport
from ragstream.core.settings import Settings
from ragstream.flows.sync import run_sync
from ragstream.operators.ocr import ocr_runs
from ragstream.query.engine import QueryEngine
from ragstream.service import audit
from tests.harness.scans import REPORT, bomb_png, locked_pdf, render_page, save_pdf, save_png

pytestmark = pytest.mark.slow  # real syncs and a real query engine

TEXT_PDF = "pdf/docling__2305.03393v1-pg9.pdf"
INCIDENT = [
    "Incident Log",
    "The backup generator was tested on 12 May and ran for two hours.",
    "Fuel in the generator tank was at eighty percent after the test.",
]
BAD = {
    "corrupt.png": "corrupt or unreadable image",
    "bomb.png": "image too large to OCR: 2500000000 pixels",
    "locked.pdf": "password-protected PDF",
    "blank.png": "no text content (OCR found no text on the page)",
}


def build(root: Path, shared_docs: Path) -> None:
    root.mkdir()
    scan = render_page(REPORT, dpi=150)
    save_png(scan, root / "report.png")
    save_pdf([scan], root / "report.pdf")
    mixed = pypdfium2.PdfDocument(shared_docs / TEXT_PDF)
    incident = save_pdf([render_page(INCIDENT, dpi=150)], root.parent / "incident.pdf")
    mixed.import_pages(pypdfium2.PdfDocument(incident))
    mixed.save(root / "mixed.pdf")
    (root / "notes.md").write_text("# Notes\n\nThe canteen opens at eight every weekday.\n")
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (root / "bomb.png").write_bytes(bomb_png())
    (root / "locked.pdf").write_bytes(locked_pdf())
    Image.new("L", (1240, 1754), 255).save(root / "blank.png")


def ask(engine: QueryEngine, question: str, file_type: str | None = None) -> Answer:
    filters = QueryFilters(file_types=[file_type] if file_type else None)
    return engine.answer(QueryRequest(query=question, filters=filters))


def test_scans_are_searchable_answerable_cited_and_read_once(
    tmp_path: Path, shared_docs: Path
) -> None:
    root = tmp_path / "scans"
    build(root, shared_docs)
    settings = Settings(data_dir=tmp_path / "data")
    before = ocr_runs()
    report = api.sync([root], settings=settings)
    assert ocr_runs() - before == 4  # report.png, report.pdf, mixed.pdf page 2, blank.png
    dead = {Path(d.path).name: d.reason for d in report.dead_letters}
    assert set(dead) == set(BAD), dead
    for name, fragment in BAD.items():
        assert fragment in dead[name] and "\n" not in dead[name], (name, dead[name])

    ledger = {Path(r.path).name: r for r in audit.files([root], settings=settings)}
    for name, pages, read in (("report.png", 1, 1), ("report.pdf", 1, 1), ("mixed.pdf", 2, 1)):
        record = ledger[name]
        assert record.state == "indexed" and record.chunks >= 1, record
        assert (record.pages, record.ocr_pages) == (pages, read), record
    assert ledger["notes.md"].state == "indexed" and ledger["notes.md"].pages is None
    assert ledger["bomb.png"].state == "dead"

    with QueryEngine.open(settings.with_paths([root])) as engine:
        for file_type in ("png", "pdf"):
            answer = ask(engine, "When is the next inspection due?", file_type)
            assert answer.refusal is None, answer.refusal
            assert "September" in answer.text, answer.text
            cited = answer.citations[0]
            assert cited.doc_id == f"scans:report.{file_type}" and cited.page == 1
            assert cited.source == "ocr" and cited.ocr_confidence is not None
            assert cited.ocr_confidence > 0.8 and cited.bbox is not None
            assert '"source":"ocr"' in cited.model_dump_json()
            assert all(c.supported and not c.weak_evidence for c in answer.claims)
        answer = ask(engine, "When was the backup generator tested?")
        assert answer.refusal is None and "12 May" in answer.text, answer.text
        cited = answer.citations[0]
        assert (cited.doc_id, cited.page, cited.source) == ("scans:mixed.pdf", 2, "ocr")
        text_page = engine.retrieve(QueryRequest(query="table structure recognition"))
        first = next(r for r in text_page.results if r.doc_id == "scans:mixed.pdf")
        assert (first.page, first.source) == (1, "text")

    # never OCR'd twice: a re-sync, a touched file, a restart, a chunker change
    before = ocr_runs()
    again = api.sync([root], settings=settings)
    assert again.docs_changed == 0 and ocr_runs() == before
    os.utime(root / "report.png")
    os.utime(root / "mixed.pdf")
    api.sync([root], settings=settings)
    recut = Settings(data_dir=tmp_path / "data", chunk={"max_tokens": 200})
    changed = api.sync([root], settings=recut)
    assert changed.docs_changed >= 3, changed  # every document re-read and re-cut ...
    assert ocr_runs() == before  # ... without reading a scan again


def test_ocr_off_is_the_behaviour_before_ocr(tmp_path: Path, shared_docs: Path) -> None:
    root = tmp_path / "scans"
    build(root, shared_docs)
    settings = Settings(data_dir=tmp_path / "data", parse={"ocr": "off"})
    before = ocr_runs()
    report = api.sync([root], settings=settings)
    assert ocr_runs() == before
    dead = {Path(d.path).name: d.reason for d in report.dead_letters}
    assert set(dead) == {"report.pdf", "locked.pdf"}, dead  # images are not even read
    assert dead["report.pdf"].startswith("no text content (image-only PDF? OCR is off")
    ledger = {Path(r.path).name: r for r in audit.files([root], settings=settings)}
    assert ledger["report.png"].state == "excluded"
    assert "not a supported file type" in ledger["report.png"].reason
    mixed = ledger["mixed.pdf"]
    assert mixed.state == "indexed" and mixed.pages is None and mixed.ocr_pages == 0


def test_an_ocr_setting_change_re_reads_the_scans_it_concerns(tmp_path: Path) -> None:
    """No file is touched: indexed with OCR off, then auto (the scans become answerable),
    then force (the scanned PDF is re-read, nothing re-embedded), then another engine (both
    scans re-read). The markdown file is read once, and every second pass does nothing."""
    root, data = tmp_path / "scans", tmp_path / "data"
    root.mkdir()
    scan = render_page(REPORT, dpi=150)
    save_png(scan, root / "report.png")
    save_pdf([scan], root / "report.pdf")
    (root / "notes.md").write_text("# Notes\n\nThe canteen opens at eight every weekday.\n")

    def sync(**parse: str) -> tuple[SyncReport, set[str]]:
        outcomes: list[DocOutcome] = []
        settings = Settings(data_dir=data, parse=parse).with_paths([root])
        report = run_sync(settings, on_outcome=outcomes.append)
        return report, {o.doc_id.removeprefix("scans:") for o in outcomes}

    report, read = sync(ocr="off")
    assert read == {"notes.md", "report.pdf"}  # the PNG is excluded
    assert [Path(d.path).name for d in report.dead_letters] == ["report.pdf"]

    before = ocr_runs()
    report, read = sync(ocr="auto")
    assert read == {"report.png", "report.pdf"} and not report.dead_letters, report
    assert ocr_runs() - before == 2 and report.chunks_embedded > 0
    auto = Settings(data_dir=data).with_paths([root])
    with QueryEngine.open(auto) as engine:
        answer = ask(engine, "When is the next inspection due?", "pdf")
        assert answer.refusal is None and "September" in answer.text, answer.text
        assert answer.citations[0].doc_id == "scans:report.pdf"
        assert answer.citations[0].source == "ocr"
    assert sync(ocr="auto")[1] == set()

    forced = Settings(data_dir=data, parse={"ocr": "force"}).with_paths([root])
    ledger = {Path(r.path).name: r for r in audit.files([], settings=forced)}
    assert (ledger["report.pdf"].state, ledger["report.pdf"].reason) == (
        "stale",
        "file parsed under other OCR settings",
    )
    assert ledger["report.png"].state == ledger["notes.md"].state == "indexed"
    before = ocr_runs()
    report, read = sync(ocr="force")
    assert read == {"report.pdf"}  # force reads an image-only PDF's pages as auto did ...
    assert report.chunks_embedded == 0 and ocr_runs() == before  # ... from the page cache
    assert sync(ocr="force")[1] == set()  # its kept points took the new key

    report, read = sync(ocr="auto", ocr_engine="rapidocr")
    assert read == {"report.png", "report.pdf"} and ocr_runs() - before == 2
    assert sync(ocr="auto", ocr_engine="rapidocr")[1] == set()
    rapid = Settings(data_dir=data, parse={"ocr_engine": "rapidocr"}).with_paths([root])
    assert {r.state for r in audit.files([], settings=rapid)} == {"indexed"}
