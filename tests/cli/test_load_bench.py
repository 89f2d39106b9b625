"""`bench/load.py --json`: a real `ragstream serve` over samples/, a slow LLM stub, two
concurrent clients; stdout is one JSON document with the keys the bench promises, every
query answered, each no faster than the stub's delay. `--bulk-add` under `watch --serve`
(over a copy of samples/): an idle row, then a row while new files go into the watched
folder, side by side in one document. `--abuse`: a baseline row, then one beside a
slow body, silent connections and a flood of queries; the normal clients get no errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "concurrency", "requests", "wall_s", "qps", "p50_s", "p95_s", "p99_s", "errors",
    "rejected_429", "rss_start_mb", "rss_end_mb", "mode", "llm_delay_s",
}  # fmt: skip


def bench(args: list[str], out: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # the static embedder: what these check (the bench's JSON, its rows, no client errors)
    # does not depend on the embedder, and its server then starts without loading MiniLM
    env |= {"TOKENIZERS_PARALLELISM": "false", "RAGSTREAM_EMBEDDER": "static"}
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "load.py"), *args, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_load_bench_json(tmp_path: Path) -> None:
    args = ["--json", "--concurrency", "2", "--requests", "4", "--llm-delay", "0.2"]
    proc = bench(args, tmp_path, timeout=240)
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


@pytest.mark.slow
def test_load_bench_bulk_add_json(tmp_path: Path) -> None:
    docs = shutil.copytree(REPO / "samples", tmp_path / "docs")
    args = ["--mode", "watch", "--bulk-add", "20", "--concurrency", "2", "--requests", "4"]
    args += ["--llm-delay", "0.1", "--json", "--docs", str(docs), "--warmup", "2"]
    proc = bench(args, tmp_path / "out", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("\n") == 1, proc.stdout[-3000:]
    doc = json.loads(proc.stdout)
    assert doc.keys() >= {"measurement", "runs", "ratios", "p95_ratio", "target_p95_ratio"}
    assert (doc["measurement"], doc["target_p95_ratio"]) == ("bulk_add", 3.0)
    idle, during = doc["runs"]
    for row in (idle, during):
        assert row.keys() >= KEYS | {"row"}, KEYS - row.keys()
        assert (row["concurrency"], row["requests"], row["mode"]) == (2, 4, "watch")
        assert row["errors"] == {} and row["ok"] == 4
    assert (idle["row"], during["row"]) == ("idle", "bulk_add")
    assert doc["p95_ratio"] == round(during["p95_s"] / idle["p95_s"], 3)
    assert [r["row"] for r in doc["ratios"]] == ["idle", "bulk_add"]
    bulk = doc["bulk_add"]
    assert (bulk["docs"], bulk["written"]) == (20, 20) and 0 <= bulk["indexed"] <= 20
    assert bulk["docs_before"] >= 1 and bulk["docs_after"] >= bulk["docs_before"]
    assert not any(docs.glob("bulk-add-*"))  # the run's subfolder is gone
    assert "stopped" in proc.stderr


@pytest.mark.slow
def test_load_bench_abuse_json(tmp_path: Path) -> None:
    args = ["--abuse", "--concurrency", "2", "--requests", "4", "--llm-delay", "0.1"]
    args += ["--flood", "100", "--idle-conns", "20", "--trickle", "1", "--trickle-s", "3"]
    args += ["--json", "--warmup", "2"]
    proc = bench(args, tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("\n") == 1, proc.stdout[-3000:]
    doc = json.loads(proc.stdout)
    assert doc.keys() >= {"measurement", "runs", "ratios", "p95_ratio", "abuse", "normal_clients"}
    assert (doc["measurement"], doc["target_p95_ratio"]) == ("abuse", None)
    baseline, during = doc["runs"]
    assert (baseline["row"], during["row"]) == ("baseline", "abuse")
    for row in doc["normal_clients"]:  # everyone else: answered, never an error
        assert row.keys() >= {"p50_s", "p95_s", "p99_s", "errors", "rejected_429"}
        assert row["errors"] == {} and row["requests"] == 4
    assert doc["p95_ratio"] == round(during["p95_s"] / baseline["p95_s"], 3)
    flood, trickle, idle = (doc["abuse"][k] for k in ("flood", "trickle", "idle"))
    assert flood["requests"] == 100 and flood["sent"] == flood["answered"] == 100
    assert flood["status"].keys() >= {"200", "429", "503", "504", "connection"}
    assert sum(flood["status"].values()) == 100 and flood["fire_s"] is not None
    assert trickle["clients"] == 1 and trickle["over_s"] == 3.0
    (slow,) = trickle["each"]
    assert slow.keys() >= {"result", "after_s", "sent_bytes", "body_bytes"}
    assert idle["conns"] == 20 and idle["opened"] + sum(idle["connect_errors"].values()) == 20
    assert idle["closed_by_server"] + idle["open_at_end"] == idle["opened"]
    assert "stopped" in proc.stderr
