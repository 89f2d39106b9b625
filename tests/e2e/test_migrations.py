"""Storage format versions: every data dir kept under `tests/data/datadir-format<N>.tar.gz`
(written by `tests/data/make_datadir_fixture.py` with the format of its day) opens with this
ragstream, answers from its own files and syncs with nothing to embed; an index older than
the record gains it; a newer format is refused untouched (embedded, and by the CLI with its
exit code); a step that rewrites data runs after a snapshot it takes, or, with
`store.migrate = "ask"`, is refused with the command to run. The format 1 -> 2 step clears
the readers format 1 left on tombstones: afterwards no principal gets a deleted file back."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ragstream import Client, api
from ragstream.connectors import data_format
from ragstream.connectors.backends import backend_of
from ragstream.connectors.data_format import (
    Migration,
    format_path,
    record_format,
    recorded_format,
)
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.vector_stores import BaseQdrantStore, Match
from ragstream.core.errors import StorageFormatError
from ragstream.core.permissions import principal_of
from ragstream.core.settings import Settings, StoreSettings
from ragstream.core.snapshot import STORAGE_FORMAT
from ragstream.core.source_config import FolderConfig
from ragstream.service import snapshots
from ragstream.service.stores import open_stores

pytestmark = pytest.mark.slow

FIXTURES = sorted(Path(__file__).parents[1].joinpath("data").glob("datadir-format*.tar.gz"))
QUESTION = "When was the Skerrow lighthouse lamp first lit?"


def _unpacked(fixture: Path, into: Path) -> tuple[Path, Settings]:
    with tarfile.open(fixture) as tar:
        tar.extractall(into, filter="data")
    return into / "docs", Settings(data_dir=into / "data")


def _digest(folder: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        sha.update(path.relative_to(folder).as_posix().encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


def test_the_current_format_has_a_kept_data_dir() -> None:
    names = [f.name for f in FIXTURES]
    assert f"datadir-format{STORAGE_FORMAT}.tar.gz" in names, (
        "run tests/data/make_datadir_fixture.py and commit its file"
    )
    assert all(f.stat().st_size < 1_000_000 for f in FIXTURES)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.name)
def test_every_kept_data_dir_opens_answers_and_reads_its_metadata_once(
    fixture: Path, tmp_path: Path
) -> None:
    docs, settings = _unpacked(fixture, tmp_path)
    with Client(settings=settings) as c:
        assert c.status().chunks_live > 0
        hits = c.retrieve(QUESTION, k=3).results
        answer = c.query(QUESTION)
    assert recorded_format(settings.data_dir) == STORAGE_FORMAT
    assert hits and hits[0].doc_id == "docs:lighthouse.md"
    assert answer.refusal is None and "1874" in answer.text
    assert {c.doc_id for c in answer.citations} == {"docs:lighthouse.md"}
    # a data dir written before the metadata reader reads each file once more, for its
    # metadata (every parser key carries the reader's version): its chunks are re-stamped;
    # nothing is embedded either way
    again = api.sync([docs], settings=settings)
    assert again.chunks_embedded == 0 and again.chunks_reused == 0
    if fixture.name == "datadir-format1.tar.gz":
        assert again.docs_changed == again.docs_seen
        assert again.chunks_restamped == again.chunks_live
    else:
        assert again.docs_changed == 0
    with Client(settings=settings) as c:
        found = c.retrieve(QUESTION, k=3, filter="extension = md and mtime exists").results
    assert found and found[0].doc_id == "docs:lighthouse.md"
    settled = api.sync([docs], settings=settings)
    assert settled.chunks_embedded == 0 and settled.docs_changed == 0


def test_an_index_older_than_the_record_gains_it(tmp_path: Path) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    format_path(settings.data_dir).unlink()  # as every data dir was before the record
    assert recorded_format(settings.data_dir) == 0
    with Client(settings=settings) as c:
        assert c.retrieve(QUESTION, k=1).results[0].doc_id == "docs:lighthouse.md"
    assert recorded_format(settings.data_dir) == STORAGE_FORMAT
    # the record's own step rewrites nothing; the one snapshot is for format 1 -> 2's
    assert not data_format.MIGRATIONS[0].rewrites and data_format.MIGRATIONS[1].rewrites
    assert [s.storage_format for s in snapshots.listed_snapshots(settings)] == [0]


def test_a_newer_format_is_refused_and_left_untouched(tmp_path: Path) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    newer = {"storage_format": STORAGE_FORMAT + 1, "ragstream_version": "99.0"}
    format_path(settings.data_dir).write_text(json.dumps(newer))
    before = _digest(settings.data_dir)
    refused = rf"format {STORAGE_FORMAT + 1} .*ragstream 99\.0.*upgrade"
    with pytest.raises(StorageFormatError, match=refused), Client(settings=settings) as c:
        c.status()
    cli = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "status", "--data-dir", str(settings.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == StorageFormatError.exit_code, cli.stderr
    assert "upgrade ragstream" in cli.stderr and "Traceback" not in cli.stderr
    assert _digest(settings.data_dir) == before


@pytest.fixture
def next_format(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ragstream one format ahead, whose step rewrites stored data (a file in state/)."""
    marker = Path("state") / "rewritten-by-step"

    def rewrite(settings: Settings) -> None:
        (settings.data_dir / marker).write_text("step ran")

    step = Migration("a step that rewrites data", rewrite, rewrites=True)
    monkeypatch.setitem(data_format.MIGRATIONS, STORAGE_FORMAT, step)
    monkeypatch.setattr(data_format, "STORAGE_FORMAT", STORAGE_FORMAT + 1)
    monkeypatch.setattr(snapshots, "STORAGE_FORMAT", STORAGE_FORMAT + 1)
    return marker


