"""Storage format versions: every data dir kept under `tests/data/datadir-format<N>.tar.gz`
(written by `tests/data/make_datadir_fixture.py` with the format of its day) opens with this
ragstream, answers from its own files and syncs with nothing to embed; an index older than
the record gains it; a newer format is refused untouched (embedded, and by the CLI with its
exit code); a step that rewrites data runs after a snapshot it takes, or, with
`store.migrate = "ask"`, is refused with the command to run."""

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
from ragstream.connectors.data_format import Migration, format_path, recorded_format
from ragstream.core.errors import StorageFormatError
from ragstream.core.settings import Settings, StoreSettings
from ragstream.core.snapshot import STORAGE_FORMAT
from ragstream.service import snapshots

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
def test_every_kept_data_dir_opens_answers_and_syncs_nothing(fixture: Path, tmp_path: Path) -> None:
    docs, settings = _unpacked(fixture, tmp_path)
    with Client(settings=settings) as c:
        assert c.status().chunks_live > 0
        hits = c.retrieve(QUESTION, k=3).results
        answer = c.query(QUESTION)
    assert recorded_format(settings.data_dir) == STORAGE_FORMAT
    assert hits and hits[0].doc_id == "docs:lighthouse.md"
    assert answer.refusal is None and "1874" in answer.text
    assert {c.doc_id for c in answer.citations} == {"docs:lighthouse.md"}
    again = api.sync([docs], settings=settings)
    assert again.chunks_embedded == 0 and again.docs_changed == 0


def test_an_index_older_than_the_record_gains_it_without_a_snapshot(tmp_path: Path) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    format_path(settings.data_dir).unlink()  # as every data dir was before the record
    assert recorded_format(settings.data_dir) == 0
    with Client(settings=settings) as c:
        assert c.retrieve(QUESTION, k=1).results[0].doc_id == "docs:lighthouse.md"
    assert recorded_format(settings.data_dir) == STORAGE_FORMAT
    assert not (settings.data_dir / "snapshots").exists()  # the step rewrote nothing


def test_a_newer_format_is_refused_and_left_untouched(tmp_path: Path) -> None:
    _, settings = _unpacked(FIXTURES[-1], tmp_path)
    newer = {"storage_format": STORAGE_FORMAT + 1, "ragstream_version": "99.0"}
    format_path(settings.data_dir).write_text(json.dumps(newer))
    before = _digest(settings.data_dir)
    refused = r"format 2 .*ragstream 99\.0.*upgrade"
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

    def rewrite(data_dir: Path) -> None:
        (data_dir / marker).write_text("step ran")

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
