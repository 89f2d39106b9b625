"""`ragstream verify`, the per-file ledger and citation versions, on the real sync flow.

The fault-injection test corrupts a synced index once per drift class, through the store
APIs and the folder (nothing watching), and checks that verify reports exactly those
documents in exactly those classes; `--repair` must then leave no drift and an index equal to
a fresh sync of the same folder. Classification is also tested as the pure function it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import StorePairing
from ragstream import api
from ragstream.connectors.audit import DiskFile, DocView, classify, duplicates
from ragstream.connectors.protocols import STALE_FINGERPRINT
from ragstream.connectors.state import DeadLetterBook
from ragstream.connectors.vector_stores import HasIds
from ragstream.core.ids import point_id
from ragstream.core.models import DeadLetter, FileFingerprint, IndexedChunk
from ragstream.core.settings import Settings
from ragstream.service import ingest
from ragstream.service.audit import files, verify
from ragstream.service.stores import open_stores
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # real syncs on both store pairings

DOCS = {  # role -> shared file (small markdown: the sync is quick)
    "legs": "md/docling_integrations_langchain.md",
    "retag": "md/docling_integrations_haystack.md",
    "edit": "md/docling_integrations_llamaindex.md",
    "delete": "md/docling_integrations_spacy.md",
    "dup": "md/docling_integrations_apify.md",
    "fine": "md/docling_integrations_crewai.md",
}
SLUG = "minilm-384-abcdef12"


# --- the pure classification -------------------------------------------------------------------


def chunk(doc: str, text: str, occ: int = 0, **kw: object) -> IndexedChunk:
    h = f"h-{text}"
    fields: dict[str, object] = dict(
        point_id=point_id(doc, h, occ), doc_id=doc, source="s", path="/x", file_type="md",
        ordinal=occ, content_hash=h, text=text, char_start=0, char_end=len(text),
        embedder=SLUG, file_size=10, file_mtime_ns=5, file_digest="d1",
    )  # fmt: skip
    fields.update(kw)
    return IndexedChunk.model_validate(fields)


def view(doc: str = "s:a.md", size: int = 10, mtime: int = 5, **kw: object) -> DocView:
    disk = DiskFile("s", Path("/x"), FileFingerprint(size=size, mtime_ns=mtime), None)
    v = DocView(doc, disk=disk)
    for key, value in kw.items():
        setattr(v, key, value)
    if "lexical" not in kw:
        v.lexical = {p.point_id for p in v.points}
    return v


def test_a_synced_doc_has_no_drift_and_a_touched_one_is_not_stale() -> None:
    pts = [chunk("s:a.md", "one"), chunk("s:a.md", "two")]
    assert classify(view(points=pts), SLUG, "", None) == {}
    touched = view(mtime=99, points=pts)
    assert classify(touched, SLUG, "", "d1") == {}  # same bytes, new mtime
    assert set(classify(touched, SLUG, "", "d2")) == {"stale"}  # new bytes


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("gone", {"orphan"}),
        ("excluded", {"orphan"}),
        ("missing", {"missing"}),
        ("lexical_lost", {"leg_mismatch"}),
        ("retagged", {"foreign_embedder"}),
        ("copied", {"duplicate"}),
        ("dead_changed", {"retry_due"}),
        ("dead_same", set()),
        ("two_versions", {"stale"}),
    ],
)
def test_each_drift_class_alone(case: str, expected: set[str]) -> None:
    pts = [chunk("s:a.md", "one"), chunk("s:a.md", "two")]
    dead = DeadLetter(
        doc_id="s:a.md", path="/x", stage="read", reason="empty file", at=1.0,
        fingerprint=FileFingerprint(size=10, mtime_ns=5),
    )  # fmt: skip
    v = {
        "gone": DocView("s:a.md", points=pts, lexical={p.point_id for p in pts}),
        "excluded": view(points=pts),
        "missing": view(points=[]),
        "lexical_lost": view(points=pts, lexical={pts[0].point_id}),
        "retagged": view(points=[pts[0], pts[1].model_copy(update={"embedder": "other"})]),
        "copied": view(points=[*pts, pts[1].model_copy(update={"point_id": str(uuid.uuid4())})]),
        "dead_changed": view(size=11, points=[], dead=dead),
        "dead_same": view(points=[], dead=dead),
        "two_versions": view(points=[pts[0], pts[1].model_copy(update={"file_mtime_ns": 4})]),
    }[case]
    if case == "excluded":
        assert v.disk is not None
        v.disk = DiskFile("s", Path("/x"), v.disk.fingerprint, "excluded by pattern '*.md'")
    assert set(classify(v, SLUG, "", None)) == expected


def test_a_file_read_under_other_ocr_settings_is_stale_or_a_retry(tmp_path: Path) -> None:
    """With the current settings' parser keys, a doc whose points were parsed under another
    key is stale and a dead letter read under another is due a retry; the catch-up scan's
    view of the dead letter (`fingerprints`) agrees. Unrecorded keys never drift."""

    def parser(path: str) -> set[str]:
        return {"pdf:auto", "pdf:auto:tesseract:eng:200dpi"}

    pts = [chunk("s:a.pdf", t, parser="pdf:off") for t in ("one", "two")]
    assert set(classify(view("s:a.pdf", points=pts), SLUG, "", None, parser)) == {"stale"}
    assert classify(view("s:a.pdf", points=pts), SLUG, "", None) == {}  # not checked
    now = [p.model_copy(update={"parser": "pdf:auto"}) for p in pts]
    assert classify(view("s:a.pdf", points=now), SLUG, "", None, parser) == {}
    legacy = [p.model_copy(update={"parser": ""}) for p in pts]
    assert classify(view("s:a.pdf", points=legacy), SLUG, "", None, parser) == {}
    fp = FileFingerprint(size=10, mtime_ns=5)
    dead = DeadLetter(
        doc_id="s:a.pdf", path="/x.pdf", stage="parse", reason="no text content", at=1.0,
        fingerprint=fp, parser="pdf:off",
    )  # fmt: skip
    drift = classify(view("s:a.pdf", points=[], dead=dead), SLUG, "", None, parser)
    assert drift == {"retry_due": "dead letter (no text content) read under other OCR settings"}
    book = DeadLetterBook(tmp_path)
    book.put(dead)
    assert book.fingerprints() == {"s:a.pdf": {"10:5"}}
    assert book.fingerprints(parser) == {"s:a.pdf": {STALE_FINGERPRINT}}
    book.put(dead.model_copy(update={"parser": "pdf:auto"}))
    assert book.fingerprints(parser) == {"s:a.pdf": {"10:5"}}


def test_duplicates_are_exactly_the_points_beyond_the_derived_ids() -> None:
    same = [chunk("s:a.md", "x", 0), chunk("s:a.md", "x", 1)]  # the same text twice: not a dup
    assert duplicates("s:a.md", same) == []
    stray = same[0].model_copy(update={"point_id": "p-stray"})
    assert duplicates("s:a.md", [*same, stray]) == ["p-stray"]


# --- the real flow ------------------------------------------------------------------------------


def _settings(base: Path, pairing: StorePairing) -> Settings:
    return Settings(
        data_dir=base,
        store={"vector_backend": pairing.vector, "lexical_backend": pairing.lexical},
    )


def _index_state(settings: Settings) -> tuple[set[tuple[str, str, str]], dict[str, set[str]]]:
    """(doc, point id, embedder) of every live vector point, and BM25's live ids per doc."""
    with open_stores(settings) as (vectors, lexical):
        points = {(c.doc_id, c.point_id, c.embedder) for p in vectors.live_pages() for c in p}
        return points, lexical.live_doc_ids()


