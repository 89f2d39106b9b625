"""Generate the binary demo samples (DOCX and PDF) from the prose below.

Run from the repo root: `.venv/bin/python samples/make_samples.py`. The output is
deterministic (fixed zip timestamps and document dates), so re-running it leaves git clean.

The PDF is written by hand rather than with a PDF library: a few text objects in the standard
Helvetica font, justified with word spacing and with the odd hyphenated line break, which is
what real typeset PDFs look like to the parser's line-to-paragraph rebuilding.
"""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

DOCX_TITLE = "Edit-stable chunking"
DOCX_BODY: list[tuple[str, str]] = [
    (
        "p",
        "A chunker decides what a search result can be. ragstream's chunker has a second "
        "job: when a document is edited, it must change as few chunks as possible, because every "
        "changed chunk costs an embedding and every unchanged one is free.",
    ),
    ("h1", "Boundaries come from structure"),
    (
        "p",
        "Chunks are cut at headings, paragraphs, list items and table rows, and inside a long "
        "paragraph at sentence ends. They are never cut at fixed character offsets. An offset "
        "shifts every later boundary when one word is added near the top; a structural boundary "
        "stays where it was.",
    ),
    (
        "p",
        "Each chunk stays within a token budget. Small neighbouring blocks are merged until "
        "the budget is reached, and the places where a merge may stop are chosen from the "
        "content itself, so the same text produces the same cuts wherever it appears.",
    ),
    ("h1", "What goes into the key"),
    (
        "p",
        "Everything that can change a chunk's text is part of the chunker key that its "
        "content hash is computed under:",
    ),
    ("li", "the maximum and minimum chunk size in tokens;"),
    ("li", "the content-defined setting that decides where small blocks stop merging;"),
    ("li", "the text normalization applied before hashing."),
    (
        "p",
        "Changing any of them produces new hashes, so a configuration change can never be "
        "served with vectors computed for the old chunks.",
    ),
    ("h1", "What an edit costs"),
    ("table", ""),
    (
        "p",
        "These are the outcomes the sync report counts for every pass: chunks embedded, "
        "reused, moved and tombstoned.",
    ),
]
DOCX_TABLE = [
    ("Edit", "Chunks re-embedded", "Chunks reused"),
    ("Fix a typo in one paragraph", "the chunk holding it", "all others"),
    ("Insert a new section", "the new chunks", "all existing ones"),
    ("Move a section to another file", "none", "the moved chunks, by hash"),
    ("Delete the last section", "none", "all others; the tail is tombstoned"),
]

PDF_TITLE = "Bad inputs and dead letters"
PDF_BODY: list[tuple[str, str]] = [
    (
        "p",
        "A folder that people actually use contains files that cannot be indexed: a "
        "document that is still being copied, a spreadsheet renamed to a text extension, a PDF "
        "that was cut off halfway through a download, a file that only its owner may read. A "
        "sync flow that crashes on the first of them is useless, and one that skips them "
        "silently is worse, because nobody learns that those documents are missing.",
    ),
    ("h", "Every failure has a stage and a reason"),
    (
        "p",
        "ragstream turns each bad input into a dead letter. A dead letter records the "
        "document id, the stage that failed, a reason written for a person, the time, and the "
        "size and modification time of the file as it was seen. The status command lists dead "
        "letters next to the healthy documents, so a missing document is visible at once.",
    ),
    (
        "p",
        "The parser recognizes the usual suspects before it hands anything to the document "
        "converter:",
    ),
    ("li", "an empty file, which has nothing to index;"),
    (
        "li",
        "binary content behind a text extension, found by looking for NUL bytes and "
        "control characters before the document converter ever sees the file;",
    ),
    ("li", "a file that vanished between the event and the read, or one without read permission;"),
    ("li", "a corrupt PDF, DOCX or PPTX, reported with the converter's own explanation;"),
    ("li", "a parse that runs past its time limit."),
    (
        "p",
        "Text in a legacy encoding is not a failure. A Markdown or plain text file that is "
        "not valid UTF-8 is decoded as Windows-1252, and as Latin-1 if that fails, so an old "
        "note with accented letters is indexed rather than rejected.",
    ),
    ("h", "Retried when the file changes"),
    (
        "p",
        "A dead letter is not permanent. It remembers the fingerprint of the file that "
        "failed, and the next time the file's size or modification time changes, the document "
        "is read and parsed again. Fixing a file is therefore all it takes to get it indexed; "
        "nobody has to clear an error queue by hand.",
    ),
    (
        "p",
        "Because the flow never stops for a bad file, one corrupt attachment in a shared "
        "folder cannot hold back the thousands of good documents around it. The same rule "
        "applies to a parse timeout: the slow document becomes a dead letter with its reason, "
        "and the pass moves on to the next file.",
    ),
    ("h", "PDFs without a layout model"),
    (
        "p",
        "PDFs are read without any downloaded layout model. The converter reports one text "
        "line at a time together with its position on the page, and the parser rebuilds the "
        "paragraphs: a new paragraph starts where the vertical gap between lines grows, where a "
        "line is indented, or where a short line ends a sentence. Words hyphenated at the end of "
        "a line are joined again, and running headers, footers and page numbers are dropped, so "
        "the chunks read like the text the author wrote.",
    ),
]

