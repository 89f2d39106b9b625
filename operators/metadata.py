"""A document's own metadata, read at parse time: YAML or TOML front matter of a text file,
the core properties of DOCX and PPTX, a PDF's info dictionary and XMP packet, an HTML
page's `<title>` and `<meta>` tags, an EPUB's OPF metadata, and the file's size, mtime and
extension.

Every reader is a pure function of the bytes (or text) it is given and never raises on bad
or corrupt input: it returns what it could read, `{}` for garbage. Values are plain Python
(`RawValue`): strings, numbers, booleans, lists of strings, dates and datetimes (aware where
the source names a zone, naive otherwise); keys are lowercase, empty values are dropped.

XML is read with the standard library; a document that declares a DTD is not read at all,
so no entity is ever expanded. Zip members are read only up to `MAX_MEMBER_BYTES`.
"""

from __future__ import annotations

import datetime
import functools
import io
import re
import threading
import zipfile
from collections.abc import Callable, Iterable, Iterator
from html.parser import HTMLParser
from typing import Any, NamedTuple, ParamSpec, TypeAlias
from xml.etree import ElementTree

from ragstream.core.metadata import RawValue

RawFields: TypeAlias = dict[str, RawValue]

MAX_MEMBER_BYTES = 4 << 20  # a metadata part larger than this is not metadata: skipped

_DC = "{http://purl.org/dc/elements/1.1/}"
_DCTERMS = "{http://purl.org/dc/terms/}"
_CP = "{http://schemas.openxmlformats.org/package/2006/metadata/core-properties}"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}"
_XMP = "{http://ns.adobe.com/xap/1.0/}"
_PDF = "{http://ns.adobe.com/pdf/1.3/}"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"

_YAML_OPEN, _TOML_OPEN = "---", "+++"
_OPEN = re.compile(r"\A(---|\+\+\+)[ \t]*\r?\n")
_CLOSE = {
    _YAML_OPEN: re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE),
    _TOML_OPEN: re.compile(r"^\+\+\+[ \t]*\r?$", re.MULTILINE),
}
_PDF_DATE = re.compile(
    r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?"
    r"(?:(Z)|([+-])(\d{2})(?:'?(\d{2}))?'?)?"
)
_XMP_PACKET = re.compile(rb"<x:x[am]pmeta[\s>].*?</x:x[am]pmeta\s*>", re.DOTALL)
_DOCTYPE = re.compile(rb"<!DOCTYPE", re.IGNORECASE)
_KEYWORD_SEP = re.compile(r"[,;]")
_FALLBACK_PDFIUM_LOCK = threading.Lock()
_P = ParamSpec("_P")


class FrontMatter(NamedTuple):
    """What `split_front_matter` found: the fields, the text after the block, and why the
    block could not be read ("" when it could, or when there is none)."""

    fields: RawFields
    body: str
    error: str


# ---- values ---------------------------------------------------------------------------------