def _corrupt(settings: Settings, folder: Path, did: dict[str, str]) -> None:
    """One injected fault per drift class."""
    with open_stores(settings) as (vectors, lexical):
        legs = vectors.live_chunks(did["legs"])
        lexical.tombstone([legs[0].point_id], 1.0)  # BM25 loses one chunk
        lexical.commit()
        template = vectors.live_chunks(did["fine"])[0]
        ghost_id = point_id(did["ghost"], template.content_hash, 0)
        ghost = template.model_copy(update={"doc_id": did["ghost"], "point_id": ghost_id})
        vector = vectors.vectors_for_hashes([template.content_hash])[template.content_hash]
        vectors.upsert([ghost], [vector])  # a stray point of a file that never existed
        lexical.upsert([ghost])
        lexical.commit()
        retag = vectors.live_chunks(did["retag"])[0]
        vectors._set_payload([HasIds((retag.point_id,))], {"embedder": "other-384-x"})  # type: ignore[attr-defined]
        dup = vectors.live_chunks(did["dup"])[0]
        copy = dup.model_copy(update={"point_id": str(uuid.uuid4())})
        vectors.upsert([copy], [vectors.vectors_for_hashes([dup.content_hash])[dup.content_hash]])
        lexical.upsert([copy])
        lexical.commit()
    edited = folder / Path(DOCS["edit"]).name
    edited.write_text(edited.read_text() + "\n\n## Added\n\nA paragraph written unwatched.\n")
    (folder / Path(DOCS["delete"]).name).unlink()
    (folder / "new.md").write_text("# New\n\nA note written while nobody watched.\n")
    (folder / "empty.md").write_text("# Was empty\n\nNow it has text.\n")


