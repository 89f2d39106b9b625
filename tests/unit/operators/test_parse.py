"""Parse operator: real files of every format → blocks; bad input → ParseError(stage, reason).

Real documents are read in place from the shared corpus (the `shared_docs` fixture; never
copied into the repo); files that a test has to damage are built in tmp_path. One docling
converter serves the whole run.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from ragstream.core.models import Block, FileFingerprint, ParsedDocument
from ragstream.operators.parse import ParseError, PdfLine, lines_to_paragraphs, parse_file

SAMPLES = Path(__file__).resolve().parents[3] / "samples"


def parse(path: Path, timeout_s: float | None = None) -> ParsedDocument:
    fingerprint = FileFingerprint(size=1, mtime_ns=1)
    return parse_file(path, f"test:{path.name}", "test", fingerprint, timeout_s=timeout_s)


def kinds(doc: ParsedDocument) -> set[str]:
    return {b.kind for b in doc.blocks}


def squash(text: str) -> str:
    return " ".join(text.split())


# --- formats -------------------------------------------------------------------------------


def test_markdown_headings_lists_and_whole_paragraphs(shared_docs: Path) -> None:
    doc = parse(shared_docs / "md/docling_concepts_chunking.md")
    assert doc.file_type == "md"
    assert doc.title == "Introduction"
    assert {"heading", "paragraph", "list_item", "code"} <= kinds(doc)
    nested = next(b for b in doc.blocks if b.text == "Table Chunking with Repeated Headers")
    assert nested.kind == "heading"
    assert nested.section_path == ("Hybrid Chunker", "Table Chunking with Repeated Headers")
    # Inline `code` and **bold** split a paragraph into fragments in docling; we rejoin them.
    whole = "A chunker is a Docling abstraction that, given a DoclingDocument, returns a stream"
    assert sum(whole in b.text for b in doc.blocks) == 1
    assert len({b.text for b in doc.blocks if b.kind == "list_item"}) == len(
        [b for b in doc.blocks if b.kind == "list_item"]
    ), "list items must not be emitted twice"


def test_markdown_table_rows_name_their_columns(shared_docs: Path) -> None:
    doc = parse(shared_docs / "md/docling_integrations_semantica.md")
    rows = [b for b in doc.blocks if b.kind == "table_row"]
    assert len(rows) == 4  # header row folded into the body rows
    assert rows[0].text.startswith("Feature: Parsing | Docling: ")
    assert rows[0].section_path[-1] == "Why Semantica + Docling?"


def test_html_headings_nest(shared_docs: Path) -> None:
    doc = parse(shared_docs / "html/python311_tutorial_appetite.html")
    assert doc.file_type == "html"
    assert {"heading", "paragraph", "list_item"} <= kinds(doc)
    prose = next(b for b in doc.blocks if b.text.startswith("If you do much work on computers"))
    assert prose.kind == "paragraph"
    assert prose.section_path and prose.section_path[-1] == "1. Whetting Your Appetite"


def test_docx_heading_path_and_table_rows(shared_docs: Path) -> None:
    doc = parse(shared_docs / "docx/docling__unit_test_headers_numbered.docx")
    assert doc.file_type == "docx"
    assert doc.title == "Test Document"
    para = next(b for b in doc.blocks if b.text == "Paragraph 1.1.1")
    assert para.section_path == ("Test Document", "1 Section 1", "1.1 Section 1.1")

    tables = parse(shared_docs / "docx/unstructured__docx-tables.docx")
    rows = [b.text for b in tables.blocks if b.kind == "table_row"]
    assert "Header Col 1: Lorem ipsum | Header Col 2: A link example" in rows
    assert "a | b: c | b: d" in rows  # merged cells are counted once per row


def test_pptx_list_items(shared_docs: Path) -> None:
    doc = parse(shared_docs / "pptx/unstructured__science-exploration-1p.pptx")
    assert doc.file_type == "pptx"
    items = [b.text for b in doc.blocks if b.kind == "list_item"]
    assert "Code 610: Earth Sciences Division" in items


def test_pdf_paragraphs_are_rebuilt_from_lines(shared_docs: Path) -> None:
    path = shared_docs / "pdf/docling__2305.03393v1-pg9.pdf"
    doc = parse(path)
    assert doc.file_type == "pdf"
    assert {b.page for b in doc.blocks} == {1}
    assert len(doc.blocks) < 98 / 2  # the native pipeline yields 98 lines for this page
    # Every prose paragraph of the reference transcription lies inside a single block.
    truth = (shared_docs / "groundtruth/docling__2305.03393v1-pg9.md").read_text()
    prose = [squash(p) for p in truth.split("\n\n") if len(p) > 80 and p[0] not in "#|<"]
    assert len(prose) >= 4
    for paragraph in prose:
        assert any(paragraph in b.text for b in doc.blocks), paragraph[:60]
    # "Ef-" / "fects" across a line break (a soft hyphen in this PDF) is one word again.
    assert any("Effects of reducing the # of layers" in b.text for b in doc.blocks)


def test_pdf_two_columns_and_pages(shared_docs: Path) -> None:
    doc = parse(shared_docs / "pdf/docling__amt_handbook_sample.pdf")
    truth = (shared_docs / "groundtruth/docling__amt_handbook_sample.md").read_text()
    spring = next(squash(p) for p in truth.split("\n\n") if p.startswith("The spring keeps"))
    assert spring in [b.text for b in doc.blocks]  # exactly one block, nothing glued on
    assert not any(b.text == "7-45" for b in doc.blocks)  # page number dropped

    pages = parse(shared_docs / "pdf/docling__normal_4pages.pdf")
    assert {b.page for b in pages.blocks} == {1, 2, 3, 4}


def test_txt_paragraphs_split_on_blank_lines_and_legacy_encoding(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(
        "Caf\u00e9 cr\u00e8me,\nwrapped line.\n\n\n  # not a heading\n".encode("cp1252")
    )
    doc = parse(path)
    assert doc.file_type == "txt"
    assert doc.title == "notes"
    assert [b.text for b in doc.blocks] == [
        "Caf\u00e9 cr\u00e8me, wrapped line.",
        "# not a heading",
    ]
    assert kinds(doc) == {"paragraph"}


def test_markdown_in_cp1252_is_decoded_not_rejected(tmp_path: Path) -> None:
    path = tmp_path / "legacy.markdown"
    path.write_bytes("# R\u00e9sum\u00e9\n\nNa\u00efve \u201cquotes\u201d.\n".encode("cp1252"))
    doc = parse(path)
    assert doc.file_type == "md"
    assert doc.title == "R\u00e9sum\u00e9"
    assert doc.blocks[1].text == "Na\u00efve \u201cquotes\u201d."


def test_bundled_samples_parse() -> None:
    files = sorted(p for p in SAMPLES.iterdir() if p.suffix != ".py")
    assert {p.suffix for p in files} >= {".md", ".html", ".docx", ".pdf"}
    assert sum(p.stat().st_size for p in files) < 200_000
    for path in files:
        doc = parse(path)
        assert len(doc.blocks) >= 5, path.name
        if doc.file_type != "pdf":
            assert "heading" in kinds(doc), path.name
    pdf = parse(SAMPLES / "bad-inputs-and-dead-letters.pdf")
    assert {b.page for b in pdf.blocks} == {1, 2}
    assert not any("page 1 of 2" in b.text for b in pdf.blocks)  # running footer dropped
    assert any("rebuilds the paragraphs: a new paragraph starts" in b.text for b in pdf.blocks)
    assert "list_item" in kinds(pdf)


# --- lines_to_paragraphs (pure) ------------------------------------------------------------


def line(text: str, top: float, left: float = 72, right: float = 540, page: int = 1) -> PdfLine:
    return PdfLine(text=text, page=page, left=left, top=top, right=right, bottom=top - 9)


def texts(blocks: list[Block]) -> list[str]:
    return [b.text for b in blocks]


def test_lines_join_hyphenated_words_and_split_on_gaps() -> None:
    lines = [
        line("The first paragraph has an exam-", 700),
        line("ple of a hyphenated word, a state-of-the-", 686),
        line("art compound and a soft hyphen in para\x02", 672),
        line("graphs.", 658, right=120),
        line("A second paragraph starts after a clearly larger gap", 630),
        line("and continues on the next line.", 616, right=300),
    ]
    assert texts(lines_to_paragraphs(lines)) == [
        "The first paragraph has an example of a hyphenated word, a state-of-the-art "
        "compound and a soft hyphen in paragraphs.",
        "A second paragraph starts after a clearly larger gap and continues on the next line.",
    ]


def test_lines_split_on_indent_short_line_bullet_and_page() -> None:
    lines = [
        line("Section heading", 700, right=200),
        line("Body text fills the whole measure of the column and then it", 686),
        line("ends here with a short line.", 672, right=250),
        line("A new paragraph without any extra vertical space at all", 658),
        line("continues here.", 644, right=200),
        line("An indented first line starts the next paragraph here and", 630, left=90),
        line("wraps back to the margin.", 616, right=200),
        line("\u2022 a bullet item", 602, right=200),
        line("Text continues on the next page in a new block.", 700, page=2),
    ]
    blocks = lines_to_paragraphs(lines)
    assert texts(blocks) == [
        "Section heading",
        "Body text fills the whole measure of the column and then it ends here with a short line.",
        "A new paragraph without any extra vertical space at all continues here.",
        "An indented first line starts the next paragraph here and wraps back to the margin.",
        "a bullet item",
        "Text continues on the next page in a new block.",
    ]
    assert [b.kind for b in blocks][-2:] == ["list_item", "paragraph"]
    assert [b.page for b in blocks] == [1, 1, 1, 1, 1, 2]


def test_lines_on_one_visual_line_join_and_running_headers_drop() -> None:
    pages = []
    for page in (1, 2, 3):
        pages += [
            line(f"Annual report {page}", 760, right=200, page=page),
            line("Revenue", 700, right=120, page=page),
            line("42", 700, left=150, right=170, page=page),
            line(str(page), 40, left=300, right=306, page=page),
        ]
    blocks = lines_to_paragraphs(pages)
    assert texts(blocks) == ["Revenue 42"] * 3


# --- bad input -----------------------------------------------------------------------------


def expect_error(path: Path, stage: str, pattern: str, timeout_s: float | None = None) -> None:
    with pytest.raises(ParseError) as caught:
        parse(path, timeout_s=timeout_s)
    assert caught.value.stage == stage
    assert re.search(pattern, caught.value.reason), caught.value.reason


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_bytes(b"")
    expect_error(tmp_path / "empty.md", "read", "^empty file$")


def test_whitespace_only_file(tmp_path: Path) -> None:
    (tmp_path / "blank.md").write_text("  \n\n \t\n")
    expect_error(tmp_path / "blank.md", "parse", "no text content")


def test_pdf_without_text_layer(tmp_path: Path) -> None:
    import pypdfium2

    blank = pypdfium2.PdfDocument.new()
    blank.new_page(612, 792)
    blank.save(tmp_path / "scan.pdf")
    expect_error(tmp_path / "scan.pdf", "parse", "no text content .*OCR")


def test_binary_junk_with_text_extension(tmp_path: Path) -> None:
    (tmp_path / "junk.md").write_bytes(b"\x00\xff\xfe\x01\x02junk\x00" * 40)
    expect_error(tmp_path / "junk.md", "parse", "binary content in a text file")
    (tmp_path / "noise.txt").write_bytes(bytes(range(1, 32)) * 20)  # no NULs, all control
    expect_error(tmp_path / "noise.txt", "parse", "binary content in a text file")


def test_truncated_pdf(tmp_path: Path, shared_docs: Path) -> None:
    path = tmp_path / "truncated.pdf"
    path.write_bytes((shared_docs / "pdf/docling__2305.03393v1-pg9.pdf").read_bytes()[:2048])
    expect_error(path, "parse", r"^corrupt or unreadable PDF: \S")


def test_random_bytes_docx(tmp_path: Path) -> None:
    path = tmp_path / "random.docx"
    path.write_bytes(os.urandom(4096))
    expect_error(path, "parse", r"^corrupt or unreadable DOCX: \S")


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.md"
    path.write_text("# Secret\n")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: permissions do not stop reads")
        expect_error(path, "read", "permission denied")
    finally:
        path.chmod(0o600)


def test_vanished_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "gone.md", "read", "^file vanished before it could be read$")


def test_unsupported_extension(tmp_path: Path) -> None:
    (tmp_path / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    expect_error(tmp_path / "sheet.xlsx", "parse", "unsupported file type '.xlsx'")


def test_parse_timeout(tmp_path: Path, shared_docs: Path) -> None:
    # PDFs stop inside docling (document_timeout); other formats are checked after parsing.
    expect_error(
        shared_docs / "pdf/docling__normal_4pages.pdf", "parse", "timed out", timeout_s=1e-9
    )
    shutil.copy(shared_docs / "md/docling_concepts_chunking.md", tmp_path / "slow.md")
    expect_error(tmp_path / "slow.md", "parse", "timed out", timeout_s=1e-9)
