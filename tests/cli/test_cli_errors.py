"""Every user error is one line on stderr, a documented exit code, and no traceback
(`--debug` shows it). Each case runs the real console script."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragstream.core.errors import (
    AuthError,
    DataDirBusyError,
    InvalidRequestError,
    ModelUnavailableError,
    NoIndexError,
    SettingsError,
    UnreachableError,
)
from ragstream.core.settings import Settings
from ragstream.http import Serving, serving
from tests.harness.helpers import copy_docs

CLI = str(Path(sys.executable).parent / "ragstream")
DOC = "md/docling_concepts_chunking.md"


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    done = subprocess.run(
        [CLI, *args], env={**clean, **(env or {})}, cwd=cwd,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, done.stderr


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("ragstream: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_invalid_settings_name_the_key_and_the_fix(tmp_path: Path) -> None:
    code, err = run("status", "--data-dir", str(tmp_path), env={"RAGSTREAM_EMBEDER": "x"})
    assert code == SettingsError.exit_code == 10
    assert "RAGSTREAM_EMBEDER" in one_line(err) and "RAGSTREAM_EMBEDDER" in one_line(err)
    config = tmp_path / "ragstream.toml"
    config.write_text("[query]\nrerank_flor = 0.2\n")
    code, err = run("status", "--data-dir", str(tmp_path), cwd=tmp_path)
    assert code == 10 and "query.rerank_floor" in one_line(err)
    code, err = run("config", env={"RAGSTREAM_CHUNK__MAX_TOKENS": "many"})
    assert code == 10 and "chunk.max_tokens" in one_line(err)


def test_no_index_yet_says_to_sync(tmp_path: Path) -> None:
    code, err = run("query", "anything", "--data-dir", str(tmp_path / "empty"))
    assert code == NoIndexError.exit_code == 6
    assert "ragstream sync" in one_line(err)


def test_unreachable_url_and_bad_arguments(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, err = run("query", "anything", "--url", url)
    assert code == UnreachableError.exit_code == 8
    assert url in one_line(err) and "ragstream serve" in one_line(err)
    code, err = run("query", "anything", "--url", url, "--filter", "colour=red")
    assert code == InvalidRequestError.exit_code == 2 and "path, type, doc" in one_line(err)
    code, err = run("sync", str(tmp_path / "missing"), "--data-dir", str(tmp_path))
    assert code == 2 and "not a directory" in one_line(err)


def test_bad_api_key_is_refused_by_the_server(tmp_path: Path) -> None:
    """The key check runs before anything else, so a server that is still opening its
    index already refuses an unknown key."""
    settings = Settings(data_dir=tmp_path, server={"api_keys": {"good-key": "acme"}})
    with serving(Serving(settings), "127.0.0.1", 0) as url:
        code, err = run("query", "anything", "--url", url, "--api-key", "wrong-key")
    assert code == AuthError.exit_code == 9 and "API key" in one_line(err)


@pytest.mark.slow
def test_unknown_embedder_and_debug_traceback(tmp_path: Path, shared_docs: Path) -> None:
    root = copy_docs(shared_docs, [DOC], tmp_path / "docs", flat=True)
    args = ("sync", str(root), "--data-dir", str(tmp_path / "d"))
    env = {"RAGSTREAM_EMBEDDER": "no-such-model-anywhere"}
    code, err = run(*args, env=env)
    assert code == ModelUnavailableError.exit_code == 7
    assert "no-such-model-anywhere" in one_line(err)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    debug = subprocess.run(
        [CLI, *args, "--debug"], env={**clean, **env}, capture_output=True, text=True
    )
    assert debug.returncode == 7 and "Traceback" in debug.stderr


@pytest.fixture
def watching(tmp_path: Path, shared_docs: Path) -> Iterator[Path]:
    """A `watch` without --serve holding a data dir."""
    root = copy_docs(shared_docs, [DOC], tmp_path / "docs", flat=True)
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [CLI, "watch", str(root), "--data-dir", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the catch-up is done once the doc is reported
            if "indexed" in line or "chunks" in line:
                break
        yield data
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_a_data_dir_held_by_watch_names_the_pid_and_the_fix(watching: Path) -> None:
    pid = (watching / "state" / "ingest.lock").read_text().strip()
    code, err = run("query", "what is chunking?", "--data-dir", str(watching))
    assert code == DataDirBusyError.exit_code == 5
    line = one_line(err)
    assert f"pid {pid}" in line and "--serve" in line