def parse_datetime(text: str) -> datetime.datetime | datetime.date | None:
    """An ISO 8601 / W3CDTF date or datetime (a trailing `Z` included) or a PDF date
    (`D:20240102030405+02'00'`); aware when a zone is given, a bare ISO date as a `date`.
    None when unreadable.

    >>> parse_datetime("2024-01-02")
    datetime.date(2024, 1, 2)
    >>> parse_datetime("D:20240102030405+02'00'").isoformat()
    '2024-01-02T03:04:05+02:00'
    >>> parse_datetime("someday") is None
    True
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    try:
        if text.startswith("D:"):
            return _pdf_date(text)
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return datetime.date.fromisoformat(text)
        if re.fullmatch(r"\d{4}(-\d{2})?", text):  # W3CDTF year or year-month
            year, _, month = text.partition("-")
            return datetime.date(int(year), int(month or 1), 1)
        if not re.match(r"\d{4}-\d{2}-\d{2}[T ]\d", text):
            return None
        return datetime.datetime.fromisoformat(text)
    except (ValueError, OverflowError):
        return None


def _pdf_date(text: str) -> datetime.datetime | None:
    match = _PDF_DATE.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, zulu, sign, tz_h, tz_m = match.groups()
    zone: datetime.tzinfo | None = None
    if zulu:
        zone = datetime.UTC
    elif sign:
        offset = datetime.timedelta(hours=int(tz_h), minutes=int(tz_m or 0))
        zone = datetime.timezone(-offset if sign == "-" else offset)
    return datetime.datetime(
        int(year),
        int(month or 1),
        int(day or 1),
        int(hour or 0),
        int(minute or 0),
        int(second or 0),
        tzinfo=zone,
    )


def _keywords(text: str) -> list[str]:
    return [word.strip() for word in _KEYWORD_SEP.split(text) if word.strip()]


def _clean(value: Any) -> RawValue | None:
    """A value as a `RawValue`, or None where it is empty or not a scalar (a mapping)."""
    if isinstance(value, bool | int | float | datetime.date):
        return value
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        items = [_clean(item) for item in value if not isinstance(item, list | tuple | dict)]
        words = [v.isoformat() if isinstance(v, datetime.date) else str(v) for v in items]
        return [w for w, v in zip(words, items, strict=True) if v is not None] or None
    return None


def _fields(pairs: Iterable[tuple[Any, Any]]) -> RawFields:
    """Lowercase keys, clean values, empty ones dropped (the first of a repeated key wins)."""
    out: RawFields = {}
    for key, value in pairs:
        name = str(key).strip().lower()
        clean = _clean(value)
        if name and clean is not None and name not in out:
            out[name] = clean
    return out


def _never_raises(read: Callable[_P, RawFields]) -> Callable[_P, RawFields]:
    """A reader that returns `{}` where the wrapped one would raise (corrupt input)."""

    @functools.wraps(read)
    def safe(*args: _P.args, **kwargs: _P.kwargs) -> RawFields:
        try:
            return read(*args, **kwargs)
        except Exception:
            return {}

    return safe


def _date_field(text: str | None) -> datetime.date | None:
    return parse_datetime(text) if text else None


# ---- front matter ---------------------------------------------------------------------------


def split_front_matter(text: str) -> FrontMatter:
    """YAML (`---` ... `---` or `...`) or TOML (`+++` ... `+++`) front matter at the very
    start of a text (a BOM allowed), and the text after its closing line. A block that does
    not parse to a mapping still is front matter: no fields, the body after it, a reason.

    >>> split_front_matter("---\\ntitle: Orchard\\ntags: [a, b]\\n---\\n# Body\\n")
    FrontMatter(fields={'title': 'Orchard', 'tags': ['a', 'b']}, body='# Body\\n', error='')
    """
    try:
        start = text[1:] if text.startswith("\ufeff") else text
        opening = _OPEN.match(start)
        if opening is None:
            return FrontMatter({}, text, "")
        fence = opening.group(1)
        closing = _CLOSE[fence].search(start, opening.end())
        if closing is None:
            return FrontMatter({}, text, "")
        block = start[opening.end() : closing.start()]
        body = start[closing.end() :]
        body = body[1:] if body.startswith("\n") else body
        fields, error = _load_yaml(block) if fence == _YAML_OPEN else _load_toml(block)
        return FrontMatter(fields, body, error)
    except Exception as err:  # never raise on a document's text
        return FrontMatter({}, text if isinstance(text, str) else "", _first_line(err))


def _load_yaml(block: str) -> tuple[RawFields, str]:
    import yaml

    try:
        data = yaml.safe_load(block)
    except Exception as err:  # YAMLError, and a ValueError for a date like 2024-13-45
        return {}, f"front matter is not valid YAML: {_first_line(err)}"
    if data is None:
        return {}, ""
    if not isinstance(data, dict):
        return {}, f"front matter is not a mapping (YAML {type(data).__name__})"
    return _fields(data.items()), ""


def _load_toml(block: str) -> tuple[RawFields, str]:
    import tomllib

    try:
        return _fields(tomllib.loads(block).items()), ""
    except Exception as err:
        return {}, f"front matter is not valid TOML: {_first_line(err)}"


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


# ---- zip and XML ----------------------------------------------------------------------------


def _member(archive: zipfile.ZipFile, name: str) -> bytes | None:
    """A zip member's bytes, None when it is missing, too large or unreadable."""
    try:
        info = archive.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            return None
        with archive.open(info) as handle:
            data = handle.read(MAX_MEMBER_BYTES + 1)
    except Exception:
        return None
    return data if len(data) <= MAX_MEMBER_BYTES else None


