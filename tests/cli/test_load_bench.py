"""`bench/load.py --json`: a real `ragstream serve` over samples/, a slow LLM stub, two
concurrent clients; stdout is one JSON document with the keys the bench promises, every
query answered, each no faster than the stub's delay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "concurrency", "requests", "wall_s", "qps", "p50_s", "p95_s", "p99_s", "errors",
    "rejected_429", "rss_start_mb", "rss_end_mb", "mode", "llm_delay_s",
}  # fmt: skip


@pytest.mark.slow
def test_load_bench_json(tmp_path: Path) -> None:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env |= {"TOKENIZERS_PARALLELISM": "false"}
    args = ["--json", "--concurrency", "2", "--requests", "4", "--llm-delay", "0.2"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "load.py"), *args, "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("\n") == 1, proc.stdout[-3000:]
    doc = json.loads(proc.stdout)
    assert doc.keys() >= KEYS, KEYS - doc.keys()
    assert (doc["concurrency"], doc["requests"], doc["mode"]) == (2, 4, "serve")
    assert doc["errors"] == {} and doc["rejected_429"] == 0
    assert doc["llm_delay_s"] == 0.2 and doc["llm_calls"] >= 1
    assert 0.2 <= doc["p50_s"] <= doc["p95_s"] <= doc["p99_s"]
    assert doc["qps"] > 0 and doc["wall_s"] >= 0.2
    assert doc["rss_start_mb"] > 0 and doc["rss_end_mb"] > 0
    assert "stopped" in proc.stderr  # the server was shut down before the bench exited