def test_fault_injection_verify_reports_each_class_and_repair_converges(
    tmp_path: Path, shared_docs: Path, store_pairing: StorePairing
) -> None:
    folder = copy_docs(shared_docs, DOCS.values(), tmp_path / "docs", flat=True)
    (folder / "empty.md").write_text("")  # a dead letter ("empty file")
    (folder / "notes.tsv").write_text("a\tb\n")  # not a supported type: excluded
    settings = _settings(tmp_path / "data", store_pairing)
    api.sync([folder], settings=settings)
    clean = verify(settings=settings)
    assert clean.ok and clean.drifted == [] and clean.chunks_checked > 0, clean.counts()
    did = {role: f"docs:{Path(rel).name}" for role, rel in DOCS.items()}
    did |= {"ghost": "docs:ghost.md", "new": "docs:new.md", "empty": "docs:empty.md"}

    _corrupt(settings, folder, did)
    report = verify(settings=settings)
    found = {k: sorted(e.doc_id for e in c.examples) for k, c in report.drift.items() if c.count}
    assert found == {
        "stale": [did["edit"]],
        "orphan": sorted([did["delete"], did["ghost"]]),
        "missing": [did["new"]],
        "leg_mismatch": [did["legs"]],
        "foreign_embedder": [did["retag"]],
        "duplicate": [did["dup"]],
        "retry_due": [did["empty"]],
    }, report.drift
    assert not report.ok and did["fine"] not in report.drifted
    ledger = {r.doc_id: r for r in files(settings=settings)}
    assert ledger[did["edit"]].state == "stale" and ledger["docs:notes.tsv"].state == "excluded"
    assert ledger[did["delete"]].state == "orphan" and ledger[did["new"]].state == "missing"
    assert ledger[did["empty"]].state == "dead" and "empty" in ledger[did["empty"]].reason

    repaired = verify(settings=settings, repair=True)
    assert repaired.ok, repaired.drift
    assert repaired.repaired is not None and repaired.repaired.drifted == report.drifted
    fresh = _settings(tmp_path / "fresh", store_pairing)
    api.sync([folder], settings=fresh)
    assert _index_state(settings) == _index_state(fresh)
    sampled = verify(settings=settings, sample=3)
    assert sampled.ok and sampled.sampled and sampled.docs_checked == 3


def test_ledger_lists_every_shared_file_with_its_state(tmp_path: Path, shared_docs: Path) -> None:
    """Every file of ../shared/data/docs: small supported ones indexed, big ones dead-lettered
    with the reason (a size cap keeps the test quick), unsupported ones excluded."""
    folder = tmp_path / "docs"
    shutil.copytree(shared_docs, folder)
    settings = Settings(data_dir=tmp_path / "data", sync={"max_file_bytes": 6_000})
    api.sync([folder], settings=settings)
    records = {r.path: r for r in files(settings=settings)}
    on_disk = sorted(str(p.resolve()) for p in folder.rglob("*") if p.is_file())
    assert sorted(records) == on_disk
    supported = {".md", ".html", ".docx", ".pptx", ".pdf", ".epub", ".txt"}
    for path, r in records.items():
        size, suffix = Path(path).stat().st_size, Path(path).suffix
        if suffix not in supported:
            assert r.state == "excluded" and "include pattern" in r.reason, r
        elif size > 6_000:
            assert r.state == "dead" and "file too large" in r.reason, r
        else:
            assert r.state == "indexed" and r.chunks > 0 and r.indexed_at, r
            assert r.fingerprint is not None and r.fingerprint.size == size
            assert len(r.fingerprint.digest) == 32
    dead = files(settings=settings, states=["dead"])
    assert dead and {r.state for r in dead} == {"dead"}


