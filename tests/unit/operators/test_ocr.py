"""OCR in the parse operator: scans built here (typed lines rendered with PIL) are read into
blocks with pages, boxes and confidences; a mixed PDF is OCR'd on its image page only; the
cache means an unchanged scan is never read twice (counted); `parse.ocr=off` is the old
behaviour; bad input is a one-line `ParseError` in bounded time. Real Tesseract throughout.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pypdfium2
import pytest
from PIL import Image, ImageDraw

from ragstream.connectors.ocr_cache import OcrPageCache
from ragstream.core.models import FileFingerprint, ParsedDocument
from ragstream.operators.ocr import OcrOptions, ocr_runs
from ragstream.operators.parse import (
    METADATA_KEY,
    PLAIN_PARSER,
    ParseError,
    parse_file,
    parser_key,
    parser_keys,
)
from tests.harness.scans import REPORT, bomb_png, locked_pdf, render_page, save_pdf, save_png

TEXT_PDF = "pdf/docling__2305.03393v1-pg9.pdf"  # one page with a real text layer


def parse(
    path: Path,
    ocr: OcrOptions | None = None,
    cache: OcrPageCache | None = None,
    timeout_s: float | None = 120.0,
) -> ParsedDocument:
    fp = FileFingerprint(size=path.stat().st_size, mtime_ns=1)
    return parse_file(path, f"t:{path.name}", "t", fp, timeout_s, ocr=ocr, ocr_cache=cache)


def refused(path: Path, pattern: str, ocr: OcrOptions | None = None, **kw: float) -> str:
    with pytest.raises(ParseError) as caught:
        parse(path, ocr, **kw)  # type: ignore[arg-type]
    reason = caught.value.reason
    assert "\n" not in reason and re.search(pattern, reason), reason
    return reason


def text_of(doc: ParsedDocument) -> str:
    return " ".join(b.text for b in doc.blocks)


@pytest.fixture(scope="module")
def scan() -> Image.Image:
    return render_page(REPORT, dpi=150)


def assert_report(doc: ParsedDocument) -> None:
    text = text_of(doc)
    for needle in ("Quarterly Maintenance Report", "Valve 17", "due in September"):
        assert needle in text, text
    for block in doc.blocks:
        assert block.origin == "ocr" and block.page == 1
        assert block.confidence is not None and block.confidence > 0.8
        assert block.bbox is not None
        left, top, right, bottom = block.bbox
        assert 0.05 < left < right < 0.95 and 0.05 < top < bottom < 0.5  # upper page text
    assert doc.pages == 1 and doc.ocr_pages == (1,)


def test_png_scan_becomes_blocks(tmp_path: Path, scan: Image.Image) -> None:
    doc = parse(save_png(scan, tmp_path / "report.png"))
    assert doc.file_type == "png" and doc.title == "report"
    assert_report(doc)


def test_image_only_pdf_becomes_blocks(tmp_path: Path, scan: Image.Image) -> None:
    doc = parse(save_pdf([scan], tmp_path / "report.pdf"))
    assert doc.file_type == "pdf"
    assert_report(doc)


def test_other_image_formats(tmp_path: Path, scan: Image.Image) -> None:
    """JPEG, WebP, BMP, a transparent PNG (flattened onto white), a GIF's first frame and
    every frame of a TIFF."""
    half = scan.resize((scan.width // 2, scan.height // 2)).resize(scan.size)  # another page
    cases = {
        "report.jpg": lambda p: scan.save(p, quality=85),
        "report.webp": lambda p: scan.save(p, quality=90),
        "report.bmp": lambda p: scan.save(p),
        "report.gif": lambda p: scan.save(p, save_all=True, append_images=[half]),
    }
    for name, save in cases.items():
        save(tmp_path / name)
        doc = parse(tmp_path / name)
        assert "due in September" in text_of(doc) and doc.ocr_pages == (1,), name
    ink = Image.new("LA", scan.size, (0, 0))  # black text on a transparent background
    ink.putalpha(scan.point(lambda v: 255 - v))
    ink.save(tmp_path / "clear.png")
    assert "Valve 17" in text_of(parse(tmp_path / "clear.png"))
    scan.save(tmp_path / "fax.tiff", save_all=True, append_images=[render_page(["Page two"])])
    fax = parse(tmp_path / "fax.tiff")
    assert fax.pages == 2 and fax.ocr_pages == (1, 2)
    assert [b.page for b in fax.blocks][-1] == 2 and fax.blocks[-1].text == "Page two"


def test_mixed_pdf_is_ocr_d_on_its_image_page_only(
    tmp_path: Path, scan: Image.Image, shared_docs: Path
) -> None:
    mixed = pypdfium2.PdfDocument(shared_docs / TEXT_PDF)
    mixed.import_pages(pypdfium2.PdfDocument(save_pdf([scan], tmp_path / "scan.pdf")))
    mixed.save(tmp_path / "mixed.pdf")
    before = ocr_runs()
    doc = parse(tmp_path / "mixed.pdf")
    assert ocr_runs() - before == 1
    assert doc.pages == 2 and doc.ocr_pages == (2,)
    assert doc.parser == "pdf:auto:tesseract:eng:200dpi" + METADATA_KEY
    assert {b.origin for b in doc.blocks if b.page == 1} == {"text"}
    assert {b.origin for b in doc.blocks if b.page == 2} == {"ocr"}
    assert "due in September" in " ".join(b.text for b in doc.blocks if b.page == 2)
    text_only = parse(shared_docs / TEXT_PDF)  # the text page reads as it does alone
    assert [b.text for b in doc.blocks if b.page == 1] == [b.text for b in text_only.blocks]
    assert (
        text_only.parser == "pdf:auto" + METADATA_KEY
    )  # no page read by OCR: no engine in its key
    # force re-reads the text page too
    before = ocr_runs()
    forced = parse(tmp_path / "mixed.pdf", OcrOptions(mode="force"))
    assert ocr_runs() - before == 2 and forced.ocr_pages == (1, 2)
    assert {b.origin for b in forced.blocks} == {"ocr"}


def test_parser_key_names_what_a_reading_depends_on() -> None:
    """Formats OCR never reads share one key whatever the OCR settings; an image's key holds
    the engine and languages; a PDF's the mode, and when OCR read a page also the engine,
    the languages and the render resolution."""
    auto, rapid, off = OcrOptions(), OcrOptions(engine="rapidocr"), OcrOptions(mode="off")
    force, deu, dpi300 = (
        OcrOptions(mode="force"),
        OcrOptions(languages="eng+deu"),
        OcrOptions(dpi=300),
    )
    every = (auto, rapid, off, force, deu, dpi300)
    plain = {parser_key(p, o) for p in ("a.md", "b.docx", "c.html", "d.txt", "e") for o in every}
    assert plain == {PLAIN_PARSER}
    assert parser_key("a.PNG", auto) == "image:tesseract:eng" + METADATA_KEY
    assert len({parser_key("a.jpg", o) for o in (auto, rapid, deu, off)}) == 4
    assert parser_key("a.png", force) == parser_key("a.png", dpi300) == parser_key("a.png", auto)
    assert parser_key("s.pdf", auto) == "pdf:auto:tesseract:eng:200dpi" + METADATA_KEY
    assert parser_key("s.pdf", auto, ocr_read=False) == "pdf:auto" + METADATA_KEY
    assert (
        parser_key("s.pdf", force, ocr_read=False)
        == "pdf:force:tesseract:eng:200dpi" + METADATA_KEY
    )
    assert parser_key("s.pdf", off) == "pdf:off" + METADATA_KEY
    # a PDF of which auto read no page by OCR reads the same under any engine; a scan does not
    assert all(
        "pdf:auto" + METADATA_KEY in parser_keys("t.pdf", o) for o in (auto, rapid, deu, dpi300)
    )
    assert "pdf:auto" + METADATA_KEY not in parser_keys("t.pdf", force)
    for other in (rapid, deu, dpi300, force, off):
        assert parser_key("s.pdf", auto) not in parser_keys("s.pdf", other)


def test_ocr_off_is_the_old_behaviour(tmp_path: Path, scan: Image.Image) -> None:
    off = OcrOptions(mode="off")
    before = ocr_runs()
    refused(save_pdf([scan], tmp_path / "scan.pdf"), r"^no text content .*parse\.ocr=off", off)
    refused(save_png(scan, tmp_path / "scan.png"), r"^unsupported file type '\.png'$", off)
    assert ocr_runs() == before


def test_unchanged_scan_is_not_read_twice(tmp_path: Path, scan: Image.Image) -> None:
    cache = OcrPageCache(tmp_path / "state")
    png = save_png(scan, tmp_path / "report.png")
    pdf = save_pdf([scan, render_page(["Second page of the report."])], tmp_path / "two.pdf")
    before = ocr_runs()
    first = parse(png, cache=cache), parse(pdf, cache=cache)
    assert ocr_runs() - before == 3
    cache.close()
    reopened = OcrPageCache(tmp_path / "state")  # a restart: the cache is on disk
    again = parse(png, cache=reopened), parse(pdf, cache=reopened)
    assert ocr_runs() - before == 3 and again == first
    parse(png, OcrOptions(dpi=300, mode="force"), cache=reopened)  # PDF-only settings
    assert ocr_runs() - before == 3
    parse(pdf, OcrOptions(dpi=300), cache=reopened)  # rendered otherwise: read again
    assert ocr_runs() - before == 5
    # a PDF with one page changed: the unchanged page hits by its pixels
    save_pdf([scan, render_page(["Second page, revised."])], pdf)
    before = ocr_runs()
    revised = parse(pdf, cache=reopened)
    assert ocr_runs() - before == 1
    assert "revised" in text_of(revised) and "Valve 17" in text_of(revised)


# --- bad input -----------------------------------------------------------------------------


def test_bad_images_are_one_line_dead_letters(tmp_path: Path, scan: Image.Image) -> None:
    started = time.monotonic()
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    refused(tmp_path / "corrupt.png", r"^corrupt or unreadable image: ")
    jpeg = io.BytesIO()
    scan.save(jpeg, "JPEG", quality=90)
    (tmp_path / "truncated.jpg").write_bytes(jpeg.getvalue()[: len(jpeg.getvalue()) // 3])
    refused(tmp_path / "truncated.jpg", r"^corrupt or unreadable image: .*truncated")
    (tmp_path / "bomb.png").write_bytes(bomb_png())
    refused(tmp_path / "bomb.png", r"^image too large to OCR: 2500000000 pixels")
    Image.new("L", (9000, 9000), 255).save(tmp_path / "big.png")  # 81 Mpx, under PIL's limit
    refused(tmp_path / "big.png", r"9000 × 9000 = 81000000 pixels, more than parse\.ocr_max_")
    Image.new("L", (1240, 1754), 255).save(tmp_path / "blank.png")
    refused(tmp_path / "blank.png", r"^no text content \(OCR found no text on the page\)$")
    assert time.monotonic() - started < 30


def test_image_without_text_is_indexed_or_refused_in_one_line(tmp_path: Path) -> None:
    photo = Image.new("L", (1200, 900), 200)
    draw = ImageDraw.Draw(photo)
    for i in range(12):  # shapes, no letters
        draw.ellipse((40 + 90 * i, 100 + 40 * (i % 5), 160 + 90 * i, 300 + 40 * (i % 5)), fill=60)
    photo.save(tmp_path / "photo.png")
    try:
        doc = parse(tmp_path / "photo.png")
    except ParseError as err:
        assert "\n" not in err.reason and err.reason.startswith("no text content")
    else:
        assert len(text_of(doc)) < 80  # at most a few spurious marks


def test_bad_pdfs(tmp_path: Path, scan: Image.Image) -> None:
    (tmp_path / "locked.pdf").write_bytes(locked_pdf())
    refused(tmp_path / "locked.pdf", r"^password-protected PDF: ")
    pages = [scan] * 5
    many = save_pdf(pages, tmp_path / "many.pdf")
    before = ocr_runs()
    refused(
        many, r"^5 pages to OCR, more than parse\.ocr_max_pages \(4\)$", OcrOptions(max_pages=4)
    )
    refused(
        many,
        r"^page 1 is 595 × 842 pt: .* more than parse\.ocr_max_page_pixels \(1000000\)",
        OcrOptions(max_page_pixels=1_000_000),
    )
    assert ocr_runs() == before  # both refused before a page was read
    refused(many, r"^parse timed out \(limit 0\.3s\): OCR read [0-4] of 5 pages", timeout_s=0.3)
    blank = pypdfium2.PdfDocument.new()  # no text layer and nothing to OCR
    blank.new_page(612, 792)
    blank.save(tmp_path / "blank.pdf")
    refused(tmp_path / "blank.pdf", r"^no text content \(no text layer and no page image to OCR\)$")
    save_pdf([Image.new("L", (1240, 1754), 255)], tmp_path / "white.pdf")
    refused(tmp_path / "white.pdf", r"^no text content \(OCR found no text on the page\)$")


def test_a_thousand_page_scan_is_refused_before_any_page_is_read(tmp_path: Path) -> None:
    page = render_page(["A short scanned page."], dpi=36)  # 298 x 421 pixels
    path = save_pdf([page] * 1000, tmp_path / "archive.pdf")
    before, started = ocr_runs(), time.monotonic()
    refused(path, r"^1000 pages to OCR, more than parse\.ocr_max_pages \(200\)$")
    assert ocr_runs() == before and time.monotonic() - started < 30


def test_rapidocr_engine_reads_from_its_wheel(tmp_path: Path) -> None:
    """The second engine (parse.ocr_engine=rapidocr): its models come from the wheel."""
    line = render_page(["Valve 17 was replaced in September."], dpi=150, size_in=(5.0, 1.2))
    save_png(line, tmp_path / "line.png")
    doc = parse(tmp_path / "line.png", OcrOptions(engine="rapidocr"))
    assert "September" in text_of(doc) and doc.blocks[0].origin == "ocr"
    assert doc.blocks[0].confidence is not None and doc.blocks[0].confidence > 0.8
