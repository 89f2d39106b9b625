"""Parse operator: one document's bytes (a file on disk, a git blob) → a `ParsedDocument` of
structural `Block`s.

Blocks (headings, paragraphs, list items, table rows, code, captions) are what the chunker
cuts on, so an edit in one paragraph changes one block and not its neighbours. Docling does
the format work, fully offline; bad input never escapes as a random exception but as a
`ParseError(stage, reason)` that the flow turns into a `DeadLetter`.

Scans are read by OCR (`operators.ocr`, setting `parse.ocr`): image files, and the PDF pages
without a usable text layer (every page under `force`). OCR lines go through the same
paragraph builder as a PDF's text lines, so their blocks carry pages like any PDF's, plus
where they came from (`origin="ocr"`), their box on the page and the engine's confidence.

Docling runs through `operators.docling_convert`: its converter for the formats read here,
without the torch and transformers imports that `docling.document_converter` costs.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from itertools import pairwise
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal, NamedTuple

import xxhash

from ragstream.core.cpus import usable_cpus
from ragstream.core.metadata import MetaOrigin, RawValue, merge_readings
from ragstream.core.models import Block, BlockKind, FileFingerprint, PageBox, ParsedDocument
from ragstream.core.telemetry import span
from ragstream.operators.docling_convert import converter, import_docling
from ragstream.operators.metadata import (
    RawFields,
    epub_chapters,
    epub_properties,
    file_properties,
    html_properties,
    office_properties,
    pdf_properties,
    split_front_matter,
)
from ragstream.operators.ocr import (
    IMAGE_TYPES,
    OCR_FORMAT,
    OcrCache,
    OcrEngine,
    OcrError,
    OcrOptions,
    OcrPage,
    engine_for,
    mean_confidence,
    ocr_page,
    open_pages,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from docling_core.types.doc import DoclingDocument, NodeItem, TableItem

FILE_TYPES = {".md": "md", ".markdown": "md", ".txt": "txt", ".html": "html", ".htm": "html"}
FILE_TYPES |= {".docx": "docx", ".pptx": "pptx", ".pdf": "pdf", ".epub": "epub"}
FILE_TYPES |= IMAGE_TYPES  # read by OCR
# a PDF page with fewer non-blank characters than this in its text layer has no usable text
MIN_PAGE_CHARS = 20
# pages of one PDF read at once: the cores this process may use, at most 4
OCR_THREADS = min(usable_cpus(), 4)
_BULLET = re.compile(r"^\s*[•◦▪‣∙·●○■□➢►–*-]\s+")
_PAGE_NUMBER = re.compile(r"([Pp]age\s*)?([\d\s\-–./]{1,9}|[ivxlc]{1,6})(\s*of\s*\d+)?")
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st"})
_SOFT_HYPHENS = ("\x02", "\xad")  # PDF fonts emit either at a hyphenation point
_KINDS: dict[str, BlockKind] = {"code": "code", "caption": "caption", "list_item": "list_item"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
# every key ends with the version of the metadata reading (operators/metadata.py): a data dir
# indexed before its documents' metadata was read re-reads each file once, re-embedding nothing
# whose text is the same (a Markdown file loses its front matter from its text then)
METADATA_KEY = "+meta1"
PLAIN_PARSER = "plain" + METADATA_KEY  # the parser key of every format that OCR never reads


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
    confidence: float | None = None  # set for a line read by OCR (0..1)

    @property
    def height(self) -> float:
        return max(self.top - self.bottom, 1.0)


def parser_key(path: str | Path, options: OcrOptions, ocr_read: bool = True) -> str:
    """What reading the file at `path` depends on besides its bytes: the parser key that its
    points and dead letters carry, so that a change re-reads it (`flows.sync`).

    A format OCR never reads has the constant `PLAIN_PARSER`, so an OCR setting leaves it
    alone. An image depends on the engine and the languages (`off`: it is not read); a PDF
    on `parse.ocr`, and when OCR read a page (`ocr_read`) also on the engine, the languages
    and the resolution pages are rendered at.
    """
    suffix = Path(path).suffix.lower()
    o = options
    engine = f"{o.engine}:{o.languages}"
    if suffix in IMAGE_TYPES:
        return ("image:off" if o.mode == "off" else f"image:{engine}") + METADATA_KEY
    if FILE_TYPES.get(suffix) != "pdf":
        return PLAIN_PARSER
    if o.mode == "off" or (o.mode == "auto" and not ocr_read):
        return f"pdf:{o.mode}{METADATA_KEY}"  # under auto, which pages OCR reads: no engine
    return f"pdf:{o.mode}:{engine}:{o.dpi}dpi{METADATA_KEY}"


def parser_keys(path: str | Path, options: OcrOptions) -> frozenset[str]:
    """Every parser key under which the file at `path` reads now as it did then: a PDF of
    which `auto` read no page by OCR reads the same whatever the engine."""
    return frozenset({parser_key(path, options), parser_key(path, options, ocr_read=False)})


def parse_file(
    path: Path,
    doc_id: str,
    source: str,
    fingerprint: FileFingerprint,
    timeout_s: float | None = None,
    ocr: OcrOptions | None = None,
    ocr_cache: OcrCache | None = None,
) -> ParsedDocument:
    """Read and parse one file on disk (`parse_bytes` over its bytes)."""
    data = _read(path)
    return parse_bytes(data, str(path), doc_id, source, fingerprint, timeout_s, ocr, ocr_cache)


def parse_bytes(
    data: bytes,
    locator: str,
    doc_id: str,
    source: str,
    fingerprint: FileFingerprint,
    timeout_s: float | None = None,
    ocr: OcrOptions | None = None,
    ocr_cache: OcrCache | None = None,
    source_fields: RawFields | None = None,
) -> ParsedDocument:
    """Parse one document's bytes, whose name ends `locator` (a path, or a git locator: its
    suffix says the format); raise `ParseError` for anything that cannot be indexed.

    `ocr` (default: `OcrOptions()`, auto) says which pages OCR reads; `ocr_cache` keeps what
    it read by the file's content hash and each page's pixels, so it is never read twice.
    """
    path = PurePosixPath(locator)
    file_type = FILE_TYPES.get(path.suffix.lower())
    options = ocr or OcrOptions()
    title: str | None = None
    pages: int | None = None
    ocr_pages: tuple[int, ...] = ()
    with span("ingest.parse.file", doc_id=doc_id, file_type=file_type) as current:
        file_type = _readable(file_type, path, options, data)
        current.set_attribute("bytes", len(data))
        digest = fingerprint.digest or xxhash.xxh3_128_hexdigest(data)
        data, meta = read_metadata(file_type, data, locator, fingerprint, source_fields)
        started = time.monotonic()
        ocr_run = _OcrRun(options, ocr_cache, digest, started, timeout_s)
        if file_type == "txt":
            blocks = text_to_blocks(decode_text(data))
        elif file_type in IMAGE_TYPES.values():
            blocks, pages, ocr_pages = ocr_run.image(data)
        elif file_type == "pdf" and options.mode != "off":
            blocks, pages, ocr_pages, title = _parse_pdf(path, data, ocr_run)
            current.set_attribute("ocr_pages", len(ocr_pages))
        elif file_type == "epub":  # its title is its package's (`meta.title`)
            blocks = _parse_epub(path, data, timeout_s)
        else:
            blocks, title = _parse_docling(path, file_type, data, timeout_s)
        _check_took(started, timeout_s)
        _has_text(blocks, file_type, options, ocr_pages)
        current.set_attribute("blocks", len(blocks))
    return ParsedDocument(
        doc_id=doc_id,
        source=source,
        path=locator,
        file_type=file_type,
        title=meta.title or title or _first_heading(blocks) or path.stem,
        fingerprint=fingerprint,
        blocks=tuple(blocks),
        pages=pages,
        ocr_pages=ocr_pages,
        parser=parser_key(locator, options, ocr_read=bool(ocr_pages)),
        metadata=meta.values,
        metadata_origin=meta.origins,
        metadata_notes=meta.notes,
    )


def _readable(file_type: str | None, path: PurePosixPath, options: OcrOptions, data: bytes) -> str:
    """The file type of a file this parser can read, else `ParseError` saying why not."""
    if file_type is None or (file_type in IMAGE_TYPES.values() and options.mode == "off"):
        raise ParseError("parse", f"unsupported file type {path.suffix or '(none)'!r}")
    if not data:
        raise ParseError("read", "empty file")
    return file_type


def _first_heading(blocks: Sequence[Block]) -> str | None:
    return next((b.text for b in blocks if b.kind == "heading"), None)


class DocMetadata(NamedTuple):
    """A document's metadata as read: each field's value and where it came from, what could
    not be read, and the title its author gave in front matter ("" for none)."""

    values: dict[str, RawValue]
    origins: dict[str, MetaOrigin]
    notes: tuple[str, ...]
    title: str


def read_metadata(
    file_type: str,
    data: bytes,
    locator: str,
    fingerprint: FileFingerprint,
    source_fields: RawFields | None = None,
) -> tuple[bytes, DocMetadata]:
    """The bytes left to parse (a Markdown file without its front matter, which is metadata,
    never text) and the document's own metadata (`operators.metadata`), each field from the
    strongest place that names it."""
    on_disk = file_properties(fingerprint.size, fingerprint.mtime_ns, locator)
    if fingerprint.commit:  # a git version's mtime slot holds a blob key: its time is the commit's
        on_disk.pop("mtime", None)
    readings: dict[MetaOrigin, RawFields] = {
        "file": on_disk,
        "source": source_fields or {},
    }
    notes: tuple[str, ...] = ()
    if file_type == "md":
        text = decode_text(data)
        front = split_front_matter(text)
        readings["front_matter"] = front.fields
        notes = (front.error,) if front.error else ()
        if front.body != text:
            data = front.body.encode("utf-8")
    elif file_type in ("docx", "pptx"):
        readings["properties"] = office_properties(data)
    elif file_type == "pdf":
        readings["properties"] = pdf_properties(data)
    elif file_type == "html":
        readings["properties"] = html_properties(decode_text(data))
    elif file_type == "epub":
        readings["properties"] = epub_properties(data)
    merged = merge_readings(readings)
    # an author's own title: front matter's, or an EPUB's (a book's OPF names it reliably)
    title = readings.get("front_matter", {}).get("title") or (
        readings["properties"].get("title") if file_type == "epub" else None
    )
    return data, DocMetadata(
        values={name: value for name, (value, _) in merged.items()},
        origins={name: origin for name, (_, origin) in merged.items()},
        notes=notes,
        title=title.strip() if isinstance(title, str) else "",
    )


def _check_took(started: float, timeout_s: float | None) -> None:
    """Declarative backends (md, html, office) cannot be interrupted mid-parse; the limit is
    still enforced afterwards so that it means the same for every format."""
    elapsed = time.monotonic() - started
    if timeout_s is not None and elapsed > timeout_s:
        raise ParseError("parse", f"parse timed out (limit {timeout_s:g}s): took {elapsed:.2f}s")


def _parse_docling(
    path: PurePosixPath, file_type: str, data: bytes, timeout_s: float | None
) -> tuple[list[Block], str | None]:
    """Markdown, HTML, Office and (OCR off) PDF through docling: blocks and the title."""
    if file_type == "md":  # docling gets clean UTF-8, whatever the file's encoding
        data = decode_text(data).encode()
    elif file_type == "html":  # bytes kept: BeautifulSoup honours <meta charset>
        decode_text(data)
    doc = _convert(f"{path.stem}.{file_type}", data, timeout_s)
    blocks = pdf_to_blocks(doc) if file_type == "pdf" else doc_to_blocks(doc)
    return blocks, next((t.text.strip() for t in doc.texts if t.label == "title"), None)


def _parse_epub(path: PurePosixPath, data: bytes, timeout_s: float | None) -> list[Block]:
    """An EPUB's chapters in reading order, each XHTML document read as HTML by docling."""
    chapters = epub_chapters(data)
    if not chapters:
        raise ParseError("parse", "corrupt or unreadable EPUB: no package or no chapters")
    blocks: list[Block] = []
    for i, chapter in enumerate(chapters):
        blocks += _parse_docling(PurePosixPath(f"{path.stem}-{i}"), "html", chapter, timeout_s)[0]
    return blocks