# Helvetica advance widths (1/1000 em) for ASCII 32..126, from the standard AFM metrics.
_HELVETICA = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278,
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556,
    1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778,
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556,
    333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556,
    556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,
]  # fmt: skip
BODY_SIZE, LEADING, LEFT, WIDTH, TOP, BOTTOM = 11.0, 14.5, 72.0, 468.0, 720.0, 90.0


def width(text: str, size: float = BODY_SIZE) -> float:
    """Rendered width of `text` in points (the bullet is the one non-ASCII glyph used)."""
    return sum(350 if c == "•" else _HELVETICA[ord(c) - 32] for c in text) * size / 1000


def wrap(text: str, max_width: float) -> list[str]:
    """Greedy line breaking by real glyph widths, hyphenating a long word that won't fit."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if width(candidate) <= max_width:
            line = candidate
            continue
        if word.isalpha() and word.islower() and len(word) >= 9:
            for cut in range(len(word) - 4, 3, -1):
                head = f"{line} {word[:cut]}-"
                if width(head) <= max_width:
                    lines.append(head)
                    line = word[cut:]
                    break
            else:
                lines.append(line)
                line = word
            continue
        lines.append(line)
        line = word
    return [*lines, line] if line else lines


def pdf_text(text: str) -> str:
    raw = text.encode("cp1252").decode("latin-1")  # WinAnsi bytes, one char each
    return raw.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(path: Path) -> None:
    pages: list[list[str]] = [[]]
    y = TOP

    def emit(op: str) -> None:
        pages[-1].append(op)

    def line_at(x: float, text: str, font: str, size: float, spacing: float = 0.0) -> None:
        place = f"{spacing:.4f} Tw 1 0 0 1 {x:.2f} {y:.2f} Tm"
        emit(f"BT /{font} {size:g} Tf {place} ({pdf_text(text)}) Tj ET")

    def room(height: float) -> None:
        nonlocal y
        if y - height < BOTTOM:
            pages.append([])
            y = TOP

    line_at(LEFT, PDF_TITLE, "F2", 18)
    y -= 34
    for kind, text in PDF_BODY:
        if kind == "h":
            room(3 * LEADING)
            y -= 6
            line_at(LEFT, text, "F2", 13)
            y -= LEADING + 6
            continue
        indent = 12.0 if kind == "li" else 0.0
        lines = wrap(text, WIDTH - indent)
        for i, line in enumerate(lines):
            room(LEADING)
            last = i == len(lines) - 1
            gaps = line.count(" ")
            spacing = 0.0 if last or not gaps else (WIDTH - indent - width(line)) / gaps
            if kind == "li" and i == 0:
                line_at(LEFT, "•", "F1", BODY_SIZE)
            line_at(LEFT + indent, line, "F1", BODY_SIZE, spacing)
            y -= LEADING
        y -= 4 if kind == "li" else 8

    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",  # the page tree, filled in once the page objects are numbered
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for number, ops in enumerate(pages, start=1):
        footer = f"ragstream samples - bad inputs and dead letters - page {number} of {len(pages)}"
        ops = [*ops, f"BT /F1 8 Tf 1 0 0 1 {LEFT:.2f} 40 Tm ({footer}) Tj ET"]
        stream = "\n".join(ops)
        objects.append(
            f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream"
        )
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents {len(objects)} 0 R >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1"))
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out.write("".join(f"{o:010d} 00000 n \n" for o in offsets).encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode())
    out.write(f"startxref\n{xref}\n%%EOF\n".encode())
    path.write_bytes(out.getvalue())


def make_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    stamp = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    document.core_properties.created = document.core_properties.modified = stamp
    document.core_properties.title = DOCX_TITLE
    document.add_heading(DOCX_TITLE, level=0)
    for kind, text in DOCX_BODY:
        if kind == "h1":
            document.add_heading(text, level=1)
        elif kind == "li":
            document.add_paragraph(text, style="List Bullet")
        elif kind == "table":
            table = document.add_table(rows=0, cols=len(DOCX_TABLE[0]))
            table.style = "Table Grid"
            for values in DOCX_TABLE:
                for cell, value in zip(table.add_row().cells, values, strict=True):
                    cell.text = value
        else:
            document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    # Rewrite the zip with fixed timestamps so that the bytes do not depend on the clock.
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, (2024, 1, 1, 0, 0, 0))
            dst.writestr(fixed, src.read(info), compress_type=zipfile.ZIP_DEFLATED)


if __name__ == "__main__":
    make_docx(HERE / "edit-stable-chunking.docx")
    make_pdf(HERE / "bad-inputs-and-dead-letters.pdf")
    for name in ("edit-stable-chunking.docx", "bad-inputs-and-dead-letters.pdf"):
        print(f"wrote samples/{name} ({(HERE / name).stat().st_size} bytes)")
