"""The retrieval ablation on the full SciFact test split (300 queries, 5,183 abstracts).

Indexes the corpus through the real ingest into a persistent data dir (the first run embeds
everything, ~5 min on 2 cores; later runs embed nothing), runs every test query through the
real retriever per config, prints the Markdown table and the "which stage broke?" failure
counts, and saves `<data-dir>/eval/test.json`. Compare with Qdrant's published SciFact
run: dense 0.654, BM25 0.683, RRF 0.723. `--answers` also runs the answer path per
query (refused / unsupported answers); `--mode gold|abstain` runs the answer-level checks,
`--mode answers` the context-assembly ablation scored on answers (`ragstream.eval.answer_ablation`).

    .venv/bin/python bench/eval_scifact.py [--data-dir bench/out/scifact-data] [--depth 500]
        [--mode retrieval|gold|abstain|answers] [--answers] [--k 8] [--split train]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream.eval.datasets import evaluate_dataset
from ragstream.eval.evaluation import DEFAULT_DEPTH, DEFAULT_K, MODES, markdown_report
from tests.harness.scifact import SCIFACT

OUT = Path(__file__).resolve().parent / "out" / "scifact-data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, default=OUT)
    ap.add_argument("--split", default="test")
    ap.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help="chunks per leg")
    ap.add_argument("--limit-queries", type=int, default=None)
    ap.add_argument("--mode", choices=MODES, default="retrieval")
    ap.add_argument("--answers", action="store_true", help="classify answer-level failures")
    ap.add_argument("--k", type=int, default=DEFAULT_K, help="chunks an answer is built from")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("ragstream.eval.evaluation").setLevel(logging.INFO)
    logging.getLogger("ragstream.eval.answer_ablation").setLevel(logging.INFO)  # progress
    t = time.perf_counter()
    report = evaluate_dataset(
        SCIFACT,
        args.data_dir,
        args.split,
        limit_queries=args.limit_queries,
        depth=args.depth,
        mode=args.mode,
        answers=args.answers,
        k=args.k,
    )
    print(f"\n### SciFact {args.split}: {report.queries} queries, depth {report.depth}/leg\n")
    print(markdown_report(report))
    print(f"\n{time.perf_counter() - t:.0f} s in all; JSON in {args.data_dir}/eval/")


if __name__ == "__main__":
    main()