def _has_text(
    blocks: Sequence[Block], file_type: str, options: OcrOptions, ocr_pages: tuple[int, ...]
) -> None:
    """`ParseError` for a document that read as no text at all, with a hint why."""
    if not blocks:
        raise ParseError("parse", "no text content" + _empty_hint(file_type, options, ocr_pages))


def _empty_hint(file_type: str, options: OcrOptions, ocr_pages: tuple[int, ...]) -> str:
    if ocr_pages:
        n = len(ocr_pages)
        return f" (OCR found no text on {'the page' if n == 1 else f'any of {n} pages'})"
    if file_type == "pdf":
        if options.mode == "off":
            return " (image-only PDF? OCR is off: parse.ocr=off)"
        return " (no text layer and no page image to OCR)"
    return ""


def _read(path: Path) -> bytes:
    """All bytes at once, so docling never races a file that changes or vanishes under it
    (the sync flow reads through its source instead: connectors/fs.py `read_file`)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ParseError("read", "file vanished before it could be read") from None
    except PermissionError:
        raise ParseError("read", "permission denied: the file is not readable") from None
    except OSError as exc:
        raise ParseError("read", f"could not read file: {exc.strerror or exc}") from None
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


def _convert(name: str, data: bytes, timeout_s: float | None) -> DoclingDocument:
    """Run docling on in-memory bytes; every failure becomes a short `ParseError` reason."""
    import_docling()
    from docling.datamodel.base_models import ConversionStatus
    from docling_core.types.io import DocumentStream

    kind = name.rsplit(".", 1)[-1].upper()
    stream = DocumentStream(name=name, stream=BytesIO(data))
    try:
        result = converter(timeout_s).convert(stream)
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
            emit("link" if _only_link(node) else "list_item", node.text or " ".join(inline))
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
                emit(
                    "link" if _only_link(node) else _KINDS.get(label.value, "paragraph"), node.text
                )
    return blocks


def _only_link(node: NodeItem) -> bool:
    """A text that is one hyperlink and nothing else: a table-of-contents entry or a
    "next chapter" link, navigation rather than prose."""
    return bool(getattr(node, "hyperlink", None)) and bool(getattr(node, "text", ""))


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
    return lines_to_paragraphs(pdf_lines(doc))


def pdf_lines(doc: DoclingDocument) -> list[PdfLine]:
    """The text lines of docling's native PDF pipeline, in its order, in PDF points."""
    from docling_core.types.doc import TextItem

    lines = []
    for item, _ in doc.iterate_items():
        if isinstance(item, TextItem) and item.prov and item.text.strip():
            prov = item.prov[0]
            box = prov.bbox.to_bottom_left_origin(doc.pages[prov.page_no].size.height)
            lines.append(PdfLine(item.text, prov.page_no, box.l, box.t, box.r, box.b))
    return lines