def _xml(data: bytes | None) -> ElementTree.Element | None:
    """Parsed XML, None when it does not parse or declares a DTD (no entity is expanded)."""
    if not data or _DOCTYPE.search(data):
        return None
    try:
        return ElementTree.fromstring(data)
    except Exception:
        return None


def _text(element: ElementTree.Element | None) -> str | None:
    if element is None:
        return None
    return " ".join("".join(element.itertext()).split()) or None


def _open_zip(data: bytes) -> zipfile.ZipFile | None:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except Exception:
        return None


# ---- office ---------------------------------------------------------------------------------


@_never_raises
def office_properties(data: bytes) -> RawFields:
    """The core properties (`docProps/core.xml`) of a DOCX or PPTX file: title, author,
    subject, keywords, created, modified, last_modified_by."""
    archive = _open_zip(data)
    if archive is None:
        return {}
    with archive:
        root = _xml(_member(archive, "docProps/core.xml"))
    if root is None:
        return {}
    found = {child.tag: _text(child) for child in root}
    keywords = found.get(f"{_CP}keywords")
    return _fields(
        [
            ("title", found.get(f"{_DC}title")),
            ("author", found.get(f"{_DC}creator")),
            ("subject", found.get(f"{_DC}subject")),
            ("keywords", _keywords(keywords) if keywords else None),
            ("created", _date_field(found.get(f"{_DCTERMS}created"))),
            ("modified", _date_field(found.get(f"{_DCTERMS}modified"))),
            ("last_modified_by", found.get(f"{_CP}lastModifiedBy")),
        ]
    )


# ---- PDF ------------------------------------------------------------------------------------

_PDF_INFO = {
    "Title": "title",
    "Author": "author",
    "Subject": "subject",
    "Keywords": "keywords",
    "CreationDate": "created",
    "ModDate": "modified",
}


@_never_raises
def pdf_properties(data: bytes) -> RawFields:
    """A PDF's info dictionary (title, author, subject, keywords, created, modified) and its
    XMP packet, whose values win for the same key. Opens the document under docling's
    pypdfium2 lock (pdfium is not thread-safe): do not call it while holding that lock."""
    fields = _pdf_info(data)
    fields.update(xmp_properties(data))
    return fields


def _pdf_info(data: bytes) -> RawFields:
    try:
        import pypdfium2 as pdfium

        with _pdfium_lock():
            pdf = pdfium.PdfDocument(data)
            try:
                info = pdf.get_metadata_dict(skip_empty=True)
            finally:
                pdf.close()
    except Exception:
        return {}
    pairs: list[tuple[str, Any]] = []
    for key, name in _PDF_INFO.items():
        value = info.get(key)
        if not isinstance(value, str):
            continue
        if name == "keywords":
            pairs.append((name, _keywords(value)))
        elif name in ("created", "modified"):
            pairs.append((name, parse_datetime(value)))
        else:
            pairs.append((name, value))
    return _fields(pairs)


def _pdfium_lock() -> threading.Lock:
    """The lock docling takes around pdfium calls (the same one, so parses in other threads
    never run pdfium at the same time as this reader)."""
    try:
        from docling.utils.locks import pypdfium2_lock

        return pypdfium2_lock
    except Exception:
        return _FALLBACK_PDFIUM_LOCK


