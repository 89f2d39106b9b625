"""Calibrate the answerability signals on a BEIR split (train only: their floors are a choice).

For each judged question, the judge (`query/answerable.py`) scores the top-k chunks twice:
as retrieved (the gold documents are in the index), and with the question's gold documents
taken out of the fused candidates before the cut to k (what `eval --mode abstain` does by
re-indexing without them; same ranking here, far faster). Three signals are recorded per
question: the best chunk's term coverage, the best dense cosine, and the trained judge's
best sentence score. On the train split only the claims the judge did *not* train on are
used (`train.judge_data.is_holdout`), so the figures are not flattered by its training set.

On train it searches the engine's rule, "the judge scores a sentence >= j, or the best
dense cosine reaches d" (`query.judge_floor` / `query.judge_dense`), prints its Pareto
frontier and picks the pair that refuses the most gold-removed questions while keeping
>= 90 % of the answerable ones answered; then one row per signal. On a test split it
only reports the pair it is given (chosen on train).

    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split train
    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split test \\
        --judge-floor J --judge-dense D
(D: a data dir the dataset is indexed into, e.g. by `ragstream eval DATASET --data-dir D`.)
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

import numpy as np

from ragstream import api
from ragstream.core.answers import QueryRequest, RetrievedChunk
from ragstream.eval.beir import doc_key, load_beir
from ragstream.operators.judge import load_judge
from ragstream.query.answerable import judge
from ragstream.train.judge_data import is_holdout

KEEP = 0.90  # answerable questions the rule must keep answered (the target on test)
# (best-chunk coverage, best dense cosine, judge best, answer type matched)
Point = tuple[float, float, float, float]
# (coverage floor, its dense alternative, judge floor, judge's dense override, need type)
Rule = tuple[float, float, float, float, bool]


def answers(p: Point, rule: Rule) -> bool:
    """The engine's rule (query/answerable.py `judge`) on recorded signals."""
    coverage, dense, judged, override, typed = rule
    lexical_ok = (p[0] >= coverage or p[1] >= dense) if coverage > 0 else True
    judge_ok = p[2] >= judged or p[1] >= override
    return lexical_ok and judge_ok and (p[3] > 0 or not typed)


def rates(pairs: list[tuple[Point, Point]], rule: Rule) -> tuple[float, float]:
    """(answerable kept, gold-removed refused) under this rule."""
    kept = sum(answers(present, rule) for present, _ in pairs) / len(pairs)
    refused = sum(not answers(absent, rule) for _, absent in pairs) / len(pairs)
    return kept, refused


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--judge", default="bundled", help="judge model: bundled or a directory")
    ap.add_argument("--judge-floor", type=float, default=None, help="report this judge floor")
    ap.add_argument("--judge-dense", type=float, default=1.01, help="and this dense override")
    args = ap.parse_args()
    if args.split == "test" and args.judge_floor is None:
        sys.exit("choose the floor on a train split; on test, report it with --judge-floor")
    _, queries, qrels = load_beir(args.dataset, args.split)
    judged = [q for q in queries if q in qrels]
    if args.split == "train":
        judged = [q for q in judged if is_holdout(int(q))]
    scorer = load_judge(args.judge)
    pairs: list[tuple[Point, Point]] = []
    ms: list[float] = []
    with api.open_engine(api.load_settings(args.data_dir)) as (engine, _):
        lexical, vectors = engine.retriever.lexical, engine.retriever.vectors

        def point(question: str, results: list[RetrievedChunk]) -> Point:
            chunks = {c.point_id: c for c in vectors.get([r.point_id for r in results])}
            ranked = [chunks[r.point_id] for r in results if r.point_id in chunks]
            start = time.perf_counter()
            verdict, _ = judge(question, ranked, lexical.doc_freqs, 0.0, scorer=scorer)
            ms.append((time.perf_counter() - start) * 1000)
            dense = max((r.scores.get("dense", 0.0) for r in results), default=0.0)
            s = verdict.signals
            return s["coverage_best"], dense, s["judge_best"], s["answer_type_match"]

        for qid in judged:
            gold = {d for d, rel in qrels[qid].items() if rel > 0}
            found = engine.retrieve(QueryRequest(query=queries[qid], k=50, generate=False))
            removed = [r for r in found.results if doc_key(r.doc_id) not in gold]
            question = queries[qid]
            pairs.append(
                (point(question, found.results[: args.k]), point(question, removed[: args.k]))
            )
    print(f"{args.dataset.name} {args.split}: {len(judged)} questions, k={args.k}")
    print(f"judge latency (k={args.k}): p50 {np.percentile(ms, 50):.1f} ms, "
          f"p95 {np.percentile(ms, 95):.1f} ms")  # fmt: skip
    if args.judge_floor is not None:
        floor, override = args.judge_floor, args.judge_dense
    else:
        grid = [
            (j / 100, d / 100, *rates(pairs, (0.0, 1.01, j / 100, d / 100, False)))
            for j in range(5, 100, 5)
            for d in (*range(40, 100, 2), 101)
        ]
        print("judge >= j OR dense >= d, the Pareto frontier (answered, refused):")
        best = -1.0
        for j, d, kept, refused in sorted(grid, key=lambda g: (-g[2], -g[3])):
            if refused > best:
                best = refused
                print(f"  j {j:.2f} d {d:.2f}: {kept:.1%}, {refused:.1%}")
        good = sorted((g for g in grid if g[2] >= KEEP), key=lambda g: (-g[3], -g[0], g[1]))
        floor, override = good[0][:2] if good else (0.5, 1.01)
        print(f"chosen: judge floor {floor:.2f}, dense override {override:.2f} "
              f"(the most refused with >= {KEEP:.0%} answered on this split)")  # fmt: skip
    print("| signal | answerable answered | gold-removed refused |")
    print("|---|---|---|")
    for name, rule in (
        ("coverage/dense 0.5/0.5", (0.5, 0.5, 0.0, 1.01, False)),
        (f"trained judge >= {floor:.2f}", (0.0, 1.01, floor, 1.01, False)),
        (f"judge, or dense >= {override:.2f} (chosen)", (0.0, 1.01, floor, override, False)),
        ("chosen + coverage/dense 0.5/0.5", (0.5, 0.5, floor, override, False)),
        ("chosen + answer type", (0.0, 1.01, floor, override, True)),
    ):
        kept, refused = rates(pairs, rule)
        print(f"| {name} | {kept:.1%} | {refused:.1%} |")


if __name__ == "__main__":
    main()