def lines_to_paragraphs(
    lines: list[PdfLine], page_sizes: Mapping[int, tuple[float, float]] | None = None
) -> list[Block]:
    """Group PDF lines (in the parser's order) into paragraph blocks, one page at a time.

    A new paragraph starts on a new page, on a vertical step clearly larger than the typical
    line pitch, on a jump back up (next column, table cell, figure label), on a bullet, on a
    first-line indent, or after a short line that ends a sentence or stands alone (a heading).
    Running headers/footers and bare page numbers are dropped. A paragraph of OCR lines (a
    `confidence` set) is an `origin="ocr"` block with their mean confidence and, when its
    page's (width, height) is in `page_sizes`, their box on the page.
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
            page = para[0].page
            size = page_sizes.get(page) if page_sizes else None
            blocks.append(Block(kind=kind, text=text, page=page, **_ocr_provenance(para, size)))
    return blocks


def _ocr_provenance(
    para: list[PdfLine], size: tuple[float, float] | None
) -> dict[str, str | float | PageBox | None]:
    """origin, confidence and box of a paragraph read by OCR; nothing for text-layer lines."""
    read = [ln for ln in para if ln.confidence is not None]
    confidence = mean_confidence((ln.text, ln.confidence or 0.0) for ln in read)
    if confidence is None:
        return {}
    box: PageBox | None = None
    if size and size[0] > 0 and size[1] > 0:
        width, height = size
        left, right = min(ln.left for ln in read), max(ln.right for ln in read)
        top, bottom = max(ln.top for ln in read), min(ln.bottom for ln in read)
        box = (
            round(max(0.0, left / width), 4),
            round(max(0.0, 1 - top / height), 4),
            round(min(1.0, right / width), 4),
            round(min(1.0, 1 - bottom / height), 4),
        )
    return {"origin": "ocr", "confidence": confidence, "bbox": box}


def ocr_lines(page: OcrPage, page_no: int, scale: float = 1.0) -> list[PdfLine]:
    """OCR lines (pixels, top-left origin) as PDF lines (bottom-left origin) in the units
    of `scale` per pixel: 1 for an image file, 72/dpi to match a PDF page's points."""
    height = page.height
    return [
        PdfLine(
            ln.text,
            page_no,
            ln.left * scale,
            (height - ln.top) * scale,
            ln.right * scale,
            (height - ln.bottom) * scale,
            confidence=ln.confidence,
        )
        for ln in page.lines
    ]