@_never_raises
def xmp_properties(data: bytes) -> RawFields:
    """The fields of the last XMP packet in raw bytes that yields any: title (`dc:title`),
    author (first `dc:creator`), subject (`dc:description`), keywords (`dc:subject`, else
    `pdf:Keywords`), created (`xmp:CreateDate`), modified (`xmp:ModifyDate`)."""
    try:
        packets = [m.group(0) for m in _XMP_PACKET.finditer(data)]
    except Exception:
        return {}
    for packet in reversed(packets):
        fields = _xmp_fields(_xml(packet))
        if fields:
            return fields
    return {}


def _xmp_fields(root: ElementTree.Element | None) -> RawFields:
    if root is None:
        return {}
    found: dict[str, str | list[str]] = {}
    for desc in root.iter(f"{_RDF}Description"):
        for key, value in _xmp_description(desc):
            found.setdefault(key, value)
    pdf_keywords = found.get(f"{_PDF}Keywords")
    keywords = found.get(f"{_DC}subject") or (
        _keywords(pdf_keywords) if isinstance(pdf_keywords, str) else None
    )
    created, modified = found.get(f"{_XMP}CreateDate"), found.get(f"{_XMP}ModifyDate")
    return _fields(
        [
            ("title", _first(found.get(f"{_DC}title"))),
            ("author", _first(found.get(f"{_DC}creator"))),
            ("subject", _first(found.get(f"{_DC}description"))),
            ("keywords", keywords),
            ("created", _date_field(created) if isinstance(created, str) else None),
            ("modified", _date_field(modified) if isinstance(modified, str) else None),
        ]
    )


def _xmp_description(desc: ElementTree.Element) -> Iterator[tuple[str, str | list[str]]]:
    """(qualified name, value) of an rdf:Description's properties, in attribute form and
    element form; an rdf:Alt/Seq/Bag gives its items (an Alt's x-default first)."""
    for name, value in desc.attrib.items():
        if value.strip():
            yield name, value
    for prop in desc:
        container = next((c for c in prop if c.tag.startswith(_RDF)), None)
        if container is None:
            text = _text(prop)
            if text:
                yield prop.tag, text
            continue
        items = sorted(
            container.findall(f"{_RDF}li"), key=lambda li: li.get(_XML_LANG) != "x-default"
        )
        values = [v for v in (_text(li) for li in items) if v]
        if values:
            yield prop.tag, values


def _first(value: str | list[str] | None) -> str | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value


# ---- HTML -----------------------------------------------------------------------------------

_HTML_META = {"description": "description", "keywords": "keywords", "author": "author"}
_HTML_PROPERTY = {"article:published_time": "published", "article:modified_time": "modified"}


