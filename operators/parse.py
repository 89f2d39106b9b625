"""Parse operator: one file on disk → a `ParsedDocument` of structural `Block`s.

Blocks (headings, paragraphs, list items, table rows, code, captions) are what the chunker
cuts on, so an edit in one paragraph changes one block and not its neighbours. Docling does
the format work, fully offline; bad input never escapes as a random exception but as a
`ParseError(stage, reason)` that the flow turns into a `DeadLetter`.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from io import BytesIO
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ragstream.core.models import Block, BlockKind, FileFingerprint, ParsedDocument
from ragstream.core.telemetry import span

if TYPE_CHECKING:
    from docling.document_converter import DocumentConverter
    from docling_core.types.doc import DoclingDocument, NodeItem, TableItem

FILE_TYPES = {".md": "md", ".markdown": "md", ".txt": "txt", ".html": "html", ".htm": "html"}
FILE_TYPES |= {".docx": "docx", ".pptx": "pptx", ".pdf": "pdf"}
_BULLET = re.compile(r"^\s*[•◦▪‣∙·●○■□➢►–*-]\s+")
_PAGE_NUMBER = re.compile(r"([Pp]age\s*)?([\d\s\-–./]{1,9}|[ivxlc]{1,6})(\s*of\s*\d+)?")
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st"})
_SOFT_HYPHENS = ("\x02", "\xad")  # PDF fonts emit either at a hyphenation point
_KINDS: dict[str, BlockKind] = {"code": "code", "caption": "caption", "list_item": "list_item"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


class ParseError(Exception):
    """A file that cannot become blocks: `stage` is "read" or "parse", `reason` is for humans."""

    def __init__(self, stage: Literal["read", "parse"], reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage: Literal["read", "parse"] = stage
        self.reason = reason

    def __reduce__(self) -> tuple[type[ParseError], tuple[str, str]]:
        return ParseError, (self.stage, self.reason)  # survives pickling between workers


@dataclass(frozen=True)
class PdfLine:
    """One text line of a PDF page; coordinates are bottom-left origin, so top > bottom."""

    text: str
    page: int
    left: float
    top: float
    right: float
    bottom: float

    @property
    def height(self) -> float:
        return max(self.top - self.bottom, 1.0)


def parse_file(
    path: Path,
    doc_id: str,
    source: str,
    fingerprint: FileFingerprint,
    timeout_s: float | None = None,
) -> ParsedDocument:
    """Read and parse one file; raise `ParseError` for anything that cannot be indexed."""
    file_type = FILE_TYPES.get(path.suffix.lower())
    title: str | None = None
    with span("ingest.parse.file", doc_id=doc_id, file_type=file_type) as current:
        if file_type is None:
            raise ParseError("parse", f"unsupported file type {path.suffix or '(none)'!r}")
        data = _read(path)
        current.set_attribute("bytes", len(data))
        started = time.monotonic()
        if file_type == "txt":
            blocks = text_to_blocks(decode_text(data))
        else:
            if file_type == "md":  # docling gets clean UTF-8, whatever the file's encoding
                data = decode_text(data).encode()
            elif file_type == "html":  # bytes kept: BeautifulSoup honours <meta charset>
                decode_text(data)
            doc = _convert(f"{path.stem}.{file_type}", data, timeout_s)
            blocks = pdf_to_blocks(doc) if file_type == "pdf" else doc_to_blocks(doc)
            title = next((t.text.strip() for t in doc.texts if t.label == "title"), None)
        elapsed = time.monotonic() - started
        if timeout_s is not None and elapsed > timeout_s:
            # Declarative backends (md, html, office) cannot be interrupted mid-parse; the
            # limit is still enforced afterwards so that it means the same for every format.
            raise ParseError(
                "parse", f"parse timed out (limit {timeout_s:g}s): took {elapsed:.2f}s"
            )
        if not blocks:
            hint = " (image-only PDF? OCR is not available offline)" if file_type == "pdf" else ""
            raise ParseError("parse", f"no text content{hint}")
        current.set_attribute("blocks", len(blocks))
    heading = next((b.text for b in blocks if b.kind == "heading"), None)
    return ParsedDocument(
        doc_id=doc_id,
        source=source,
        path=str(path),
        file_type=file_type,
        title=title or heading or path.stem,
        fingerprint=fingerprint,
        blocks=tuple(blocks),
    )


def _read(path: Path) -> bytes:
    """All bytes at once, so docling never races a file that changes or vanishes under it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ParseError("read", "file vanished before it could be read") from None
    except PermissionError:
        raise ParseError("read", "permission denied: the file is not readable") from None
    except OSError as exc:
        raise ParseError("read", f"could not read file: {exc.strerror or exc}") from None
    if not data:
        raise ParseError("read", "empty file")
    return data