# --- OCR of image files and PDF pages ------------------------------------------------------


@dataclass
class _OcrRun:
    """OCR for one file: its options, the cache, and the parse's deadline."""

    options: OcrOptions
    cache: OcrCache | None
    digest: str  # xxh3-128 of the file's bytes
    started: float
    timeout_s: float | None
    read: int = 0  # pages read so far (for the timeout's message)

    @property
    def engine(self) -> OcrEngine:
        try:
            return engine_for(self.options.engine, self.options.languages)
        except OcrError as err:
            raise ParseError("parse", err.reason) from None

    def _file_key(self, pdf: bool) -> str:
        """The file's bytes and the engine; for a PDF also what decides which pages are
        read and how they are rendered (an image file is read whole, as it is)."""
        o = self.options
        how = f"pdf:{o.mode}:{o.dpi}" if pdf else "image"
        return f"file:{self.digest}:{self.engine.identity}:{how}:{OCR_FORMAT}"

    def cached(self, pdf: bool) -> tuple[int, dict[int, OcrPage]] | None:
        """(page count, OCR'd pages) of this very file under these settings, if cached."""
        if self.cache is None or (raw := self.cache.get(self._file_key(pdf))) is None:
            return None
        data = json.loads(raw)
        pages = {int(no): OcrPage.from_json(json.dumps(p)) for no, p in data["ocr"].items()}
        if any(p is None for p in pages.values()):
            return None
        return int(data["pages"]), {no: p for no, p in pages.items() if p is not None}

    def store(self, pdf: bool, total: int, pages: dict[int, OcrPage]) -> None:
        if self.cache is not None:
            ocr = {str(no): json.loads(page.to_json()) for no, page in pages.items()}
            value = json.dumps({"pages": total, "ocr": ocr}, separators=(",", ":"))
            self.cache.put(self._file_key(pdf), value)

    def check_time(self, todo: int) -> None:
        elapsed = time.monotonic() - self.started
        if self.timeout_s is not None and elapsed > self.timeout_s:
            raise ParseError(
                "parse",
                f"parse timed out (limit {self.timeout_s:g}s): OCR read {self.read} of "
                f"{todo} pages in {elapsed:.1f}s",
            )

    def image(self, data: bytes) -> tuple[list[Block], int, tuple[int, ...]]:
        """An image file: every page (a TIFF's frames) read by OCR."""
        cached = self.cached(pdf=False)
        if cached is None:
            engine, pages = self.engine, {}
            try:
                frames = open_pages(data, self.options.max_page_pixels, self.options.max_pages)
                for no, (image, dpi) in enumerate(frames, 1):
                    self.check_time(no)
                    pages[no] = ocr_page(image, engine, None, dpi)
                    self.read += 1
            except OcrError as err:
                raise ParseError("parse", err.reason) from None
            self.store(False, len(pages), pages)
            cached = len(pages), pages
        total, pages = cached
        lines = [ln for no, page in sorted(pages.items()) for ln in ocr_lines(page, no)]
        sizes = {no: (float(p.width), float(p.height)) for no, p in pages.items()}
        return lines_to_paragraphs(lines, sizes), total, tuple(sorted(pages))

    def pdf_pages(self, data: bytes, todo: list[int]) -> dict[int, OcrPage]:
        """Render these pages at `dpi` (pypdfium2, one at a time: pdfium is not thread-safe)
        and read them, page cache first, on up to OCR_THREADS pages at once (the engine
        releases the GIL), so a multi-page scan uses every core."""
        import pypdfium2 as pdfium
        from docling.utils.locks import pypdfium2_lock

        engine, scale = self.engine, self.options.dpi / 72
        with pypdfium2_lock:
            pdf = pdfium.PdfDocument(data)

        def read(no: int) -> OcrPage:
            self.check_time(len(todo))
            with pypdfium2_lock:
                page = pdf[no - 1]
                try:
                    width, height = page.get_size()
                    pixels = round(width * scale) * round(height * scale)
                    if pixels > self.options.max_page_pixels:
                        raise ParseError(
                            "parse",
                            f"page {no} is {width:.0f} × {height:.0f} pt: {pixels} pixels at "
                            f"{self.options.dpi} dpi, more than parse.ocr_max_page_pixels "
                            f"({self.options.max_page_pixels})",
                        )
                    image = page.render(scale=scale, grayscale=True).to_pil().convert("L")
                finally:
                    page.close()
            result = ocr_page(image, engine, self.cache, self.options.dpi)
            self.read += 1
            return result

        threads = min(OCR_THREADS, len(todo))
        try:
            if threads <= 1:
                return {no: read(no) for no in todo}
            with ThreadPoolExecutor(threads, thread_name_prefix="ocr") as pool:
                return dict(zip(todo, pool.map(read, todo), strict=True))
        finally:
            with pypdfium2_lock:
                pdf.close()