class _HeadReader(HTMLParser):
    """Collects the first `<title>` and the `<meta>` tags `html_properties` reads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] | None = None  # the text of the open (or first) <title>
        self.in_title = False
        self.pairs: list[tuple[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and self.title is None:
            self.title, self.in_title = [], True
        elif tag == "meta":
            found = {k.lower(): (v or "") for k, v in attrs}
            content = found.get("content", "").strip()
            name = found.get("name", "").strip().lower()
            prop = found.get("property", "").strip().lower() or name
            if name in _HTML_META and content:
                value = _keywords(content) if name == "keywords" else content
                self.pairs.append((_HTML_META[name], value))
            elif prop in _HTML_PROPERTY and content:
                self.pairs.append((_HTML_PROPERTY[prop], parse_datetime(content)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False

    def handle_data(self, data: str) -> None:
        if self.in_title and self.title is not None:
            self.title.append(data)


@_never_raises
def html_properties(text: str) -> RawFields:
    """An HTML page's title, its `description`, `keywords` (a list) and `author` meta tags,
    and `article:published_time` / `article:modified_time` (as published, modified)."""
    try:
        end = text.lower().find("</head")
        reader = _HeadReader()
        reader.feed(text if end < 0 else text[:end])
        reader.close()
    except Exception:
        return {}
    title = " ".join("".join(reader.title or []).split())
    return _fields([("title", title), *reader.pairs])


# ---- EPUB -----------------------------------------------------------------------------------


@_never_raises
def epub_properties(data: bytes) -> RawFields:
    """An EPUB's package metadata (the OPF that META-INF/container.xml names): title,
    author, keywords (every dc:subject), published (dc:date), language, description,
    publisher, modified (`<meta property="dcterms:modified">`)."""
    archive = _open_zip(data)
    if archive is None:
        return {}
    with archive:
        _, opf = _package(archive)
    metadata = None if opf is None else _find_local(opf, "metadata")
    if metadata is None:
        return {}
    return _fields(_opf_pairs(metadata))


MAX_CHAPTERS = 2000
MAX_BOOK_BYTES = 64 << 20  # an EPUB's chapters, decompressed, at most


def epub_chapters(data: bytes) -> list[bytes]:
    """An EPUB's XHTML documents in reading order (the OPF's spine), each at most
    `MAX_MEMBER_BYTES` and all together at most `MAX_BOOK_BYTES`; [] when it is no EPUB."""
    archive = _open_zip(data)
    if archive is None:
        return []
    with archive:
        path, opf = _package(archive)
        if opf is None:
            return []
        base = path.rpartition("/")[0]
        hrefs = {
            item.get("id"): item.get("href", "")
            for item in opf.iter()
            if _local(item.tag) == "item" and "html" in item.get("media-type", "")
        }
        order = [i.get("idref") for i in opf.iter() if _local(i.tag) == "itemref"]
        chapters, total = [], 0
        for idref in order[:MAX_CHAPTERS]:
            href = hrefs.get(idref)
            member = _member(archive, f"{base}/{href}" if base else href) if href else None
            total += len(member or b"")
            if member and total <= MAX_BOOK_BYTES:
                chapters.append(member)
    return chapters


def _package(archive: zipfile.ZipFile) -> tuple[str, ElementTree.Element | None]:
    """The OPF package document's path in the archive and its XML."""
    container = _xml(_member(archive, "META-INF/container.xml"))
    rootfile = None if container is None else container.find(f".//{_CONTAINER}rootfile")
    path = "" if rootfile is None else rootfile.get("full-path", "")
    return path, (_xml(_member(archive, path)) if path else None)


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _find_local(root: ElementTree.Element, name: str) -> ElementTree.Element | None:
    return next((e for e in root.iter() if _local(e.tag) == name), None)


_OPF_DC = {
    "title": "title",
    "creator": "author",
    "language": "language",
    "description": "description",
    "publisher": "publisher",
}


def _opf_pairs(metadata: ElementTree.Element) -> list[tuple[str, Any]]:
    """(field, value) pairs of an OPF `<metadata>`, the first of a repeated field first."""
    pairs: list[tuple[str, Any]] = []
    subjects: list[str] = []
    for element in metadata.iter():
        name, text = _local(element.tag), _text(element)
        event = next((v for k, v in element.attrib.items() if _local(k) == "event"), "")
        if element.tag.startswith(_DC) and name in _OPF_DC:
            pairs.append((_OPF_DC[name], text))
        elif element.tag == f"{_DC}subject" and text:
            subjects.append(text)
        elif element.tag == f"{_DC}date" and text:
            field = "modified" if event.lower() == "modification" else "published"
            pairs.append((field, parse_datetime(text)))
        elif name == "meta" and element.get("property") == "dcterms:modified" and text:
            pairs.insert(0, ("modified", parse_datetime(text)))
    pairs.append(("keywords", subjects))
    return pairs


# ---- the file itself ------------------------------------------------------------------------


@_never_raises
def file_properties(size: int, mtime_ns: int, path: str) -> RawFields:
    """The file's mtime (aware UTC), size in bytes and extension (lowercase, no dot).

    >>> file_properties(12, 1_700_000_000_000_000_000, "docs/Report.PDF")["extension"]
    'pdf'
    """
    pairs: list[tuple[str, Any]] = [("size", size if isinstance(size, int) else None)]
    try:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        pairs.append(("mtime", epoch + datetime.timedelta(microseconds=mtime_ns // 1000)))
    except Exception:
        pass
    try:
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        stem, dot, suffix = name.rpartition(".")
        pairs.append(("extension", suffix.lower() if dot and stem else None))
    except Exception:
        pass
    return _fields(pairs)
