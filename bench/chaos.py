"""Chaos under watch, long version: R runs of N random file operations on a watched tree.

Same operations and check as tests/fault/test_chaos.py (bench/_chaos.py). Each run: a fresh tree
of SciFact abstracts, a real `ragstream watch` subprocess, N seeded operations, quiesce (a
sentinel file's outcome, then quiet), stop, compare with a fresh sync of the same folder.
`mismatches` and `doc_payload` (a kept/moved point with a stale title or file fingerprint)
must be 0. `quiesce` = seconds from the last operation until the
watcher had caught up.

    .venv/bin/python bench/chaos.py [--ops 1000] [--seed 11] [--runs 1] [--docs 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness.chaos import chaos_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--docs", type=int, default=60)
    args = ap.parse_args()
    mismatches = payload = 0
    quiesce: list[float] = []
    started = time.perf_counter()
    for run in range(args.runs):
        seed = args.seed + run
        with tempfile.TemporaryDirectory() as tmp:
            result = chaos_run(Path(tmp), seed, args.ops, n_docs=args.docs)
        wrong = [m for m in result.mismatches if m.kind != "doc_payload"]
        stale = len(result.mismatches) - len(wrong)
        mismatches, payload = mismatches + len(wrong), payload + stale
        quiesce.append(result.quiesce_s)
        ops = " ".join(f"{k}={v}" for k, v in sorted(result.counts.items()))
        print(
            f"run {run} seed {seed}: ops {result.ops} outcomes {result.outcomes} "
            f"mismatches {len(wrong)} doc_payload {stale} quiesce {result.quiesce_s:.1f}s [{ops}]"
        )
        for m in wrong[:20]:
            print("  !", m)
    print(
        f"ops {args.ops} runs {args.runs} mismatches {mismatches} doc_payload {payload} "
        f"quiesce_s max {max(quiesce):.1f} mean {sum(quiesce) / len(quiesce):.1f} "
        f"seconds {time.perf_counter() - started:.0f}"
    )
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
