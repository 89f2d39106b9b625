"""Parse operator: one file on disk → a `ParsedDocument` of structural `Block`s.

Blocks (headings, paragraphs, list items, table rows, code, captions) are what the chunker
cuts on, so an edit in one paragraph changes one block and not its neighbours. Docling does
the format work, fully offline; bad input never escapes as a random exception but as a
`ParseError(stage, reason)` that the flow turns into a `DeadLetter`.
"""

from __future__ import annotations

import os
import re
import statistics
import time
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from core.models import Block, BlockKind, FileFingerprint, ParsedDocument
from core.telemetry import span

if TYPE_CHECKING:
    from docling.document_converter import DocumentConverter
    from docling_core.types.doc import DoclingDocument, NodeItem, TableItem

FILE_TYPES = {".md": "md", ".markdown": "md", ".txt": "txt", ".html": "html", ".htm": "html"}
FILE_TYPES |= {".docx": "docx", ".pptx": "pptx", ".pdf": "pdf"}
_TEXT_TYPES = {"md", "txt", "html"}  # checked for binary junk and decoded by us, not docling
_BULLET = re.compile(r"^\s*[•◦▪‣∙·●○■□➢►–*-]\s+")
_PAGE_NUMBER = re.compile(r"(?i)(page\s*)?[\d\s\-–./]{1,9}(of\s*\d+)?")
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st"})
_SOFT_HYPHENS = ("\x02", "\xad")  # PDF fonts emit either for a hyphenation point


class ParseError(Exception):
    """A file that cannot become blocks: `stage` is "read" or "parse", `reason` is for humans."""

    def __init__(self, stage: Literal["read", "parse"], reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage: Literal["read", "parse"] = stage
        self.reason = reason


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
    if file_type is None:
        raise ParseError("parse", f"unsupported file type {path.suffix or '(no extension)'!r}")
    data = _read(path)
    with span("ingest.parse", doc_id=doc_id, file_type=file_type, bytes=len(data)) as current:
        started = time.monotonic()
        if file_type in _TEXT_TYPES:
            text = decode_text(data)
            # Markdown goes to docling as clean UTF-8; HTML keeps its bytes so BeautifulSoup
            # can honour a declared <meta charset>.
            data = text.encode() if file_type == "md" else data
        if file_type == "txt":
            blocks = text_to_blocks(text)
        else:
            doc = _convert(f"{path.stem}.{file_type}", data, timeout_s)
            blocks = pdf_to_blocks(doc) if file_type == "pdf" else doc_to_blocks(doc)
        elapsed = time.monotonic() - started
        if timeout_s is not None and elapsed > timeout_s:
            # Declarative backends (md, html, office) cannot be interrupted; report it anyway
            # so that one limit means the same thing for every format.
            raise ParseError("parse", f"parse timed out: {elapsed:.1f}s, limit {timeout_s:g}s")
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
        title=_title(doc, heading) if file_type not in ("txt", "pdf") else None or path.stem,
        fingerprint=fingerprint,
        blocks=tuple(blocks),
    )
