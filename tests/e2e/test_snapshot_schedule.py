"""Snapshots under a real `ragstream watch` subprocess: scheduled ones every
`snapshot.every` seconds with only the newest `snapshot.keep` kept, and a watch SIGKILLed
while a snapshot is half written, which leaves the earlier snapshots whole, the half file
never listed, and the live index as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ragstream import Client
from ragstream.connectors.snapshot_files import listed
from ragstream.core.settings import Settings
from ragstream.service import snapshots

pytestmark = pytest.mark.slow

FIXTURE = sorted(Path(__file__).parents[1].joinpath("data").glob("datadir-format*.tar.gz"))[-1]
FIXTURE_CHUNKS = 5  # its docs: three chunks of English notes, one each of a Chinese and a Japanese


def _watching(tmp_path: Path, every: str, keep: str) -> tuple[subprocess.Popen[bytes], Settings]:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    data = tmp_path / "data"
    env = dict(os.environ, RAGSTREAM_SNAPSHOT__EVERY=every, RAGSTREAM_SNAPSHOT__KEEP=keep)
    command = ["watch", str(tmp_path / "docs"), "--data-dir", str(data)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return proc, Settings(data_dir=data)


def _until(check: object, timeout: float = 180.0, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(step)
    raise AssertionError(f"not within {timeout}s")


def test_watch_snapshots_on_schedule_and_keeps_the_newest(tmp_path: Path) -> None:
    proc, settings = _watching(tmp_path, every="1", keep="2")
    folder = snapshots.snapshots_dir(settings)
    seen: set[str] = set()

    def four_taken() -> bool:
        now = [p.name for p in listed(folder)]
        assert len(now) <= 3  # at most one over `keep`, between a take and its prune
        seen.update(now)
        return len(seen) >= 4

    try:
        _until(four_taken)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    kept = [p.name for p in listed(folder)]
    assert len(kept) == 2 and kept == sorted(seen, reverse=True)[: len(kept)]
    for path in listed(folder):
        assert snapshots.verify(settings, path).counts is not None


def test_a_watch_killed_mid_snapshot_leaves_earlier_ones_whole(tmp_path: Path) -> None:
    proc, settings = _watching(tmp_path, every="0.5", keep="50")
    folder = snapshots.snapshots_dir(settings)
    try:
        _until(lambda: len(listed(folder)) >= 1)
        _until(lambda: any(folder.glob("*.partial")), step=0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    before = listed(folder)
    assert before and all(p.suffix == ".tar" for p in before)
    for path in before:  # every listed file is whole
        snapshots.verify(settings, path)
    with Client(settings=settings) as c:  # the index is as it was, and snapshots again
        assert c.status().chunks_live == FIXTURE_CHUNKS
        assert [s.path for s in c.snapshots()] == [str(p) for p in before]
        c.snapshot()
    assert not list(folder.glob(".*")) and not list(folder.glob("*.partial"))  # swept


ATTEMPTS = 5  # a loaded machine can finish a create before the poll sees it half written


@pytest.mark.parametrize("grown", [0, 20_000], ids=["file-just-opened", "members-being-written"])
def test_a_create_killed_at_each_write_step_leaves_nothing_listed(
    tmp_path: Path, grown: int
) -> None:
    """`snapshot create` SIGKILLed while its file is half written: as soon as the file
    appears (the shard still being packed beside it), and once members are being copied in.
    A create that finishes before the poll catches it is tried again on a fresh data dir."""
    for attempt in range(ATTEMPTS):
        if _killed_mid_create(tmp_path / f"attempt-{attempt}", grown):
            return
    pytest.fail(f"every one of {ATTEMPTS} creates finished before it could be killed")


def _killed_mid_create(root: Path, grown: int) -> bool:
    """One try: False when the create finished first (nothing checked), else the checks."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    settings = Settings(data_dir=root / "data")
    folder = snapshots.snapshots_dir(settings)
    with Client(settings=settings) as c:
        earlier = c.snapshot()
    cli = [sys.executable, "-m", "ragstream.cli", "snapshot", "create"]
    proc = subprocess.Popen([*cli, "--data-dir", str(settings.data_dir)])

    def half_written_or_done() -> bool:
        partial = [p for p in folder.glob("*.partial") if p.stat().st_size >= grown]
        return bool(partial) or proc.poll() is not None

    try:
        _until(half_written_or_done, step=0.002)
        if proc.poll() is not None:
            return False
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    if proc.returncode == 0:  # it finished between the poll and the signal
        return False
    assert [p.name for p in listed(folder)] == [Path(earlier.path).name]
    snapshots.verify(settings, Path(earlier.path))
    with Client(settings=settings) as c:
        assert c.status().chunks_live == FIXTURE_CHUNKS and [s.id for s in c.snapshots()] == [
            earlier.id
        ]
    return True
