"""A snapshot of a live `watch --serve` while 4 clients query and a bulk add (and a document
rewritten again and again) is indexed: every query answers, and each snapshot is one
consistent point: restored, every document's chunks carry one file version, and the counts
of both legs match its manifest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragstream import Client
from ragstream.core.errors import DataDirBusyError, OverloadedError, RagstreamError
from ragstream.core.settings import Settings
from ragstream.service import exports, snapshots
from ragstream.service.stores import open_live

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "ragstream.cli"]


def _doc(n: int, version: int = 0) -> str:
    sections = [
        f"## Part {p}\n\nNote {n} part {p} records the survey of cove {n * 10 + p} in season "
        f"{version}. The tide gauge there read {n + p + version} decimetres at noon.\n"
        for p in range(3)
    ]
    return f"# Survey note {n}\n\n" + "\n".join(sections)


def _indexed(c: Client) -> int:
    try:
        return c.status().docs
    except RagstreamError:  # the server is up, its index not open yet
        return 0


def _querying(url: str, stop: threading.Event, answered: list[int], failed: list[str]) -> None:
    with Client(url=url) as c:
        while not stop.is_set():
            try:
                assert c.retrieve("Which cove did the survey record?", k=5).results
                answered.append(1)
            except OverloadedError:  # shed under load, its retries spent: ask again, as a
                time.sleep(0.5)  # real client does (the server said it is full, not broken)
            except Exception as exc:  # every other failure is a test failure, collected
                failed.append(repr(exc))


def test_snapshots_under_queries_and_a_bulk_add_are_consistent(tmp_path: Path) -> None:
    root, data = tmp_path / "notes", tmp_path / "data"
    root.mkdir()
    for n in range(3):
        (root / f"note{n}.md").write_text(_doc(n))
    env = dict(os.environ, RAGSTREAM_SYNC__DEBOUNCE_MS="50", RAGSTREAM_SYNC__SETTLE_MS="50")
    proc = subprocess.Popen(
        [*CLI, "watch", str(root), "--data-dir", str(data), "--serve", "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    settings = Settings(data_dir=data)
    stop = threading.Event()
    answered: list[int] = []
    failed: list[str] = []
    taken = []
    readers: list[threading.Thread] = []
    try:
        deadline = time.monotonic() + 180
        while not (data / "state" / "endpoint.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        with Client(settings=settings) as admin:
            assert admin.mode == "http"
            url = str(admin.url)
            while _indexed(admin) < 3:  # the catch-up scan has indexed the first notes
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.3)
            readers += [
                threading.Thread(target=_querying, args=(url, stop, answered, failed))
                for _ in range(4)
            ]
            for t in readers:
                t.start()
            while len(answered) < 8:  # every reader is answering (the models are loaded)
                assert time.monotonic() < deadline and not failed, failed[:3]
                time.sleep(0.1)
            for wave in range(3):
                for n in range(3 + wave * 10, 13 + wave * 10):  # a bulk add of 10 notes
                    (root / f"note{n}.md").write_text(_doc(n))
                (root / "note0.md").write_text(_doc(0, version=wave + 1))  # rewritten
                before = len(answered)
                taken.append(admin.snapshot())
                assert len(answered) > before  # queries went on while it was taken
                time.sleep(1.0)
            with pytest.raises(DataDirBusyError, match="snapshot create"):
                exports.export(settings, "jsonl", tmp_path / "held.jsonl")  # its stores are held
    finally:
        stop.set()
        for t in readers:  # before the server stops: every query must answer
            t.join(timeout=60)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert not failed, failed[:3]
    assert len(answered) > 20
    for i, info in enumerate(taken):
        restored = tmp_path / f"restored{i}"
        manifest = snapshots.restore(settings, Path(info.path), restored)
        with open_live(settings.model_copy(update={"data_dir": restored})) as live:
            assert live is not None
            versions: dict[str, set[tuple[int, int, str]]] = {}
            for page in live[1].live_pages():
                for c in page:
                    fp = (c.file_size, c.file_mtime_ns, c.file_digest)
                    versions.setdefault(c.doc_id, set()).add(fp)
        assert manifest.counts is not None
        assert sum(1 for _ in versions) >= 3
        torn = {doc: fps for doc, fps in versions.items() if len(fps) > 1}
        assert not torn, torn