def test_a_files_page_lists_its_chunks_and_how_each_vector_came(
    tmp_path: Path, store_pairing: StorePairing
) -> None:
    """A file's chunks in reading order with their hashes; at the last change each vector was
    embedded (new text), reused (the same text held elsewhere) or kept (unchanged or moved)."""
    from ragstream.service.audit import file

    root = tmp_path / "notes"
    root.mkdir()
    body = "".join(
        f"## {name}\n\n{name} tea is steeped at {deg} degrees Celsius for {m} minutes. " * 6
        + "\n\n"
        for name, deg, m in (("Green", 80, 2), ("Black", 100, 4), ("White", 75, 3))
    )
    tea = root / "tea.md"
    tea.write_text("# Tea\n\n" + body)
    settings = _settings(tmp_path / "data", store_pairing)
    api.sync([root], settings=settings)
    first = file("notes:tea.md", settings=settings)
    assert first.record.state == "indexed" and first.record.chunks == len(first.chunks) > 1
    assert [c.ordinal for c in first.chunks] == sorted(c.ordinal for c in first.chunks)
    assert {c.vector_origin for c in first.chunks} == {"embedded"}
    assert all(c.in_bm25 and len(c.content_hash) == 32 for c in first.chunks)

    shutil.copy(tea, root / "copy.md")  # the same text under another path: nothing to embed
    tea.write_text("# Tea\n\n## Oolong\n\nOolong tea is steeped at 90 degrees.\n\n" + body)
    api.sync([root], settings=settings)
    copy = file("notes:copy.md", settings=settings)
    assert {c.vector_origin for c in copy.chunks} == {"reused"}
    assert [c.content_hash for c in copy.chunks] == [c.content_hash for c in first.chunks]
    edited = file("notes:tea.md", settings=settings)
    before = {c.content_hash for c in first.chunks}
    for c in edited.chunks:
        assert c.vector_origin == ("kept" if c.content_hash in before else "embedded"), c
    assert {c.vector_origin for c in edited.chunks} == {"kept", "embedded"}
    assert any("Oolong" in c.text for c in edited.chunks if c.vector_origin == "embedded")

    data = str(settings.data_dir)
    env = dict(
        os.environ,
        RAGSTREAM_STORE__VECTOR_BACKEND=store_pairing.vector,
        RAGSTREAM_STORE__LEXICAL_BACKEND=store_pairing.lexical,
    )
    shown = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "file", "notes:tea.md", "--data-dir", data,
         "--json"], capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["chunks"] == [c.model_dump(mode="json") for c in edited.chunks]
    absent = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "file", "notes:nope.md", "--data-dir", data],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert absent.returncode == 2 and "no file 'notes:nope.md'" in absent.stderr


def test_cli_verify_exit_codes_and_json(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = str(tmp_path / "data")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ragstream.cli", *args, "--data-dir", data, "--json"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    assert cli("sync", str(root)).returncode == 0
    ok = cli("verify")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True
    (root / "coffee.md").write_text("# Coffee\n\nEspresso is brewed under pressure.\n")
    drift = cli("verify")
    assert drift.returncode == 12
    assert json.loads(drift.stdout)["drift"]["missing"]["count"] == 1
    fixed = cli("verify", "--repair")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["repaired"]["ok"] is False
    listed = json.loads(cli("files", "--state", "indexed").stdout)
    assert sorted(r["doc_id"] for r in listed) == ["notes:coffee.md", "notes:tea.md"]


def test_citations_carry_the_version_they_quote_and_flag_a_changed_file(tmp_path: Path) -> None:
    from ragstream.client import Client

    root = tmp_path / "notes"
    root.mkdir()
    tea = root / "tea.md"
    tea.write_text("# Tea\n\nGreen tea is steeped at 80 degrees Celsius for two minutes.\n")
    settings = Settings(data_dir=tmp_path / "data")
    api.sync([root], settings=settings)
    question = "At what temperature is green tea steeped?"
    with Client(settings=settings) as client:
        first = client.query(question)
        assert first.citations and first.sources, first.refusal
        cited = first.citations[0]
        assert cited.file_version is not None and cited.indexed_at
        assert cited.file_version.size == tea.stat().st_size
        assert len(cited.file_version.digest) == 32 and cited.possibly_stale is False
        assert all(s.possibly_stale is False for s in first.sources)
        tea.write_text(tea.read_text() + "\nBlack tea takes boiling water.\n")  # nobody watches
        edited = client.query(question).citations[0]
        assert edited.possibly_stale is True and edited.file_version == cited.file_version
        tea.unlink()
        assert client.query(question).citations[0].possibly_stale is True


def test_drift_counts_are_an_otel_gauge(tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ragstream.core.telemetry import install_metric_reader

    reader = InMemoryMetricReader()
    install_metric_reader(reader)
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nAlpha text about apples and their orchards.\n")
    settings = Settings(data_dir=tmp_path / "data")
    api.sync([root], settings=settings)
    (root / "b.md").write_text("# B\n\nBeta text written while nothing watched.\n")
    assert verify(settings=settings).counts()["missing"] == 1
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        p.attributes["kind"]: p.value
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "ragstream.index.drift"
        for p in m.data.data_points  # type: ignore[union-attr]
    }
    assert points["missing"] == 1 and points["orphan"] == 0 and len(points) == 7
    assert ingest.status(settings=settings).drift == verify(settings=settings).counts()
