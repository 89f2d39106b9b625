"""Crash recovery, long version: SIGKILL `ragstream sync` K times, restart, check (0 = pass).

Same campaign as tests/fault/test_crash_recovery.py (bench/_crash.py), with more kills and a
larger share of kills after a random delay. Prints one line per run and a summary line;
`violations` (a stored text encoded again), `mismatches` (index != fresh sync) and
`doc_payload` (a kept/moved point with a stale title or file fingerprint) must be 0.

    .venv/bin/python bench/crash.py [--kills 20] [--seed 6] [--docs 110] [--timer-share 0.5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness.chaos import REPO
from tests.harness.crash import crash_campaign


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--docs", type=int, default=110)
    ap.add_argument("--ops-between", type=int, default=10)
    ap.add_argument("--timer-share", type=float, default=0.5)
    args = ap.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = crash_campaign(
            Path(tmp),
            seed=args.seed,
            kills=args.kills,
            docs=args.docs,
            ops_between=args.ops_between,
            timer_share=args.timer_share,
            shared_docs=REPO.parent / "shared" / "data" / "docs",
        )
    for i, run in enumerate(result.runs):
        state = "killed" if run.killed else f"exit {run.returncode}"
        print(f"run {i:2d} {run.kill:26s} {state:8s} encoded {run.encoded:4d}  {run.seconds:5.1f}s")
    wrong = [m for m in result.mismatches if m.kind != "doc_payload"]
    for line in [*result.violations, *map(str, result.mismatches)]:
        print("  !", line)
    print(
        f"runs {len(result.runs)} kills {result.kills} docs {result.docs} "
        f"encoded {result.encoded} reencoded_unstored {result.reencoded_unstored} "
        f"unaudited {result.unaudited} violations {len(result.violations)} "
        f"mismatches {len(wrong)} doc_payload {len(result.mismatches) - len(wrong)} "
        f"seconds {time.perf_counter() - started:.0f}"
    )
    sys.exit(1 if result.violations or wrong or result.unaudited else 0)


if __name__ == "__main__":
    main()