def test_a_step_that_rewrites_data_runs_after_a_snapshot_of_the_old_dir(
    next_format: Path, tmp_path: Path
) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path / "d")
    with Client(settings=settings) as c:
        assert c.retrieve(QUESTION, k=1).results[0].doc_id == "docs:lighthouse.md"
        taken = c.snapshots()
    assert (settings.data_dir / next_format).read_text() == "step ran"
    assert recorded_format(settings.data_dir) == STORAGE_FORMAT + 1
    assert [s.storage_format for s in taken] == [STORAGE_FORMAT] and taken[0].counts is None
    # the snapshot is the old dir, whole: restored, it is migrated again on its way in
    old = Path(taken[0].path)
    snapshots.verify(settings, old)
    restored = tmp_path / "restored"
    snapshots.restore(settings, old, restored)
    assert (restored / next_format).read_text() == "step ran"
    assert recorded_format(restored) == STORAGE_FORMAT + 1


def test_ask_refuses_with_the_command_and_migrate_runs_it(
    next_format: Path, tmp_path: Path
) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    asking = settings.model_copy(update={"store": StoreSettings(migrate="ask")})
    command = f"ragstream migrate --data-dir {settings.data_dir}"
    with pytest.raises(StorageFormatError, match=command), Client(settings=asking) as c:
        c.status()
    assert not (settings.data_dir / next_format).exists()
    steps = snapshots.migrate(asking)
    assert steps == [f"format {STORAGE_FORMAT} -> {STORAGE_FORMAT + 1}: a step that rewrites data"]
    assert snapshots.migrate(asking) == []
    with Client(settings=asking) as c:
        assert c.status().chunks_live > 0


def test_an_older_ragstream_refuses_a_newer_snapshot_before_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    with Client(settings=settings) as c:
        taken = Path(c.snapshot().path)
    monkeypatch.setattr(snapshots, "STORAGE_FORMAT", STORAGE_FORMAT - 1)  # an older ragstream
    target = tmp_path / "restored"
    with pytest.raises(StorageFormatError, match=f"storage format {STORAGE_FORMAT} .*upgrade"):
        snapshots.restore(settings, taken, target)
    with pytest.raises(StorageFormatError, match="upgrade"):
        snapshots.verify(settings, taken)
    assert not target.exists() and not list(tmp_path.glob(".restored*"))


def test_retention_never_removes_the_snapshot_a_migration_took(tmp_path: Path) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    before = data_format.snapshot_before(settings.data_dir, STORAGE_FORMAT)
    with Client(settings=settings) as c:
        c.snapshot()
        time.sleep(0.01)  # ids are milliseconds
        newest = c.snapshot()
    gone = snapshots.prune(settings, keep=1)
    assert len(gone) == 1 and Path(newest.path).exists() and before.exists()
    assert [s.id for s in snapshots.listed_snapshots(settings)] == [newest.id, before.stem]


def _bm25_top(settings: Settings, query: str) -> list[str]:
    """The doc ids the live collection's own BM25 leg ranks for `query`, opened as the
    migration opens it (no format check)."""
    s = settings
    backend = backend_of(s.store.vector_backend)
    (embedder,) = backend.list(s.vectors_dir, s.store.index_name, s.store.qdrant_url).values()
    store = backend.open_store(s.vectors_dir, s.store.index_name, embedder, None, sparse=True)
    try:
        return [h.chunk.doc_id for h in store.search_text(query, 5, SearchFilter())]
    finally:
        store.close()


