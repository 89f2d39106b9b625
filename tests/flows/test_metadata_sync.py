"""Documents' own metadata on every chunk, end to end: real files whose metadata was written
by the formats' own tools (python-docx, python-pptx, pypdf, YAML and TOML front matter, HTML
`<meta>`) are synced by the real flow; the catalogue holds each field with its type, every
chunk carries the fields in the stores, a filter on them narrows both legs, and an edit of
front matter alone re-stamps the payload with nothing embedded."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import docx
import pptx
import pypdf
import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.connectors.fields import FieldCatalog, field_catalogue
from ragstream.connectors.protocols import SearchFilter
from ragstream.core.errors import InvalidRequestError
from ragstream.core.filters import check, parse_where
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # docling reads DOCX, PPTX, PDF and HTML

NOTE = """---
title: Quarterly close
tags: [finance, q3]
year: 2024
draft: true
reviewed: 2024-01-05
---
# Closing the quarter

The quarterly close reconciles every ledger account before the report is filed.
"""
RUNBOOK = """+++
title = "Pager runbook"
tags = ["ops"]
year = 2023
+++
# Pager duty

The pager rotates weekly and the runbook lists every alert with its first response.
"""
PAGE = """<html><head><title>Release notes</title>
<meta name="author" content="Grace Hopper"><meta name="keywords" content="release, notes">
<meta property="article:published_time" content="2024-03-01T09:30:00+01:00">
</head><body><h1>Release notes</h1><p>The release adds incremental sync of every folder.</p>
</body></html>"""


def write_files(shared: Path, folder: Path) -> None:
    copy_docs(
        shared,
        ["docx/docling__word_sample.docx", "pdf/docling__2305.03393v1-pg9.pdf"],
        folder,
        flat=True,
    )
    copy_docs(shared, ["pptx/unstructured__science-exploration-1p.pptx"], folder, flat=True)
    (folder / "close.md").write_text(NOTE, encoding="utf-8")
    (folder / "pager.md").write_text(RUNBOOK, encoding="utf-8")
    (folder / "release.html").write_text(PAGE, encoding="utf-8")
    word = docx.Document(str(folder / "docling__word_sample.docx"))
    word.core_properties.author = "Ada Lovelace"
    word.core_properties.keywords = "finance, audit"
    word.core_properties.created = dt.datetime(2021, 6, 1, 8, 0)
    word.save(str(folder / "docling__word_sample.docx"))
    deck = pptx.Presentation(str(folder / "unstructured__science-exploration-1p.pptx"))
    deck.core_properties.author = "Grace Hopper"
    deck.core_properties.title = "Science exploration"
    deck.save(str(folder / "unstructured__science-exploration-1p.pptx"))
    pdf_path = folder / "docling__2305.03393v1-pg9.pdf"
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(str(pdf_path)))
    writer.add_metadata(
        {
            "/Author": "Ada Lovelace",
            "/Keywords": "tables, ocr",
            "/CreationDate": "D:20230517090000Z",
        }
    )
    with pdf_path.open("wb") as out:
        writer.write(out)


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> tuple[Settings, Path]:
    base = tmp_path_factory.mktemp("meta")
    folder = base / "docs"
    folder.mkdir()
    write_files(shared_docs, folder)
    settings = Settings(data_dir=base / "data", sync={"debounce_ms": 100})
    report = api.sync([folder], settings=settings)
    assert report.dead_letters == [] and report.docs_changed == 6, report
    return settings, folder


def catalogue(settings: Settings) -> dict[str, tuple[str, int, tuple[str, ...]]]:
    types = FieldCatalog(settings.state_dir).types()
    with open_runtime(settings) as rt:
        infos = field_catalogue(rt.vectors, types, SearchFilter())
    return {f.name: (f.type, f.docs, f.examples) for f in infos}


def test_each_format_s_own_metadata_is_a_typed_field(synced: tuple[Settings, Path]) -> None:
    settings, _ = synced
    fields = catalogue(settings)
    assert fields["tags"][:2] == ("keywords", 2)  # both Markdown notes
    assert fields["year"][:2] == ("integer", 2)
    assert fields["draft"][:2] == ("bool", 1)
    assert fields["reviewed"][0] == "datetime"
    assert fields["author"][1] == 4  # DOCX, PPTX, PDF, HTML
    assert {"Ada Lovelace", "Grace Hopper"} <= set(fields["author"][2])
    assert fields["keywords"][0] == "keywords" and "finance" in fields["keywords"][2]
    assert fields["created"][0] == "datetime"
    assert fields["published"][0] == "datetime"
    assert fields["mtime"][:2] == ("datetime", 6) and fields["size"][:2] == ("integer", 6)
    assert fields["extension"][:2] == ("keyword", 6)
    assert "2024-03-01T08:30:00Z" in fields["published"][2]  # +01:00 read as UTC


def name(doc_id: str) -> str:
    return doc_id.rpartition(":")[2].rpartition("/")[2]


def filtered_docs(settings: Settings, where: str) -> set[str]:
    flt = SearchFilter(where=check(parse_where(where), FieldCatalog(settings.state_dir).types()))
    with open_runtime(settings) as rt:
        return rt.vectors.live_docs(flt)


def test_a_filter_narrows_both_legs_inside_the_store(synced: tuple[Settings, Path]) -> None:
    settings, _ = synced
    assert filtered_docs(settings, "tags = finance and not draft") == set()
    assert {name(d) for d in filtered_docs(settings, "tags = finance")} == {"close.md"}
    ada = filtered_docs(settings, "author = 'Ada Lovelace' and created >= 2021-01-01")
    assert {name(d) for d in ada} == {
        "docling__word_sample.docx",
        "docling__2305.03393v1-pg9.pdf",
    }
    with Client(settings.data_dir) as client:
        found = client.retrieve("quarterly close ledger", k=5, filter="year < 2024")
        assert found.results and {name(c.doc_id) for c in found.results} == {"pager.md"}
        with pytest.raises(InvalidRequestError, match="nearest: tags"):
            client.retrieve("quarterly close", filter="tgas = finance")


def test_front_matter_edited_restamps_with_nothing_embedded(
    synced: tuple[Settings, Path],
) -> None:
    settings, folder = synced
    note = folder / "pager.md"
    note.write_text(RUNBOOK.replace('tags = ["ops"]', 'tags = ["ops", "finance"]'), "utf-8")
    stat = note.stat()
    os.utime(note, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    report = api.sync([folder], settings=settings)
    assert report.docs_changed == 1 and report.chunks_restamped > 0, report
    assert report.chunks_embedded == 0 and report.chunks_reused == 0, report
    finance = {name(d) for d in filtered_docs(settings, "tags = finance")}
    assert finance == {"close.md", "pager.md"}
