"""The real sync flow (bytewax + docling + MiniLM + Qdrant + BM25) on real small files.

Runs the same scenario on both store pairings (congruence): Qdrant Edge + tantivy (the
embedded default) and qdrant-client local mode + rank-bm25 (the server code path and the
exact-BM25 reference). Each test is one acceptance criterion of the ingest issue and starts
from the same state, the folder just after its first sync (restored from a snapshot, so the
tests pass in any order and alone).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import StorePairing
from ragstream import api
from ragstream.connectors.protocols import SearchFilter
from ragstream.core.models import SyncReport
from ragstream.core.settings import Settings
from ragstream.flows.runtime import Runtime, open_runtime
from ragstream.service import ingest
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # bytewax + docling + MiniLM syncs, both pairings

LONG_MD = "md/docling_concepts_OCR.md"
FILES = [
    LONG_MD,
    "md/docling_concepts_chunking.md",
    "html/python311_tutorial_appetite.html",
    "docx/docling__word_sample.docx",
    "pdf/docling__2305.03393v1-pg9.pdf",
]


@dataclass(frozen=True)
class Indexed:
    settings: Settings
    folder: Path
    first: SyncReport  # the report of the first sync
    snapshot: Path  # folder and data dir as they were right after it


@pytest.fixture(scope="module")
def indexed(
    tmp_path_factory: pytest.TempPathFactory, shared_docs: Path, store_pairing: StorePairing
) -> Indexed:
    """FILES synced once per pairing (the slow part), then snapshotted."""
    base = tmp_path_factory.mktemp("sync")
    folder = copy_docs(shared_docs, FILES, base / "docs")
    settings = Settings(
        data_dir=base / "data",
        store={"vector_backend": store_pairing.vector, "lexical_backend": store_pairing.lexical},
        sync={"debounce_ms": 100},
    )
    first = api.sync([folder], settings=settings)
    snapshot = base / "snapshot"
    shutil.copytree(folder, snapshot / "docs")  # copy2 keeps mtimes: fingerprints still match
    shutil.copytree(settings.data_dir, snapshot / "data")
    return Indexed(settings, folder, first, snapshot)


@pytest.fixture
def fresh(indexed: Indexed) -> Indexed:
    """The state right after the first sync, at the same paths, whatever ran before."""
    for live, saved in ((indexed.folder, "docs"), (indexed.settings.data_dir, "data")):
        shutil.rmtree(live)
        shutil.copytree(indexed.snapshot / saved, live)
    return indexed


@pytest.fixture
def settings(fresh: Indexed) -> Settings:
    return fresh.settings


@pytest.fixture
def folder(fresh: Indexed) -> Path:
    return fresh.folder


def sync(settings: Settings, folder: Path) -> SyncReport:
    return api.sync([folder], settings=settings)


def stores(settings: Settings, folder: Path) -> Iterator[Runtime]:
    return open_runtime(settings.with_paths([folder]))  # type: ignore[return-value]


def live_texts(rt: Runtime, doc_id: str) -> list[str]:
    return [c.text for c in sorted(rt.vectors.live_chunks(doc_id), key=lambda c: c.ordinal)]


def paragraphs(path: Path) -> list[str]:
    return path.read_text().split("\n\n")


def prose_index(paras: list[str]) -> int:
    """A prose paragraph near the middle (not a heading, list, table or code block)."""
    mid = len(paras) // 2
    for i in sorted(range(len(paras)), key=lambda i: abs(i - mid)):
        p = paras[i].strip()
        if len(p.split()) > 15 and p[0].isalpha() and "```" not in p and "|" not in p:
            return i
    raise AssertionError("no prose paragraph")


def test_1_initial_index_all_formats(fresh: Indexed, settings: Settings, folder: Path) -> None:
    report = fresh.first
    assert report.dead_letters == []
    assert report.docs_seen == len(FILES) and report.docs_changed == len(FILES)
    assert report.chunks_embedded > 0 and report.chunks_live > 0
    with stores(settings, folder) as rt:
        for rel in FILES:
            chunks = rt.vectors.live_chunks(f"docs:{rel}")
            assert chunks, f"{rel} produced no live chunks"
            ids = [c.point_id for c in chunks]
            assert {c.point_id for c in rt.vectors.get(ids)} == set(ids)
            assert {c.point_id for c in rt.lexical.get(ids)} == set(ids)
        assert {c.file_type for c in rt.vectors.get(ids)} == {"pdf"}
        assert rt.vectors.count("live") == rt.lexical.count("live") == report.chunks_live


def test_6_unchanged_rerun_embeds_and_writes_nothing(settings: Settings, folder: Path) -> None:
    report = sync(settings, folder)
    assert report.docs_changed == 0 and report.chunks_embedded == 0
    assert report.chunks_tombstoned == 0 and report.chunks_reused == 0


def test_2_edit_one_paragraph(settings: Settings, folder: Path) -> None:
    path = folder / LONG_MD
    paras = paragraphs(path)
    i = prose_index(paras)
    old = paras[i]
    paras[i] = old.replace(" ", " edited ", 1) + " Zanzibar quokka marker sentence."
    path.write_text("\n\n".join(paras))
    report = sync(settings, folder)
    assert report.docs_changed == 1
    assert 1 <= report.chunks_embedded <= 2
    assert 1 <= report.chunks_tombstoned <= 2  # an edit may split or merge one chunk
    with stores(settings, folder) as rt:
        texts = live_texts(rt, f"docs:{LONG_MD}")
        assert any("Zanzibar quokka marker" in t for t in texts)
        assert not any(" ".join(old.split()) in " ".join(t.split()) for t in texts)
        hits = rt.lexical.search("Zanzibar quokka", 5, SearchFilter())
        assert hits and "Zanzibar" in hits[0].chunk.text


def test_3a_insert_paragraph_embeds_at_most_two(settings: Settings, folder: Path) -> None:
    path = folder / LONG_MD
    paras = paragraphs(path)
    new = (
        "A freshly inserted paragraph explains that incremental indexing keeps every other "
        "chunk where it was, so only this text needs a new vector from the model."
    )
    paras.insert(len(paras) // 2, new)
    path.write_text("\n\n".join(paras))
    report = sync(settings, folder)
    assert report.docs_changed == 1 and report.chunks_embedded <= 2


def test_3b_rename_and_move_section_embed_nothing(settings: Settings, folder: Path) -> None:
    src = folder / "md/docling_concepts_chunking.md"
    dst = folder / "md/renamed/chunking.md"
    dst.parent.mkdir()
    src.rename(dst)
    report = sync(settings, folder)
    assert report.docs_deleted == 1 and report.chunks_embedded == 0
    assert report.chunks_reused > 0
    with stores(settings, folder) as rt:
        assert rt.vectors.live_chunks("docs:md/docling_concepts_chunking.md") == []
        assert rt.vectors.live_chunks("docs:md/renamed/chunking.md")
    # move the second half of a doc's sections into a new file, under the same headings
    # (the contextual header is the heading path: text moved under other headings is
    # re-embedded, test_contextual_header.py)
    path = dst
    text = path.read_text()
    cut = text.index("\n## ", len(text) // 2)
    path.write_text(text[:cut])
    (folder / "md/moved_section.md").write_text(text[cut:].lstrip("\n"))
    report = sync(settings, folder)
    assert report.chunks_embedded <= 1, "only a chunk that straddled the cut may be new"
    assert report.chunks_reused > 0 and report.chunks_tombstoned > 0


def test_5_shrink_tombstones_stale_tail(settings: Settings, folder: Path) -> None:
    path = folder / LONG_MD
    before = path.read_text()
    path.write_text(before[: len(before) // 3])
    with stores(settings, folder) as rt:
        live_before = len(rt.vectors.live_chunks(f"docs:{LONG_MD}"))
    report = sync(settings, folder)
    # the cut falls mid-paragraph: the chunk it lands in changes, and the shortened last
    # group may merge with the one before it (rarely two new chunks)
    assert report.chunks_tombstoned > 0 and report.chunks_embedded <= 2
    with stores(settings, folder) as rt:
        after = rt.vectors.live_chunks(f"docs:{LONG_MD}")
        assert 0 < len(after) < live_before
        assert max(c.char_end for c in after) <= len(path.read_text()) + 2


def test_8_bad_files_become_dead_letters(settings: Settings, folder: Path) -> None:
    bad = folder / "bad"
    bad.mkdir()
    (bad / "empty.md").write_bytes(b"")
    (bad / "junk.md").write_bytes(bytes(range(256)) * 40)
    good_pdf = (folder / FILES[-1]).read_bytes()
    (bad / "corrupt.pdf").write_bytes(good_pdf[: len(good_pdf) // 5])
    (folder / "md/new_good.md").write_text("# Good\n\nThis file indexes fine next to bad ones.\n")
    report = sync(settings, folder)
    reasons = {Path(d.path).name: d for d in report.dead_letters}
    assert set(reasons) == {"empty.md", "junk.md", "corrupt.pdf"}
    assert all(d.reason for d in reasons.values())
    status = ingest.status(settings=settings)
    assert {Path(d.path).name for d in status.dead_letters} == set(reasons)
    with stores(settings, folder) as rt:
        assert rt.vectors.live_chunks("docs:md/new_good.md")
    again = sync(settings, folder)  # unchanged bad files are not retried
    assert again.dead_letters == [] and again.docs_changed == 0
    (bad / "empty.md").write_text("# Fixed\n\nNow it has content.\n")
    fixed = sync(settings, folder)
    assert fixed.dead_letters == [] and fixed.docs_changed == 1
    left = ingest.status(settings=settings).dead_letters
    assert "empty.md" not in {Path(d.path).name for d in left}


def test_4_delete_tombstones_in_both_stores_and_gc_purges(settings: Settings, folder: Path) -> None:
    victim = "html/python311_tutorial_appetite.html"
    with stores(settings, folder) as rt:
        ids = [c.point_id for c in rt.vectors.live_chunks(f"docs:{victim}")]
    assert ids
    (folder / victim).unlink()
    report = sync(settings, folder)
    assert report.docs_deleted == 1 and report.chunks_tombstoned == len(ids)
    with stores(settings, folder) as rt:
        assert {c.status for c in rt.vectors.get(ids)} == {"deleted"}
        assert {c.status for c in rt.lexical.get(ids)} == {"deleted"}
        query = rt.embedder.encode_query("Python is an easy to learn programming language")
        flt = SearchFilter()
        assert not {h.chunk.point_id for h in rt.vectors.search(query, 50, flt)} & set(ids)
        lex = rt.lexical.search("Python programming language interpreter", 50, flt)
        assert not {h.chunk.point_id for h in lex} & set(ids)
    assert api.gc(retention_s=3600, settings=settings) == {"vectors": 0, "lexical": 0}
    time.sleep(0.05)
    purged = api.gc(retention_s=0, settings=settings)
    assert purged["vectors"] >= len(ids) and purged["lexical"] >= len(ids)
    with stores(settings, folder) as rt:
        assert rt.vectors.get(ids) == [] and rt.lexical.get(ids) == []
        assert rt.vectors.count("live") > 0


def test_9_rebuild_lexical_from_the_vector_store(settings: Settings, folder: Path) -> None:
    with stores(settings, folder) as rt:
        live = {c.point_id for d in rt.vectors.live_doc_fingerprints() for c in
                rt.vectors.live_chunks(d)}  # fmt: skip
    shutil.rmtree(settings.lexical_dir)
    assert api.rebuild_lexical(settings=settings) == len(live)
    with stores(settings, folder) as rt:
        assert rt.lexical.count("live") == len(live) and rt.lexical.count("deleted") == 0
        assert {c.point_id for c in rt.lexical.get(sorted(live))} == live
        hits = rt.lexical.search("document conversion OCR", 10, SearchFilter())
        assert hits and {h.chunk.point_id for h in hits} <= live
