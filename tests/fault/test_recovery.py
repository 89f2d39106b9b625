"""bytewax recovery in `watch` (on by default, under `<data_dir>/recovery/`).

A real `ragstream watch` on two worker threads is SIGKILLed after its recovery DB has
committed epochs; files are edited, deleted, renamed and created while it is down; a second
`watch` on one worker resumes from that DB (a rescaled resume) and must converge: the index
equals a fresh sync of the folder, in both stores. The recovery DB stays small: every
snapshot is an empty one (the stores are the truth).
"""

from __future__ import annotations

import pickle
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from ragstream.core.settings import Settings
from ragstream.flows.sync import PARSE_BUCKETS
from tests.harness.chaos import Watcher, index_mismatches, read_index, reference_view

pytestmark = pytest.mark.slow  # a watch subprocess killed and resumed

# the static model2vec embedder: a crash and resume do not depend on the embedder, and each
# watch process then starts without loading MiniLM
EMBEDDER = "static"

NOTES = {
    "alpha.md": "# Alpha\n\nApples and pears grow in the northern orchard.\n",
    "beta.md": "# Beta\n\nBananas ripen faster next to apples.\n",
    "gamma.md": "# Gamma\n\nGrapes need a warm slope and dry autumns.\n",
    "delta.md": "# Delta\n\nDates keep for months in a cool pantry.\n",
}


def _db(data: Path) -> sqlite3.Connection:
    return sqlite3.connect(data / "recovery" / "part-0.sqlite3")


def _committed_epoch(data: Path) -> int:
    try:
        with _db(data) as db:
            row = db.execute("SELECT max(commit_epoch) FROM commits").fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0] or 0)


def _wait_for(watcher: Watcher, want: dict[str, str], timeout: float = 300) -> None:
    """Wait for an outcome per doc: "indexed" (changed) or "deleted"."""
    todo = dict(want)
    for item in watcher.outcomes(timeout):
        kind = want.get(str(item["doc_id"]))
        if item.get({"deleted": "deleted", "indexed": "changed"}.get(kind or "", "-")):
            todo.pop(str(item["doc_id"]), None)
        if not todo:
            return
    raise AssertionError(f"no outcome within {timeout}s for {sorted(todo)}")


def test_watch_resumes_from_recovery_and_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, data = tmp_path / "notes", tmp_path / "data"
    root.mkdir()
    for name, text in NOTES.items():
        (root / name).write_text(text)
    monkeypatch.setenv("BYTEWAX_SNAPSHOT_INTERVAL", "1")  # epochs commit within the test

    monkeypatch.setenv("RAGSTREAM_WORKERS", "2")
    first = Watcher.start(root, data, debounce_ms=100, embedder=EMBEDDER)
    try:
        _wait_for(first, {f"notes:{n}": "indexed" for n in NOTES})
        deadline = time.monotonic() + 60
        while _committed_epoch(data) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _committed_epoch(data) >= 2, "recovery is on by default in watch"
    finally:
        first.proc.send_signal(signal.SIGKILL)  # a crash: no clean shutdown
        first.proc.wait(timeout=60)

    # while it is down
    (root / "alpha.md").write_text("# Alpha\n\nQuinces replaced the old trees this year.\n")
    (root / "beta.md").unlink()
    (root / "gamma.md").rename(root / "epsilon.md")
    (root / "zeta.md").write_text("# Zeta\n\nZucchini flowers open at dawn.\n")

    monkeypatch.setenv("RAGSTREAM_WORKERS", "1")  # resuming on another worker count
    second = Watcher.start(root, data, debounce_ms=100, embedder=EMBEDDER)
    try:
        _wait_for(
            second,
            {"notes:alpha.md": "indexed", "notes:beta.md": "deleted",
             "notes:gamma.md": "deleted", "notes:epsilon.md": "indexed",
             "notes:zeta.md": "indexed"},
        )  # fmt: skip
        second.quiesce(root / "omega.md", "resumed")
    finally:
        second.stop()

    with _db(data) as db:
        executions = db.execute("SELECT ex_num, worker_count, resume_epoch FROM exs").fetchall()
        snaps = db.execute("SELECT step_id, state_key, ser_change FROM snaps").fetchall()
    assert [(ex, workers) for ex, workers, _ in sorted(executions)] == [(0, 2), (1, 1)]
    assert sorted(executions)[1][2] > 1, "the second run resumed from the first one's epochs"
    # every snapshot is empty (None for the source and the writer, a discarded parse
    # bucket), and there is at most one key per partition or parse bucket
    assert all(change is None or pickle.loads(change) is None for _, _, change in snaps)
    keys: dict[str, set[str]] = {}
    for step, key, _ in snaps:
        keys.setdefault(step.rsplit(".", 1)[-1], set()).add(key)
    assert keys["folders"] == {"folders"} and keys["index"] == {"index"}
    assert 0 < len(keys["parse"]) <= PARSE_BUCKETS

    settings = Settings(data_dir=data, embedder=EMBEDDER).with_paths([root])
    actual = read_index(settings)
    assert set(actual.docs) == {f"notes:{p.name}" for p in root.iterdir()}
    reference = reference_view([root], tmp_path / "fresh", EMBEDDER)
    assert index_mismatches(actual, reference) == []
    alpha = " ".join(str(row[2]) for row in actual.docs["notes:alpha.md"])
    assert "Quinces" in alpha and "Apples" not in alpha
