"""The metadata readers on real files written by the formats' own tools in tmp_path:
python-docx, python-pptx, pypdf (an info dictionary and an XMP packet), an EPUB zipped here,
HTML and Markdown strings with YAML and TOML front matter. Corrupt input of every kind gives
what could be read (`{}` for garbage), never an exception."""

from __future__ import annotations

import datetime
import io
import zipfile
from pathlib import Path

import docx
import pptx
import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf.generic import DecodedStreamObject, NameObject
from pypdf.xmp import XmpInformation

from ragstream.operators.metadata import (
    FrontMatter,
    epub_properties,
    file_properties,
    html_properties,
    office_properties,
    parse_datetime,
    pdf_properties,
    split_front_matter,
    xmp_properties,
)

UTC = datetime.UTC
PLUS2 = datetime.timezone(datetime.timedelta(hours=2))


# ---- dates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-02", datetime.date(2024, 1, 2)),
        ("2024-01-02T03:04:05Z", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05+02:00", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=PLUS2)),
        ("2024-01-02 03:04", datetime.datetime(2024, 1, 2, 3, 4)),
        (" 2024-01-02T03:04:05.5Z ", datetime.datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)),
        ("2010", datetime.date(2010, 1, 1)),
        ("2010-05", datetime.date(2010, 5, 1)),
        ("D:20240102030405+02'00'", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=PLUS2)),
        ("D:20240102030405Z", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("D:20240102030405Z00'00'", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (
            "D:20240102030405-05'30'",
            datetime.datetime(
                2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(-datetime.timedelta(hours=5.5))
            ),
        ),
        ("D:20240102", datetime.datetime(2024, 1, 2)),
        ("D:20241340", None),
        ("2024-13-45", None),
        ("someday", None),
        ("", None),
        ("D:", None),
    ],
)
def test_parse_datetime(text: str, expected: datetime.date | None) -> None:
    got = parse_datetime(text)
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, datetime.datetime):
        assert isinstance(got, datetime.datetime) and got.tzinfo == expected.tzinfo


# ---- front matter ---------------------------------------------------------------------------

YAML_DOC = """---
Title: The orchard
date: 2024-03-05
updated: 2024-03-06T07:08:09+02:00
tags: [apples, pears, 3, {nested: no}]
draft: true
weight: 7
ratio: 0.5
empty: ""
nothing:
author:
  name: Ada
  mail: ada@example.invalid
---
# The orchard

Body text.
---
Not front matter any more.
"""


def test_yaml_front_matter_is_read_and_stripped() -> None:
    fields, body, error = split_front_matter(YAML_DOC)
    assert error == ""
    assert fields == {
        "title": "The orchard",
        "date": datetime.date(2024, 3, 5),
        "updated": datetime.datetime(2024, 3, 6, 7, 8, 9, tzinfo=PLUS2),
        "tags": ["apples", "pears", "3"],
        "draft": True,
        "weight": 7,
        "ratio": 0.5,
    }  # the empty values and the nested mapping are dropped
    assert body.startswith("# The orchard\n\nBody text.\n---\n")
    assert "Title:" not in body


def test_toml_front_matter_is_read_and_stripped() -> None:
    text = (
        '+++\ntitle = "Plums"\ndate = 2024-03-05T10:00:00Z\nday = 2024-03-05\n'
        'tags = ["stone", "fruit"]\ndraft = false\ncount = 3\n'
        '[params]\ncolour = "purple"\n+++\nBody.\n'
    )
    fields, body, error = split_front_matter(text)
    assert (body, error) == ("Body.\n", "")
    assert fields == {
        "title": "Plums",
        "date": datetime.datetime(2024, 3, 5, 10, tzinfo=UTC),
        "day": datetime.date(2024, 3, 5),
        "tags": ["stone", "fruit"],
        "draft": False,
        "count": 3,
    }


def test_fences_allow_a_bom_trailing_spaces_crlf_and_a_dots_close() -> None:
    text = "\ufeff---  \r\ntitle: Pears\r\n...\t\r\nBody\r\n"
    assert split_front_matter(text) == FrontMatter({"title": "Pears"}, "Body\r\n", "")
    assert split_front_matter("---\ntitle: End\n---") == FrontMatter({"title": "End"}, "", "")


