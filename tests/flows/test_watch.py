"""`ragstream watch` as a real subprocess with a real watchdog observer on a temp dir."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragstream.core.models import DRIFT_KINDS
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime

pytestmark = pytest.mark.slow  # watch and serve subprocesses


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[dict]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            lines.put(json.loads(line))


def _wait_for(lines: queue.Queue[dict], doc_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            item = lines.get(timeout=1)
        except queue.Empty:
            continue
        if item["doc_id"] == doc_id:
            return item
    raise AssertionError(f"no outcome for {doc_id} within {timeout}s")


def _wait_for_any(lines: queue.Queue[dict], timeout: float = 120) -> dict:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no outcome within {timeout}s") from None


def test_watch_sees_saves_atomic_renames_and_deletes(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# Alpha\n\nThe first note talks about apples and pears.\n")
    data = tmp_path / "data"
    env = dict(os.environ, RAGSTREAM_SYNC__DEBOUNCE_MS="150", RAGSTREAM_SYNC__SETTLE_MS="100")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragstream.cli",
            "watch",
            str(root),
            "--data-dir",
            str(data),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        assert _wait_for(lines, "notes:a.md")["chunks_embedded"] == 1
        # a save in bursts: processed once, after the debounce
        target = root / "sub" / "b.md"
        for i in range(5):
            target.write_text(f"# Beta\n\nDraft {i} of a note about bananas.\n")
            time.sleep(0.02)
        first = _wait_for(lines, "notes:sub/b.md")
        assert first["chunks_live"] == 1
        # an atomic save (temp file + rename over the original)
        tmp = root / "sub" / ".b.md.tmp"
        tmp.write_text("# Beta\n\nFinal note about blueberries and bananas.\n")
        os.replace(tmp, target)
        assert _wait_for(lines, "notes:sub/b.md")["chunks_embedded"] == 1
        (root / "a.md").unlink()
        assert _wait_for(lines, "notes:a.md")["deleted"] is True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    with open_runtime(Settings(data_dir=data)) as rt:
        texts = [c.text for c in rt.vectors.live_chunks("notes:sub/b.md")]
        assert any("blueberries" in t for t in texts)
        assert not any("Draft" in t for t in texts)
        assert rt.vectors.live_chunks("notes:a.md") == []
        assert lines.empty(), "each save burst is processed once"


def test_bytewax_run_entry_point(tmp_path: Path) -> None:
    """`python -m bytewax.run ragstream.flows.sync:flow` runs the watching flow from settings."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nIndexed by the bytewax runner itself.\n")
    sources = json.dumps([{"name": "docs", "root": str(root)}])
    env = dict(os.environ, RAGSTREAM_DATA_DIR=str(tmp_path / "data"), RAGSTREAM_SOURCES=sources)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bytewax.run", "ragstream.flows.sync:flow"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    lines: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        assert _wait_for(lines, "docs:a.md")["chunks_embedded"] == 1
        (root / "b.md").write_text("# B\n\nA file created while the runner watches.\n")
        assert _wait_for(lines, "docs:b.md")["chunks_live"] == 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_watch_serve_answers_from_the_same_process(tmp_path: Path) -> None:
    """One process owns the data dir: a Client finds it held and uses the recorded endpoint."""
    from ragstream.client import Client

    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = tmp_path / "data"
    env = dict(os.environ, RAGSTREAM_SYNC__DEBOUNCE_MS="100", RAGSTREAM_VERIFY__EVERY_S="0.5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream.cli", "watch", str(root), "--data-dir", str(data),
         "--json", "--serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    lines: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        _wait_for(lines, "notes:tea.md")
        endpoint = data / "state" / "endpoint.json"
        deadline = time.monotonic() + 30
        while not endpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        with Client(data) as client:
            assert client.mode == "http"
            first = client.query("How long is green tea steeped?")
            assert first.refusal is None and "two minutes" in first.text
            (root / "coffee.md").write_text(
                "# Coffee\n\nEspresso is brewed at nine bars of pressure for 25 seconds.\n"
            )
            _wait_for(lines, "notes:coffee.md")
            second = client.query("At what pressure is espresso brewed?")
            assert second.refusal is None and "nine bars" in second.text
            # the audit over HTTP, and the scheduled one reaching status
            asked = client.verify()
            assert asked.ok and asked.docs_checked == 2
            ledger = {r.doc_id: r.state for r in client.files()}
            assert ledger == {"notes:tea.md": "indexed", "notes:coffee.md": "indexed"}
            deadline = time.monotonic() + 30
            while (client.status().verified_at or 0) <= asked.at < deadline + asked.at:
                assert time.monotonic() < deadline, "the scheduled audit never ran"
                time.sleep(0.2)
            assert client.status().drift == dict.fromkeys(DRIFT_KINDS, 0)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert not (data / "state" / "endpoint.json").exists()


def test_package_status_answers_from_the_serving_watch(tmp_path: Path) -> None:
    """`ragstream.status(data_dir=D)` goes through `connect`: while `watch D --serve` owns
    the data dir, the serving process answers, with the counts of its `GET /v1/status`."""
    import httpx

    import ragstream
    from ragstream.connectors.vector_stores import StoreBusyError
    from ragstream.service import ingest

    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    (root / "coffee.md").write_text("# Coffee\n\nEspresso is brewed at nine bars of pressure.\n")
    data = tmp_path / "data"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream.cli", "watch", str(root), "--data-dir", str(data),
         "--json", "--serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    lines: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        seen = {_wait_for_any(lines)["doc_id"] for _ in range(2)}
        assert seen == {"notes:tea.md", "notes:coffee.md"}
        endpoint = data / "state" / "endpoint.json"
        deadline = time.monotonic() + 30
        while not endpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        served = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=30).json()
        status = ragstream.status(data_dir=data)  # the stores are held: this is the HTTP path
        counts = ("docs", "chunks_live", "chunks_deleted", "lexical_live", "collection")
        assert {k: getattr(status, k) for k in counts} == {k: served[k] for k in counts}
        assert status.docs == 2 and status.chunks_live >= 2
        with pytest.raises(StoreBusyError):  # what opening the stores here meets
            ingest.status(data_dir=data)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