def decode_text(data: bytes) -> str:
    """UTF-8 (BOMs honoured), else cp1252, else latin-1; binary junk is refused.

    A text-extension file holding NUL bytes or mostly control characters is not text in a
    legacy encoding but something else misnamed, and indexing it would index garbage.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 is all NULs to a byte scan
        return data.decode("utf-16", errors="replace")
    if b"\x00" in data:
        raise ParseError("parse", "binary content in a text file (NUL bytes)")
    for codec in ("utf-8-sig", "cp1252", "latin-1"):  # latin-1 maps every byte: never fails
        try:
            text = data.decode(codec)
            break
        except UnicodeDecodeError:
            continue
    if len(_CONTROL.findall(text)) > 0.05 * len(text):
        raise ParseError("parse", "binary content in a text file (control characters)")
    return text


def text_to_blocks(text: str) -> list[Block]:
    """Plain text: one paragraph per blank-line-separated run of lines.

    Docling has no .txt backend, and reading text as Markdown would turn indented lines into
    code and `#` lines into headings; blank lines are the only structure plain text promises.
    """
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")))
    return [Block(kind="paragraph", text=p) for p in paragraphs if p]


@lru_cache(maxsize=4)
def _converter(timeout_s: float | None) -> DocumentConverter:
    """One converter per process (and per timeout setting): importing docling takes seconds.

    PDFs use the model-free native pipeline: the layout/OCR pipelines fetch weights from the
    Hugging Face hub, which this project never contacts.
    """
    from docling.backend.pypdfium2_backend import PyPdfiumDocumentBackend
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.document_converter import DocumentConverter, PdfFormatOption
    from docling.pipeline.native_pdf_pipeline import NativePdfPipeline

    options = NativePdfPipelineOptions(
        generate_page_images=False, generate_picture_images=False, document_timeout=timeout_s
    )
    pdf = PdfFormatOption(
        pipeline_cls=NativePdfPipeline, pipeline_options=options, backend=PyPdfiumDocumentBackend
    )
    formats = [InputFormat.MD, InputFormat.HTML, InputFormat.DOCX, InputFormat.PPTX]
    return DocumentConverter(
        allowed_formats=[*formats, InputFormat.PDF], format_options={InputFormat.PDF: pdf}
    )


def _convert(name: str, data: bytes, timeout_s: float | None) -> DoclingDocument:
    """Run docling on in-memory bytes; every failure becomes a short `ParseError` reason."""
    from docling.datamodel.base_models import ConversionStatus
    from docling_core.types.io import DocumentStream

    kind = name.rsplit(".", 1)[-1].upper()
    stream = DocumentStream(name=name, stream=BytesIO(data))
    try:
        result = _converter(timeout_s).convert(stream, raises_on_error=False)
    except Exception as exc:  # docling raises assorted types for corrupt input
        raise ParseError("parse", f"corrupt or unreadable {kind}: {_first_line(exc)}") from exc
    detail = _first_line(result.errors[0].error_message if result.errors else result.status)
    if any(e.category == "timeout" for e in result.errors):
        raise ParseError("parse", f"parse timed out (limit {timeout_s:g}s): {detail}")
    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        raise ParseError("parse", f"corrupt or unreadable {kind}: {detail}")
    return result.document


def _first_line(error: object) -> str:
    """The gist of a docling message: first line, no document hash, bounded length."""
    lines = re.sub(r"\s*with hash [0-9a-f]+", "", str(error)).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


def doc_to_blocks(doc: DoclingDocument) -> list[Block]:
    """Walk docling's tree in reading order, keeping the heading path of every block.

    Docling splits a paragraph with inline markup (bold, links, `code`) into an inline group
    of fragments; each group becomes one block, so paragraphs stay whole. A heading's own
    section_path ends with itself, so it travels with the text it introduces.
    """
    from docling_core.types.doc import GroupItem, ListItem, TableItem, TextItem
    from docling_core.types.doc.labels import DocItemLabel, GroupLabel

    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    consumed: set[str] = set()  # self_refs of fragments already folded into a block

    def inline_text(node: NodeItem) -> str:
        parts = []
        for child, _ in doc.iterate_items(root=node, with_groups=True):
            consumed.add(child.self_ref)
            if isinstance(child, TextItem):
                parts.append(child.text)
        return _join_fragments(parts)

    def emit(kind: BlockKind, text: str) -> None:
        text = text if kind == "code" else " ".join(text.split())
        if text.strip():
            path = tuple(h for _, h in headings)
            blocks.append(Block(kind=kind, text=text, section_path=path))

    for node, _ in doc.iterate_items(with_groups=True):
        if node.self_ref in consumed:
            continue
        if isinstance(node, GroupItem) and node.label == GroupLabel.INLINE:
            emit("paragraph", inline_text(node))
        elif isinstance(node, TableItem):
            for row in table_rows(node):
                emit("table_row", row)
        elif isinstance(node, ListItem):
            groups = [c.resolve(doc) for c in node.children]
            inline = [inline_text(g) for g in groups if g.label == GroupLabel.INLINE]
            emit("list_item", node.text or " ".join(inline))
        elif isinstance(node, TextItem):
            label = node.label
            if label in (DocItemLabel.TITLE, DocItemLabel.SECTION_HEADER):
                level = 0 if label == DocItemLabel.TITLE else getattr(node, "level", 1)
                text = " ".join(node.text.removesuffix("¶").split())  # Sphinx anchor marks
                while headings and headings[-1][0] >= level:
                    headings.pop()
                if text:
                    headings.append((level, text))
                emit("heading", text)
            elif label not in (DocItemLabel.PAGE_HEADER, DocItemLabel.PAGE_FOOTER):
                emit(_KINDS.get(label.value, "paragraph"), node.text)
    return blocks


def _join_fragments(parts: list[str]) -> str:
    """Join inline fragments with spaces, except before closing and after opening marks."""
    out = ""
    for part in (p.strip() for p in parts):
        if part:
            glue = (
                out and not out.endswith(("(", "[", "/")) and not part.startswith(tuple(",.;:!?)]"))
            )
            out += (" " if glue else "") + part
    return out


def table_rows(table: TableItem) -> list[str]:
    """One string per body row, "header: value | header: value", spans counted once.

    A row that names its columns still makes sense when the chunker lifts it out of its
    table; rows of a headerless table are just their cells joined with " | ".
    """
    grid = table.data.grid
    n_header = 0
    while n_header < len(grid) and all(c.column_header for c in grid[n_header]):
        n_header += 1
    names: list[str] = []
    for col in range(table.data.num_cols):
        texts = [grid[r][col].text.strip() for r in range(n_header) if col < len(grid[r])]
        names.append(" / ".join(dict.fromkeys(t for t in texts if t)))
    rows = []
    for row in grid[n_header:] if n_header < len(grid) else grid:
        seen: set[int] = set()
        cells = []
        for col, cell in enumerate(row):
            if cell.start_col_offset_idx in seen or not cell.text.strip():
                continue
            seen.add(cell.start_col_offset_idx)
            value = " ".join(cell.text.split())
            name = names[col] if col < len(names) and n_header < len(grid) else ""
            cells.append(f"{name}: {value}" if name and name != value else value)
        if cells:
            rows.append(" | ".join(cells))
    return rows


def pdf_to_blocks(doc: DoclingDocument) -> list[Block]:
    """The native PDF pipeline yields one text item per line; rebuild the paragraphs."""
    from docling_core.types.doc import TextItem

    lines = []
    for item, _ in doc.iterate_items():
        if isinstance(item, TextItem) and item.prov and item.text.strip():
            prov = item.prov[0]
            box = prov.bbox.to_bottom_left_origin(doc.pages[prov.page_no].size.height)
            lines.append(PdfLine(item.text, prov.page_no, box.l, box.t, box.r, box.b))
    return lines_to_paragraphs(lines)


def lines_to_paragraphs(lines: list[PdfLine]) -> list[Block]:
    """Group PDF lines (in the parser's order) into paragraph blocks, one page at a time.

    A new paragraph starts on a new page, on a vertical step clearly larger than the typical
    line pitch, on a jump back up (next column, table cell, figure label), on a bullet, on a
    first-line indent, or after a short line that ends a sentence or stands alone (a heading).
    Running headers/footers and bare page numbers are dropped.
    """
    lines = _drop_page_furniture([ln for ln in lines if ln.text.strip()])
    pitches = [
        d
        for a, b in pairwise(lines)
        if a.page == b.page and 0.5 * a.height < (d := _drop(a, b)) < 3 * a.height
    ]
    pitch = statistics.median(pitches) if pitches else 0.0
    paragraphs: list[list[PdfLine]] = []
    for line in lines:
        if not paragraphs or _starts_paragraph(paragraphs[-1], line, pitch):
            paragraphs.append([line])
        else:
            paragraphs[-1].append(line)
    blocks = []
    for para in paragraphs:
        text = _join_lines([ln.text for ln in para])
        kind: BlockKind = "list_item" if _BULLET.match(text) else "paragraph"
        if text := _BULLET.sub("", text):
            blocks.append(Block(kind=kind, text=text, page=para[0].page))
    return blocks


def _drop(a: PdfLine, b: PdfLine) -> float:
    """How far line b sits below line a; the smaller of the top and bottom steps, because
    a missing ascender or descender moves only one edge of a line's box."""
    return min(a.top - b.top, a.bottom - b.bottom)


def _starts_paragraph(para: list[PdfLine], line: PdfLine, pitch: float) -> bool:
    prev = para[-1]
    if line.page != prev.page:
        return True
    height = min(prev.height, line.height)
    overlap = min(prev.top, line.top) - max(prev.bottom, line.bottom)
    if overlap > 0.5 * height and 0 <= line.left - prev.right + height < 7 * height:
        return False  # same visual line: a superscript, a footnote mark, a table row
    left, right = min(ln.left for ln in para), max(ln.right for ln in para)
    ends_sentence = prev.text.rstrip().endswith((".", "!", "?", ":"))
    drop = _drop(prev, line)
    if drop < 0.5 * height:
        # Moved up: a new column continues the paragraph only if the last line was full
        # and did not end a sentence; otherwise it is a table cell, a label, a new block.
        full = len(para) > 1 and prev.right >= right - 0.1 * (right - left)
        return not (full and not ends_sentence and line.left >= prev.right)
    if pitch and drop > 1.3 * pitch:
        return True
    if _BULLET.match(line.text):
        return True
    if line.left - prev.left > height and not _BULLET.match(para[0].text):
        return True  # first-line indent (a bullet's hanging indent is not one)
    left, right = min(left, line.left), max(right, line.right)
    short = prev.right < right - 0.15 * (right - left)
    alone = len(para) == 1 and prev.right - prev.left < 0.65 * (right - left)
    return (short and ends_sentence) or (alone and not prev.text.rstrip().endswith((",", "-")))


def _join_lines(texts: list[str]) -> str:
    """Join wrapped lines: "exam-" + "ple" → "example", but "state-of-the-" + "art" keeps
    its hyphen and "Figure 3-" + "Left" keeps hyphen and space."""
    out = ""
    for raw in texts:
        line = " ".join(raw.translate(_LIGATURES).split())
        if not line:
            continue
        if out.endswith(_SOFT_HYPHENS):
            out = out[:-1] + line
        elif out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[0].islower():
            last_word = out.rsplit(" ", 1)[-1]
            out = (out if "-" in last_word[:-1] else out[:-1]) + line
        else:
            out = f"{out} {line}" if out else line
    return " ".join(_CONTROL.sub("", out).split())


def _drop_page_furniture(lines: list[PdfLine]) -> list[PdfLine]:
    """Drop running headers/footers (the same text, digits aside, in the top or bottom line
    band of several pages) and bare page numbers: they repeat on every page, answer nothing.
    """
    pages: dict[int, list[PdfLine]] = {}
    for line in lines:
        pages.setdefault(line.page, []).append(line)
    edges: set[int] = set()
    for page_lines in pages.values():
        top = max(page_lines, key=lambda ln: ln.top).bottom
        bottom = min(page_lines, key=lambda ln: ln.bottom).top
        edges.update(id(ln) for ln in page_lines if ln.top > top or ln.bottom < bottom)
    keys = {id(ln): re.sub(r"\d+", "#", " ".join(ln.text.lower().split())) for ln in lines}
    on_pages = Counter(
        key for key, _ in {(keys[id(ln)], ln.page) for ln in lines if id(ln) in edges}
    )

    def furniture(ln: PdfLine) -> bool:
        return bool(_PAGE_NUMBER.fullmatch(ln.text.strip())) or on_pages[keys[id(ln)]] > 1

    return [ln for ln in lines if id(ln) not in edges or not furniture(ln)]