def test_format_2_cjk_text_is_retokenized_into_bigrams_with_nothing_embedded(
    tmp_path: Path,
) -> None:
    """Format 2 read a Chinese or Japanese clause as one word: its exact terms matched
    nothing. The 2 -> 3 step re-tokenizes the stored text (after a snapshot), and then the
    exact term ranks its own document first on both legs, with nothing embedded."""
    fixture = next(f for f in FIXTURES if f.name == "datadir-format2.tar.gz")
    docs, settings = _unpacked(fixture, tmp_path)
    asking = settings.model_copy(update={"store": StoreSettings(migrate="ask")})
    assert "docs:汤.md" not in _bm25_top(settings, "扁豆汤")
    assert "docs:灯台.md" not in _bm25_top(settings, "灯台")
    steps = snapshots.migrate(asking)
    assert steps == ["format 2 -> 3: re-tokenize BM25 with the script-aware analyzer"]
    assert [s.storage_format for s in snapshots.listed_snapshots(settings)] == [2]
    assert _bm25_top(settings, "扁豆汤")[0] == "docs:汤.md"
    assert _bm25_top(settings, "灯台")[0] == "docs:灯台.md"
    with Client(settings=settings) as c:
        hit = c.retrieve("扁豆汤", k=3).results[0]
    assert hit.doc_id == "docs:汤.md" and hit.ranks["lexical"] == 1
    assert api.sync([docs], settings=settings).chunks_embedded == 0


def _principal_sees(settings: Settings, doc_id: str) -> tuple[set[str], set[str]]:
    """(dense, BM25) doc ids root's principal filter lets the live store's searches return
    from `doc_id`, every point a candidate."""
    readers = settings.readers_of(principal_of("root"))
    flt = SearchFilter(readers=readers, doc_ids=(doc_id,))
    with open_stores(settings) as (vectors, lexical):
        assert isinstance(vectors, BaseQdrantStore)
        query = [1.0] * vectors.embedder.dimension
        dense = {h.chunk.doc_id for h in vectors.search(query, 100, flt)}
        bm25 = {h.chunk.doc_id for h in lexical.search("lighthouse keepers", 100, flt)}
    return dense, bm25


def test_format_1_tombstones_of_a_mirrored_source_lose_their_readers(tmp_path: Path) -> None:
    """A data dir of format 1 whose deleted file's tombstones kept their readers: `ask`
    refuses it, `migrate` clears them (after a snapshot), and no principal gets it back."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "lighthouse.md").write_text("# Lighthouse\n\nThe lighthouse keepers' log.\n")
    (docs / "tides.md").write_text("# Tides\n\nThe lighthouse keepers' tide table.\n")
    source = FolderConfig(name="docs", root=docs, permissions="posix")
    settings = Settings(
        data_dir=tmp_path / "data",
        embedder="static",
        sources=[source],
        store=StoreSettings(migrate="ask"),
    )
    api.sync([docs], settings=settings)
    (docs / "tides.md").unlink()
    assert api.sync([docs], settings=settings).chunks_tombstoned > 0
    gone = "docs:tides.md"
    with open_stores(settings) as (vectors, _):
        assert isinstance(vectors, BaseQdrantStore)
        stamp = ["everyone", "source:docs"]  # what the file's chunks carried, kept in format 1
        vectors._set_payload([Match("status", "deleted")], {"readers": stamp})
    record_format(settings.data_dir, 1)
    with pytest.raises(StorageFormatError, match="ragstream migrate"):
        _principal_sees(settings, gone)
    steps = snapshots.migrate(settings)
    assert steps == [
        "format 1 -> 2: clear the readers of tombstoned points",
        "format 2 -> 3: re-tokenize BM25 with the script-aware analyzer",
    ]
    assert [s.storage_format for s in snapshots.listed_snapshots(settings)] == [1]
    assert _principal_sees(settings, gone) == (set(), set())
    assert _principal_sees(settings, "docs:lighthouse.md") == ({"docs:lighthouse.md"},) * 2
    with Client(settings=settings, principal="root") as root:
        assert root.retrieve("tide table", k=5, filters={"doc_ids": [gone]}).results == []
        assert gone not in {f.doc_id for f in root.files()}
