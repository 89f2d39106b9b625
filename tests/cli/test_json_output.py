"""Machine output is machine-readable: every `--json` of every `bench/*.py` writes exactly one
JSON document to stdout, and its progress, logs and notices to stderr.

Each bench with a `--json` flag runs here as a real subprocess on the smallest input it
accepts, and its whole stdout must parse as one JSON document with the keys the bench
promises. A bench that gains `--json` without a run here fails
`test_every_json_bench_is_run_here`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
TESTED = {
    "freshness.py",
    "load.py",
    "rerank_curve.py",
    "sparse_leg.py",
    "verify.py",
}  # load.py: test_load_bench.py


def run_json(*args: str, timeout: float = 300) -> tuple[Any, str]:
    """`python bench/<args> --json ...`: its stdout as one JSON document, and its stderr."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env |= {"TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / args[0]), *args[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("\n"), proc.stdout[-3000:]
    return json.loads(proc.stdout), proc.stderr  # raises on anything but one document


def test_every_json_bench_is_run_here() -> None:
    flag = re.compile(r"add_argument\(\s*\"--json\"")
    with_json = {p.name for p in BENCH.glob("*.py") if flag.search(p.read_text(encoding="utf-8"))}
    assert with_json == TESTED


def test_stdout_to_stderr_moves_python_native_and_child_output() -> None:
    """The helper every `--json` uses: prints, writes to file descriptor 1 (native code) and
    an inheriting child's output all reach stderr; only the document reaches stdout."""
    script = (
        "import os, subprocess, sys\n"
        "from bench._stdout import print_json, stdout_to_stderr\n"
        "with stdout_to_stderr():\n"
        "    print('progress')\n"
        "    sys.stdout.write('buffered')\n"
        "    sys.__stdout__.write('stale\\n')\n"
        "    os.write(1, b'native\\n')\n"
        "    subprocess.run([sys.executable, '-c', 'print(\"child\")'], check=True)\n"
        "with stdout_to_stderr(False):\n"
        "    pass\n"
        "print_json({'ok': True})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True}
    assert proc.stdout == '{"ok": true}\n'
    for line in ("progress", "buffered", "stale", "native", "child"):
        assert line in proc.stderr


def test_verify_json() -> None:
    doc, _ = run_json("verify.py", "--json", "--chunks", "20", "40", "--per-doc", "4")
    assert doc.keys() == {"lexical", "per_doc", "sample", "rows"}
    assert (doc["lexical"], doc["per_doc"], doc["sample"]) == ("tantivy", 4, 200)
    assert [row["chunks"] for row in doc["rows"]] == [20, 40]
    for row in doc["rows"]:
        assert {"docs", "build_s", "full_s", "sample_s", "touched_1pct_full_s"} <= row.keys()
        assert row["docs"] == row["chunks"] // 4
        for audit in ("full", "touched"):
            assert row[audit] == {"ok": True, "docs": row["docs"], "chunks": row["chunks"]}
        assert row["sample"]["ok"] and row["sample"]["docs"] == row["docs"]  # sample > docs


def test_sparse_leg_latency_json() -> None:
    doc, _ = run_json("sparse_leg.py", "latency", "--json", "--chunks", "30", "50")
    assert list(doc) == ["rows"]
    assert [row["chunks"] for row in doc["rows"]] == [30, 50]
    keys = {"write_s_dense_only", "write_s_sparse", "write_s_tantivy"}
    keys |= {f"{leg}_{p}_ms" for leg in ("sparse", "tantivy") for p in ("p50", "p95")}
    for row in doc["rows"]:
        assert keys <= row.keys()
        assert 0 < row["tantivy_p50_ms"] <= row["tantivy_p95_ms"]


@pytest.mark.slow  # a real sync, then a real `watch --serve` subprocess (~20 s)
def test_freshness_json(scifact_dir: Path, tmp_path: Path) -> None:
    """The case the issue names: a fresh cache, so the bench builds its index and says so,
    on stderr, before the JSON on stdout."""
    args = ["--docs", "3", "--edits", "1", "--warmup", "0", "--gap-ms", "0"]
    doc, stderr = run_json("freshness.py", "--json", *args, "--cache", str(tmp_path))
    assert "built index:" in stderr
    assert (doc["docs"], doc["vectors"], doc["lexical"]) == (3, "edge", "sparse")
    assert doc["chunks"] > 0 and doc["query_p50_ms"] > 0
    for kind in ("edit", "new", "delete", "scan"):
        assert doc[f"{kind}_n"] == 1
        assert doc[f"{kind}_timeouts"] == 0, doc
        assert 0 < doc[f"{kind}_p50_s"] <= doc[f"{kind}_p95_s"] <= doc[f"{kind}_max_s"]
    assert any(p.name.startswith("freshness-3-") for p in tmp_path.iterdir())  # not bench/out


@pytest.mark.slow  # indexes a tiny SciFact slice (the embedder) and loads a reranker
def test_rerank_curve_json(scifact_dir: Path, model_dir: Path, tmp_path: Path) -> None:
    from ragstream.eval.beir import beir_subset, index_corpus, load_beir, write_beir

    corpus, queries, qrels = beir_subset(*load_beir(scifact_dir, "test"), 2, 4)
    dataset = write_beir(tmp_path / "slice", corpus, queries, qrels)
    index_corpus(corpus, tmp_path / "data")
    doc, _ = run_json(
        "rerank_curve.py", "--json", "--data-dir", str(tmp_path / "data"),
        "--reranker", str(model_dir), "--dataset", str(dataset), "--depths", "2,5",
    )  # fmt: skip
    assert doc.keys() == {"queries", "reranker", "rows"}
    assert doc["queries"] == 2 and isinstance(doc["reranker"], str) and doc["reranker"]
    assert [r["name"] for r in doc["rows"]] == ["hybrid-rrf", "+rerank@2", "+rerank@5"]
    for row in doc["rows"]:
        assert row.keys() == {"name", "ndcg@10", "p50_ms", "p95_ms"}
        assert 0 <= row["ndcg@10"] <= 1 and 0 <= row["p50_ms"] <= row["p95_ms"]
