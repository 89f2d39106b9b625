"""Blue/green reindex across real processes: a SIGKILL mid-backfill, and `watch --serve`.

The index starts on the 64-d static model (fast to build) and is upgraded to
all-MiniLM-L6-v2, whose backfill is slow enough on CPU to be killed half-way.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from tests.harness.scifact import corpus, write_markdown

pytestmark = pytest.mark.slow  # CLI and watch subprocesses, a SIGKILL mid-backfill

CLI = [sys.executable, "-m", "ragstream.cli"]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, RAGSTREAM_EMBEDDER="static", **extra)


def _record(data: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((data / "state" / "reindex.json").read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _live_points(s: Settings) -> dict[str, set[str]]:
    with open_runtime(s) as rt:
        sides = (rt.sides.live, *rt.sides.others)
        return {
            side.collection: {c.point_id for p in side.vectors.live_pages() for c in p}
            for side in sides
        }


def test_sigkill_mid_backfill_resumes_without_re_embedding(
    tmp_path: Path, scifact_dir: Path
) -> None:
    root = tmp_path / "abstracts"
    write_markdown(corpus(100, scifact_dir), root)  # ~600 chunks: three backfill pages
    data = tmp_path / "data"
    s = Settings(data_dir=data, embedder="static").with_paths([root])
    api.sync([root], settings=s)
    proc = subprocess.Popen(
        [*CLI, "reindex", "start", "--embedder", "minilm-l6", "--wait", "--json",
         "--data-dir", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # progress is saved every ~2 s while it runs
            progress = _record(data).get("progress", {})
            if 0 < progress.get("done", 0) < progress.get("total", 0):
                break
            assert proc.poll() is None, "the backfill finished before it could be killed"
            time.sleep(0.2)
        else:
            pytest.fail("no backfill progress recorded")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _record(data)["phase"] == "backfilling"
    before = _live_points(s)
    old, new = (r["collection"] for r in (_record(data)["old"], _record(data)["new"]))
    written = len(before[new])
    total = len(before[old])
    assert 0 < written < total
    with Client(settings=s) as client:
        done = client.reindex_run()
    assert done.record is not None and done.record.phase == "ready"
    # what the killed run wrote was not embedded again (at most the missing rest is)
    assert done.record.progress.pass_embedded <= total - written
    after = _live_points(s)
    assert after[new] == after[old] == before[old]


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            lines.put(json.loads(line))


def _wait_for(lines: queue.Queue[dict[str, Any]], doc_id: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if lines.get(timeout=1).get("doc_id") == doc_id:
                return
        except queue.Empty:
            continue
    pytest.fail(f"no outcome for {doc_id}")


def _cli(data: Path, *args: str) -> dict[str, Any]:
    run = subprocess.run(
        [*CLI, "reindex", *args, "--data-dir", str(data), "--json"],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def test_reindex_through_a_running_watch(tmp_path: Path, scifact_dir: Path) -> None:
    """`reindex` commands reach the `watch --serve` process that owns the data dir; its
    background backfill completes, edits made meanwhile are dual-written, and after the
    promote the same watch keeps indexing into the new live side."""
    root = tmp_path / "abstracts"
    write_markdown(corpus(40, scifact_dir), root)
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*CLI, "watch", str(root), "--data-dir", str(data), "--json", "--serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=_env(RAGSTREAM_SYNC__DEBOUNCE_MS="100"),
    )  # fmt: skip
    lines: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not (data / "state" / "endpoint.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        started = _cli(data, "start", "--embedder", "minilm-l6")
        assert started["record"]["phase"] in ("backfilling", "ready")
        (root / "during.md").write_text("# During\n\nAn okapi-marker note written mid-reindex.\n")
        _wait_for(lines, "abstracts:during.md")
        deadline = time.monotonic() + 240
        while _cli(data, "status")["record"]["phase"] != "ready":
            assert time.monotonic() < deadline
            time.sleep(1)
        promoted = _cli(data, "promote")
        assert promoted["embedder"]["name"] == "sentence-transformers/all-MiniLM-L6-v2"
        (root / "after.md").write_text("# After\n\nA narwhal-marker note written after it.\n")
        _wait_for(lines, "abstracts:after.md")
        with Client(data) as client:
            assert client.mode == "http"
            answer = client.query("Which note mentions the narwhal-marker?")
            status = client.reindex_status()
        (serving,) = [side for side in status.sides if side.serving]
        assert serving.embedder.name == promoted["embedder"]["name"]
        slug = serving.collection.split("__", 1)[1]  # `<index>__<embedder slug>`
        assert answer.embedder == slug
        assert {c.embedder for c in answer.candidates} - {""} == {slug}
        assert any(c.doc_id == "abstracts:after.md" for c in answer.candidates)
        counts = {s.collection: s.live for s in status.sides}
        assert len(set(counts.values())) == 1, counts  # both sides hold the same live set
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