def test_empty_front_matter_is_no_error() -> None:
    assert split_front_matter("---\n---\nBody\n") == FrontMatter({}, "Body\n", "")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\ntitle: [unclosed\n---\nBody\n", "front matter is not valid YAML: "),
        ("---\ndate: 2024-13-45\n---\nBody\n", "front matter is not valid YAML: "),
        ("---\n- a\n- b\n---\nBody\n", "front matter is not a mapping (YAML list)"),
        ("---\njust words\n---\nBody\n", "front matter is not a mapping (YAML str)"),
        ('+++\ntitle = "x\n+++\nBody\n', "front matter is not valid TOML: "),
    ],
)
def test_bad_front_matter_is_an_error_and_still_stripped(text: str, reason: str) -> None:
    fields, body, error = split_front_matter(text)
    assert fields == {}
    assert body == "Body\n"
    assert error.startswith(reason) and "\n" not in error


@pytest.mark.parametrize(
    "text",
    [
        "# Title\n\n---\ntitle: later\n---\n",  # a fence not on line 1
        " ---\ntitle: x\n---\n",
        "----\ntitle: x\n----\n",
        "---\ntitle: never closed\n",
        "+++\ntitle = 'x'\n---\n",  # a TOML fence closed by a YAML one
        "",
        "plain text",
    ],
)
def test_no_front_matter_leaves_the_text_unchanged(text: str) -> None:
    assert split_front_matter(text) == FrontMatter({}, text, "")


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.builds(lambda a, b: f"---\n{a}\n---\n{b}", st.text(), st.text()),
        st.builds(lambda a, b: f"+++\n{a}\n+++\n{b}", st.text(), st.text()),
    )
)
def test_split_front_matter_never_raises(text: str) -> None:
    fields, body, error = split_front_matter(text)
    assert isinstance(fields, dict) and isinstance(body, str) and isinstance(error, str)
    assert all(key == key.lower() for key in fields)
    if not text.lstrip("\ufeff").startswith(("---", "+++")):
        assert (fields, body, error) == ({}, text, "")
    if error:
        assert fields == {}


# ---- office ---------------------------------------------------------------------------------


def test_docx_core_properties(tmp_path: Path) -> None:
    document = docx.Document()
    props = document.core_properties
    props.title, props.author, props.subject = "Orchard report", "Ada Lovelace", "fruit"
    props.keywords = "apples, pears; plums, "
    props.created = datetime.datetime(2024, 1, 2, 3, 4, 5)
    props.modified = datetime.datetime(2024, 2, 3, 4, 5, 6)
    props.last_modified_by = "Grace Hopper"
    document.save(str(tmp_path / "report.docx"))
    assert office_properties((tmp_path / "report.docx").read_bytes()) == {
        "title": "Orchard report",
        "author": "Ada Lovelace",
        "subject": "fruit",
        "keywords": ["apples", "pears", "plums"],
        "created": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "modified": datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC),
        "last_modified_by": "Grace Hopper",
    }


def test_pptx_core_properties(tmp_path: Path) -> None:
    deck = pptx.Presentation()
    props = deck.core_properties
    props.title, props.author, props.keywords = "Harvest deck", "Ada", "autumn;harvest"
    props.created = datetime.datetime(2024, 9, 1, 8, 0, 0)
    props.last_modified_by = "Grace"
    deck.save(str(tmp_path / "deck.pptx"))
    fields = office_properties((tmp_path / "deck.pptx").read_bytes())
    assert fields["title"] == "Harvest deck"
    assert fields["author"] == "Ada"
    assert fields["keywords"] == ["autumn", "harvest"]
    assert fields["created"] == datetime.datetime(2024, 9, 1, 8, tzinfo=UTC)
    assert fields["last_modified_by"] == "Grace"
    assert "subject" not in fields  # never set: dropped, not ""


def _zip(members: dict[str, str | bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return out.getvalue()


ENTITY_BOMB = (
    '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
    '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/'
    'core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>&b;</dc:title>'
    "</cp:coreProperties>"
)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a zip at all",
        b"PK\x03\x04" + b"\x00" * 40,
        _zip({"word/document.xml": "<w/>"}),  # no docProps/core.xml
        _zip({"docProps/core.xml": "<cp:coreProperties"}),  # XML that does not parse
        _zip({"docProps/core.xml": ENTITY_BOMB}),  # a DTD: not read at all
    ],
)
def test_corrupt_office_files_give_nothing(data: bytes) -> None:
    assert office_properties(data) == {}


