"""Answerability over real documents: off-topic questions must be refused, answerable ones
answered — each configuration side by side on one index in one run.

Indexes folders of the shared real documents (default: their `html` and `md` folders — the
Python tutorial, docling's docs, a wiki page) through the real sync, then asks

- every question of `tests/data/offtopic_questions.txt` (general knowledge the documents do
  not hold; the target: all refused), and
- every question of `tests/data/docs_questions.tsv` (questions those documents do answer,
  written by reading them, each with the file that holds the answer; none of it is ever
  trained on): answered, and citing the right file,

through the offline answer path, once per configuration: `--configs` names rows of
`ROWS` (the answerability settings each row runs with). Prints one row per configuration
and, with `--show`, every wrong decision.

    .venv/bin/python bench/offtopic.py [--folders html md] [--data-dir DIR] [--show]

A `--data-dir` is kept between runs (its index is reused: a rerun embeds nothing).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from ragstream import api  # noqa: E402
from ragstream.core.answers import Answer, QueryRequest  # noqa: E402
from ragstream.core.settings import Settings  # noqa: E402
from ragstream.eval.answer_ablation import row_settings  # noqa: E402
from ragstream.query.engine import QueryEngine  # noqa: E402
from ragstream.service.served import open_engine  # noqa: E402

DOCS = REPO.parent / "shared" / "data" / "docs"
QUESTIONS = REPO / "tests" / "data" / "offtopic_questions.txt"
ANSWERABLE = REPO / "tests" / "data" / "docs_questions.tsv"
ROWS: dict[str, dict[str, Any]] = {  # `query.*` settings, as `row_settings` takes them
    "no answerability check": {
        "answerable.judge": "none",
        "answerable.floor": 0.0,
        "answerable.named_floor": 0.0,
    },
    "coverage/dense 0.5/0.5": {
        "answerable.judge": "none",
        "answerable.floor": 0.5,
        "answerable.named_floor": 0.0,
    },
    "judge floors 0.65 / dense 0.54 (rule)": {
        "answerable.decision": "rule",
        "answerable.named_floor": 0.0,
    },
    "rule + coverage/dense": {
        "answerable.decision": "rule",
        "answerable.floor": 0.5,
        "answerable.named_floor": 0.0,
    },
    "calibrated decision (default)": {},
    "calibrated decision, cosines read raw": {"cosine_scale": False},
    "calibrated + coverage/dense": {"answerable.floor": 0.5},
    "calibrated, no name check": {"answerable.named_floor": 0.0},
    "calibrated + every name": {"answerable.named_floor": 1.0},
}


def questions(path: Path = QUESTIONS) -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def answerable(path: Path = ANSWERABLE) -> list[tuple[str, str]]:
    """(question, file holding the answer) rows of the TSV."""
    rows = csv.DictReader(
        (line for line in path.read_text().splitlines() if not line.startswith("#")),
        delimiter="\t",
    )
    return [(r["question"], r["file"]) for r in rows]


def engine_for(base: QueryEngine, overrides: dict[str, Any]) -> QueryEngine:
    return QueryEngine(row_settings(base.settings, overrides), base.retriever)


def cites(answer: Answer, file: str) -> bool:
    return any(c.path.endswith(Path(file).name) for c in answer.citations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--folders", nargs="+", default=["html", "md"], help="under the shared docs")
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a temp dir")
    ap.add_argument("--configs", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--show", action="store_true", help="print every wrong decision")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="offtopic-"))
    try:
        root = (args.data_dir or scratch) / "docs"
        for folder in args.folders:
            if not (root / folder).exists():
                shutil.copytree(DOCS / folder, root / folder)
        settings = Settings(data_dir=(args.data_dir or scratch) / "data")
        report = api.sync([root], settings=settings)
        print(f"indexed {args.folders}: {report.docs_seen} docs, {report.chunks_live} chunks")
        off, on = questions(), answerable()
        print(f"{len(off)} off-topic questions, {len(on)} answerable ones\n")
        print("| configuration | off-topic refused | answerable answered | answerable answered "
              "citing the right file | p50 / p95 ms |")  # fmt: skip
        print("|---|---|---|---|---|")
        with open_engine(settings) as (base, _):
            for name in args.configs:
                engine = engine_for(base, {"log_queries": False, **ROWS[name]})
                engine.answer(QueryRequest(query=on[0][0]))  # model loads stay out of timings
                ms: list[float] = []

                def ask(q: str, engine: QueryEngine = engine, ms: list[float] = ms) -> Answer:
                    start = time.perf_counter()
                    answer = engine.answer(QueryRequest(query=q))
                    ms.append((time.perf_counter() - start) * 1000)
                    return answer

                off_answers = [ask(q) for q in off]
                on_answers = [(ask(q), f) for q, f in on]
                refused = Counter(a.refusal.reason for a in off_answers if a.refusal)
                answered = [(a, f) for a, f in on_answers if a.refusal is None]
                right = sum(cites(a, f) for a, f in answered)
                n_off, n_on = len(off), len(on)
                print(
                    f"| {name} | {sum(refused.values())} / {n_off} "
                    f"({sum(refused.values()) / n_off:.1%}; {dict(refused)}) | {len(answered)} / "
                    f"{n_on} ({len(answered) / n_on:.1%}) | {right} / {n_on} ({right / n_on:.1%})"
                    f" | {np.percentile(ms, 50):.0f} / {np.percentile(ms, 95):.0f} |"
                )
                if args.show:
                    for a in off_answers:
                        if a.refusal is None:
                            signals = a.answerability.signals if a.answerability else {}
                            print(f"    answered off-topic {a.query!r} ({a.answered}): "
                                  f"{a.text[:80]!r} {signals}")  # fmt: skip
                    for a, _ in on_answers:
                        if a.refusal is not None:
                            print(f"    refused answerable {a.query!r} ({a.answered}): "
                                  f"{a.refusal.reason}")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
