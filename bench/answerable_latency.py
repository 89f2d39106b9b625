"""Latency of the answerability judge alone (`timings_ms["answerable"]` of each answer).

Asks the first N judged questions of a BEIR split through the real engine (retrieve, fuse,
gate, judge; no generation) over a data dir the dataset is indexed into, and prints the
judge's p50 / p95 / max in ms (the budget: p95 < 150 ms at k = 8 on 2 cores).

    .venv/bin/python bench/answerable_latency.py ../shared/data/scifact --data-dir D [--n 100]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.eval.beir import load_beir
from ragstream.service.served import open_engine
from tests.harness.scifact import pct


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--k", type=int, default=8)
    args = ap.parse_args()
    _, queries, qrels = load_beir(args.dataset, args.split)
    asked = [queries[q] for q in queries if q in qrels][: args.n]
    ms: list[float] = []
    with open_engine(api.load_settings(args.data_dir)) as (engine, _):
        for question in asked:
            answer = engine.answer(QueryRequest(query=question, k=args.k, generate=False))
            if "answerable" in answer.timings_ms:  # absent when the gate refused first
                ms.append(answer.timings_ms["answerable"])
    print(f"{len(ms)} judged of {len(asked)} questions, k={args.k}: answerable p50 "
          f"{pct(ms, 0.5):.2f} ms, p95 {pct(ms, 0.95):.2f} ms, max {max(ms):.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
