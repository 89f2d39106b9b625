"""Strange questions get an answer or a clear refusal, and how long each takes.

Asks the questions of `tests/harness/helpers.py`'s `BAD_QUESTIONS` (no letters, 4,000
characters, another language, another script, one word 500 times, a pure prompt
injection) through the offline answer path over an index, three times each, and prints
per question the outcome (answered, or the refusal's reason and check) and the slowest of
the three runs (the target: under 2 s on 2 cores).

    .venv/bin/python bench/strange_questions.py --data-dir D   # an indexed data dir
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.service.served import open_engine
from tests.harness.helpers import BAD_QUESTIONS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    settings = api.load_settings(args.data_dir)
    with open_engine(settings) as (engine, _):
        engine.answer(QueryRequest(query="warm up: load every model"))
        print("| question | outcome | slowest of runs (s) |\n|---|---|---|")
        for kind, question in BAD_QUESTIONS.items():
            slowest, outcome = 0.0, ""
            for _ in range(args.runs):
                start = time.perf_counter()
                answer = engine.answer(QueryRequest(query=question))
                slowest = max(slowest, time.perf_counter() - start)
                r = answer.refusal
                outcome = f"refused: {r.reason} ({r.check})" if r else "answered"
            print(f"| {kind} ({len(question)} chars) | {outcome} | {slowest:.2f} |")


if __name__ == "__main__":
    main()