def test_a_truncated_docx_gives_nothing(tmp_path: Path) -> None:
    docx.Document().save(str(tmp_path / "a.docx"))
    data = (tmp_path / "a.docx").read_bytes()
    assert office_properties(data[: len(data) // 2]) == {}


# ---- PDF ------------------------------------------------------------------------------------

XMP = """<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/">
 <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
  <rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/"
    xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmlns:pdf="http://ns.adobe.com/pdf/1.3/"
    xmp:ModifyDate="2024-05-06T07:08:09+02:00" pdf:Producer="hand">
   <dc:title><rdf:Alt>
    <rdf:li xml:lang="de">Obstgarten</rdf:li>
    <rdf:li xml:lang="x-default">Orchard (XMP)</rdf:li>
   </rdf:Alt></dc:title>
   <dc:creator><rdf:Seq><rdf:li>Ada XMP</rdf:li><rdf:li>Grace</rdf:li></rdf:Seq></dc:creator>
   <dc:subject><rdf:Bag><rdf:li>apples</rdf:li><rdf:li>pears</rdf:li></rdf:Bag></dc:subject>
   <xmp:CreateDate>2024-03-04T05:06:07Z</xmp:CreateDate>
  </rdf:Description>
 </rdf:RDF>
</x:xmpmeta>
<?xpacket end="w"?>"""

INFO = {
    "/Title": "Orchard",
    "/Author": "Ada Lovelace",
    "/Subject": "fruit",
    "/Keywords": "a, b; c",
    "/CreationDate": "D:20240102030405+02'00'",
    "/ModDate": "D:20240203",
}


def _pdf(path: Path, info: dict[str, str], xmp: str | None = None) -> bytes:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.add_metadata(info)
    if xmp is not None:
        stream = DecodedStreamObject()
        stream.set_data(xmp.encode())
        stream[NameObject("/Type")] = NameObject("/Metadata")
        stream[NameObject("/Subtype")] = NameObject("/XML")
        writer.xmp_metadata = XmpInformation(stream)
    with path.open("wb") as out:
        writer.write(out)
    return path.read_bytes()


def test_pdf_info_dictionary(tmp_path: Path) -> None:
    assert pdf_properties(_pdf(tmp_path / "info.pdf", INFO)) == {
        "title": "Orchard",
        "author": "Ada Lovelace",
        "subject": "fruit",
        "keywords": ["a", "b", "c"],
        "created": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=PLUS2),
        "modified": datetime.datetime(2024, 2, 3),
    }


def test_pdf_xmp_wins_over_the_info_dictionary(tmp_path: Path) -> None:
    data = _pdf(tmp_path / "xmp.pdf", INFO, XMP)
    reader = pypdf.PdfReader(io.BytesIO(data))  # the packet is the document's own metadata
    assert reader.xmp_metadata is not None
    assert reader.xmp_metadata.dc_title == {"de": "Obstgarten", "x-default": "Orchard (XMP)"}
    assert pdf_properties(data) == {
        "title": "Orchard (XMP)",
        "author": "Ada XMP",
        "subject": "fruit",  # no dc:description: the info dictionary's
        "keywords": ["apples", "pears"],
        "created": datetime.datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC),
        "modified": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=PLUS2),
    }


def test_xmp_pdf_keywords_when_there_is_no_dc_subject() -> None:
    packet = (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
        'xmlns:pdf="http://ns.adobe.com/pdf/1.3/" pdf:Keywords="stone; fruit"/>'
        "</rdf:RDF></x:xmpmeta>"
    )
    data = b"%PDF-1.7 junk " + packet.encode() + b" more junk <x:xmpmeta broken"
    assert xmp_properties(data) == {"keywords": ["stone", "fruit"]}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"%PDF-1.7\n garbage",
        b"\x00\xff" * 100,
        b"<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF></x:xmpmeta>",  # a broken packet
    ],
)
def test_corrupt_pdfs_give_nothing(data: bytes) -> None:
    assert pdf_properties(data) == {}


