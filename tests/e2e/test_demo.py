"""`make demo`, then a query from a second process: the test runs the commands the Makefile
runs (read from `make -n demo`), so the demo cannot drift from what is tested."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def demo_commands(data_dir: Path) -> tuple[list[list[str]], list[str]]:
    """(the recipe's ragstream commands, the ready-to-paste query it prints)."""
    printed = subprocess.run(
        ["make", "-n", "-s", "demo", f"DEMO_DIR={data_dir}", "DEMO_PORT=0"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    commands = [shlex.split(line) for line in printed if line.startswith(".venv/bin/ragstream")]
    (hint,) = [line for line in printed if line.startswith('echo "try: ')]
    query = shlex.split(shlex.split(hint)[1].removeprefix("try: "))
    return commands, query


@pytest.mark.slow
def test_demo_answers_a_second_process_while_it_watches(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    commands, query = demo_commands(data)
    *setup, watch = commands
    assert [c[1] for c in setup] == ["sync", "status"] and watch[1:2] == ["watch"]
    assert "--serve" in watch and query[1] == "query" and str(data) in query
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    for command in setup:
        subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(
        watch, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "serving queries at" in line:
                break
        else:
            pytest.fail("watch --serve never reported its URL")
        for _ in range(2):  # the second terminal asks twice; both go to the watching process
            done = subprocess.run(
                [*query, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            assert answer["refusal"] is None and answer["citations"]
            assert any("delete" in c["path"] or "gc" in c["path"] for c in answer["citations"])
        log = data / "logs" / "retrieval.jsonl"  # written by the watching process
        assert sum(1 for _ in log.open()) == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert not (data / "state" / "endpoint.json").exists()  # the URL is withdrawn on exit
