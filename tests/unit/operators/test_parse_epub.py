"""EPUB books: the chapters of a real book (Project Gutenberg's, from the shared documents) in
reading order, read as HTML; its title, author and subjects from its OPF package; a file that
is no EPUB is a parse error naming the format, never a crash."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ragstream.core.models import FileFingerprint
from ragstream.operators.parse import ParseError, parse_bytes, parse_file

BOOK = "epub/unstructured__winter-sports.epub"


def fingerprint(path: Path) -> FileFingerprint:
    return FileFingerprint(size=path.stat().st_size, mtime_ns=path.stat().st_mtime_ns)


def test_a_book_reads_in_spine_order_with_its_package_metadata(shared_docs: Path) -> None:
    path = shared_docs / BOOK
    doc = parse_file(path, "docs:book.epub", "docs", fingerprint(path))
    assert doc.file_type == "epub" and doc.title == "Winter Sports in Switzerland"
    texts = [b.text for b in doc.blocks]
    assert len(texts) > 100
    first_mention = next(i for i, t in enumerate(texts) if "Project Gutenberg" in t)
    ski = next(i for i, t in enumerate(texts) if "ski" in t.lower())
    assert first_mention < ski  # the front matter chapter comes before the book's text
    assert doc.metadata["author"] == "E. F. Benson"
    assert "Winter sports -- Switzerland" in doc.metadata["keywords"]  # type: ignore[operator]
    assert doc.metadata_origin["title"] == "properties"


def test_a_zip_that_is_no_book_is_a_parse_error(tmp_path: Path) -> None:
    fake = tmp_path / "notes.epub"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("chapter.html", "<p>no package names me</p>")
    with pytest.raises(ParseError, match="EPUB"):
        parse_bytes(fake.read_bytes(), str(fake), "d:notes.epub", "d", fingerprint(fake))
    with pytest.raises(ParseError, match="EPUB"):
        parse_bytes(b"not a zip at all", "x.epub", "d:x.epub", "d", fingerprint(fake))