def test_a_truncated_pdf_gives_what_is_readable(tmp_path: Path) -> None:
    data = _pdf(tmp_path / "cut.pdf", INFO, XMP)
    fields = pdf_properties(data[: len(data) // 3])
    assert set(fields) <= {"title", "author", "subject", "keywords", "created", "modified"}


# ---- HTML -----------------------------------------------------------------------------------

HTML = """<!doctype html>
<HTML><HEAD>
<TITLE>  The  orchard &amp; the
  harvest </TITLE>
<META NAME="Description" CONTENT="Apples and pears.">
<meta name="keywords" content="apples, pears;plums">
<meta name="AUTHOR" content="Ada Lovelace">
<meta name="generator" content="ignored">
<meta name="author" content="second author, ignored">
<meta property="article:published_time" content="2024-01-02T03:04:05Z">
<meta property="article:modified_time" content="2024-02-03">
<meta name="description">
</HEAD><body><title>not the title</title><p>text</p></body></HTML>
"""


def test_html_properties() -> None:
    assert html_properties(HTML) == {
        "title": "The orchard & the harvest",
        "description": "Apples and pears.",
        "keywords": ["apples", "pears", "plums"],
        "author": "Ada Lovelace",
        "published": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "modified": datetime.date(2024, 2, 3),
    }


@pytest.mark.parametrize(
    "text",
    ["", "<", "<html><title>", "<meta content>", "\x00<<<>>>&#xffffffff;", "<title></title>"],
)
def test_odd_html_gives_what_it_can(text: str) -> None:
    assert html_properties(text) == {}


def test_a_bad_published_time_is_dropped() -> None:
    page = '<title>x</title><meta property="article:published_time" content="last week">'
    assert html_properties(page) == {"title": "x"}


# ---- EPUB -----------------------------------------------------------------------------------

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles>
    <rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
  </rootfiles>
</container>"""

OPF3 = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="id">urn:uuid:12345</dc:identifier>
    <dc:title>The Orchard Book</dc:title>
    <dc:creator>Ada Lovelace</dc:creator>
    <dc:creator>Grace Hopper</dc:creator>
    <dc:subject>Apples</dc:subject>
    <dc:subject>Pears</dc:subject>
    <dc:date>2023-10-01</dc:date>
    <dc:language>en</dc:language>
    <dc:description>A book about fruit.</dc:description>
    <dc:publisher>Orchard Press</dc:publisher>
    <meta property="dcterms:modified">2024-01-02T03:04:05Z</meta>
  </metadata>
  <manifest/>
  <spine/>
</package>"""

OPF2 = """<?xml version="1.0"?>
<package xmlns="http://www.idpf.org/2007/opf" xmlns:opf="http://www.idpf.org/2007/opf"
    version="2.0">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:title>Old Book</dc:title>
    <dc:date opf:event="modification">2011-05-06</dc:date>
    <dc:date opf:event="publication">2010</dc:date>
  </metadata>
</package>"""


def _epub(path: Path, opf: str, container: str = CONTAINER) -> bytes:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container, zipfile.ZIP_DEFLATED)
        archive.writestr("OEBPS/content.opf", opf, zipfile.ZIP_DEFLATED)
        archive.writestr("OEBPS/chapter1.xhtml", "<html><body><p>Hi</p></body></html>")
    return path.read_bytes()


def test_epub3_metadata(tmp_path: Path) -> None:
    assert epub_properties(_epub(tmp_path / "book.epub", OPF3)) == {
        "title": "The Orchard Book",
        "author": "Ada Lovelace",
        "keywords": ["Apples", "Pears"],
        "published": datetime.date(2023, 10, 1),
        "language": "en",
        "description": "A book about fruit.",
        "publisher": "Orchard Press",
        "modified": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    }


def test_epub2_dates_by_event(tmp_path: Path) -> None:
    assert epub_properties(_epub(tmp_path / "old.epub", OPF2)) == {
        "title": "Old Book",
        "modified": datetime.date(2011, 5, 6),
        "published": datetime.date(2010, 1, 1),
    }


def test_broken_epubs_give_nothing(tmp_path: Path) -> None:
    elsewhere = CONTAINER.replace("OEBPS/content.opf", "missing.opf")
    assert epub_properties(_epub(tmp_path / "a.epub", OPF3, container=elsewhere)) == {}
    assert epub_properties(_epub(tmp_path / "b.epub", OPF3, container="<container")) == {}
    assert epub_properties(_epub(tmp_path / "c.epub", "<package><metadata>")) == {}
    assert epub_properties(b"PK\x03\x04 garbage") == {}
    assert epub_properties(b"") == {}


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2048))
def test_binary_readers_never_raise(data: bytes) -> None:
    for read in (office_properties, pdf_properties, epub_properties, xmp_properties):
        assert isinstance(read(data), dict)


# ---- the file -------------------------------------------------------------------------------


def test_file_properties() -> None:
    assert file_properties(1234, 1_700_000_000_123_456_789, "docs/Report.Final.PDF") == {
        "size": 1234,
        "mtime": datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
        "extension": "pdf",
    }
    assert file_properties(0, 0, "notes/README")["size"] == 0
    assert "extension" not in file_properties(0, 0, "notes/README")
    assert "extension" not in file_properties(0, 0, "home/.bashrc")
    assert file_properties(5, 0, "C:\\docs\\a.TXT")["extension"] == "txt"


def test_file_properties_never_raise_on_odd_input() -> None:
    fields = file_properties(1, 10**30, "a.md")  # far beyond datetime's range
    assert fields == {"size": 1, "extension": "md"}
