"""The real `ragstream` CLI in a subprocess: JSON contracts, exit codes, the mass-delete guard."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the real CLI in subprocesses

SYNC_KEYS = {
    "docs_seen",
    "docs_changed",
    "docs_deleted",
    "chunks_live",
    "chunks_embedded",
    "chunks_reused",
    "chunks_tombstoned",
    "dead_letters",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragstream.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_sync_status_and_guard_json(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(12):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nNote number {i} is about topic {i}.\n")
    (root / "broken.pdf").write_bytes(b"%PDF-1.7 not really")
    data = str(tmp_path / "data")
    first = cli("sync", str(root), "--data-dir", data, "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report.keys() >= SYNC_KEYS
    assert report["docs_seen"] == 13 and report["chunks_embedded"] == 12
    assert [Path(d["path"]).name for d in report["dead_letters"]] == ["broken.pdf"]
    assert set(report["dead_letters"][0]) >= {"path", "stage", "reason"}

    status = json.loads(cli("status", "--data-dir", data, "--json").stdout)
    assert status["chunks_live"] == 12 and status["chunks_deleted"] == 0
    assert {"name", "fingerprint", "dimension"} <= status["embedder"].keys()
    assert status["embedder"]["dimension"] == 384
    assert status["reranker"].startswith("none")
    assert [Path(d["path"]).name for d in status["dead_letters"]] == ["broken.pdf"]

    for i in range(11):  # the folder "vanishes": 11 of 12 docs gone
        (root / f"n{i}.md").unlink()
    guarded = cli("sync", str(root), "--data-dir", data, "--json")
    assert guarded.returncode == 3
    held = json.loads(guarded.stdout)
    assert held["chunks_tombstoned"] == 0 and held["guard"]["would_delete"] == 11
    assert "allow-mass-delete" in held["guard"]["reason"]
    assert json.loads(cli("status", "--data-dir", data, "--json").stdout)["chunks_live"] == 12

    allowed = cli("sync", str(root), "--data-dir", data, "--json", "--allow-mass-delete")
    assert allowed.returncode == 0
    assert json.loads(allowed.stdout)["chunks_tombstoned"] == 11


def test_serve_answers_over_http_and_cleans_up(tmp_path: Path) -> None:
    import signal

    from ragstream.client import Client

    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    data = tmp_path / "data"
    assert cli("sync", str(root), "--data-dir", str(data), "--json").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream.cli", "serve", "--data-dir", str(data), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]  # listening; the index opens next
        assert json.loads((data / "state" / "endpoint.json").read_text())["url"] == url
        deadline = time.monotonic() + 120
        while not _ready(url):
            assert time.monotonic() < deadline and proc.poll() is None, "never ready"
            time.sleep(0.2)
        answer = Client(url=url).query("How long is green tea steeped?")
        assert answer.refusal is None and "two minutes" in answer.text
    finally:
        proc.send_signal(signal.SIGTERM)  # a container's stop; Ctrl-C takes the same path
        assert proc.wait(timeout=60) == 0
    assert not (data / "state" / "endpoint.json").exists()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/ready", timeout=5) as response:
            return bool(json.loads(response.read())["ready"])
    except urllib.error.HTTPError as err:
        assert err.code == 503  # up, not ready yet
        return False