def _pdf_plan(data: bytes, options: OcrOptions) -> tuple[int, list[int]]:
    """(page count, the pages OCR reads): under `auto` those whose text layer holds fewer
    than MIN_PAGE_CHARS characters and that show an image; under `force` all of them."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c
    from docling.utils.locks import pypdfium2_lock

    with pypdfium2_lock:
        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as err:
            if "password" in str(err).lower():
                raise ParseError(
                    "parse", "password-protected PDF: it cannot be read without its password"
                ) from None
            raise ParseError("parse", f"corrupt or unreadable PDF: {_first_line(err)}") from None
        try:
            total, todo = len(pdf), []
            for index in range(total):
                page = pdf[index]
                if options.mode == "force" or _needs_ocr(page, pdfium_c.FPDF_PAGEOBJ_IMAGE):
                    todo.append(index + 1)
                page.close()
        finally:
            pdf.close()
    if len(todo) > options.max_pages:
        raise ParseError(
            "parse",
            f"{len(todo)} pages to OCR, more than parse.ocr_max_pages ({options.max_pages})",
        )
    return total, todo


def _needs_ocr(page: object, image_type: int) -> bool:
    """No usable text layer, and something to read: an image on the page."""
    if not any(True for _ in page.get_objects(filter=[image_type], max_depth=3)):  # type: ignore[attr-defined]
        return False
    textpage = page.get_textpage()  # type: ignore[attr-defined]
    try:
        text = textpage.get_text_range()
    finally:
        textpage.close()
    return sum(not c.isspace() for c in text) < MIN_PAGE_CHARS


def _parse_pdf(
    path: PurePosixPath, data: bytes, run: _OcrRun
) -> tuple[list[Block], int, tuple[int, ...], str | None]:
    """A PDF with OCR on: the text layer (docling) where a page has one, OCR elsewhere."""
    cached = run.cached(pdf=True)
    if cached is not None:
        total, read = cached
        todo = sorted(read)
    else:
        total, todo = _pdf_plan(data, run.options)
    lines: list[PdfLine] = []
    title = None
    if len(todo) < total:  # some pages have a text layer: docling reads those
        doc = _convert(f"{path.stem}.pdf", data, run.timeout_s)
        lines = [ln for ln in pdf_lines(doc) if ln.page not in todo]
        title = next((t.text.strip() for t in doc.texts if t.label == "title"), None)
    if cached is None:
        read = run.pdf_pages(data, todo) if todo else {}
        run.store(True, total, read)
    scale = 72 / run.options.dpi
    for no, page in sorted(read.items()):
        lines.extend(ocr_lines(page, no, scale))
    sizes = {no: (p.width * scale, p.height * scale) for no, p in read.items()}
    lines.sort(key=lambda ln: ln.page)  # stable: each page keeps its reading order
    return lines_to_paragraphs(lines, sizes), total, tuple(todo), title


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
