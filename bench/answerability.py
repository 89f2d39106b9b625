"""Calibrate the answerability judge on a BEIR split (train only: its floors are a choice).

For each judged question, the judge (`query/answerable.py`) scores the top-k chunks twice:
as retrieved (the gold documents are in the index), and with the question's gold documents
taken out of the fused candidates before the cut to k (what `eval --mode abstain` does by
re-indexing without them; same ranking here, far faster). A question counts as answerable
when the best chunk's term coverage reaches the coverage floor or the best dense cosine
reaches the dense floor. Over a grid of both floors it prints the pairs that keep ≥ 95 % of
the answerable questions answered and the one among them that refuses the most
gold-removed ones. On a test split it only reports the pair it is given (chosen on train).

    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split train
    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split test \\
        --floor F --dense G
(D: a data dir the dataset is indexed into, e.g. by `ragstream eval DATASET --data-dir D`.)
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
from ragstream.core.answers import QueryRequest, RetrievedChunk
from ragstream.eval.beir import doc_key, load_beir
from ragstream.query.answerable import judge

KEEP = 0.95  # answerable questions the judge must keep answered
Point = tuple[float, float]  # (best-chunk coverage, best dense cosine)


def rates(pairs: list[tuple[Point, Point]], floor: float, dense: float) -> tuple[float, float]:
    """(answerable kept, gold-removed refused) at these floors."""

    def ok(p: Point) -> bool:
        return p[0] >= floor or p[1] >= dense

    kept = sum(ok(present) for present, _ in pairs) / len(pairs)
    refused = sum(not ok(absent) for _, absent in pairs) / len(pairs)
    return kept, refused


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--floor", type=float, default=None, help="report this coverage floor")
    ap.add_argument("--dense", type=float, default=None, help="report this dense floor")
    args = ap.parse_args()
    fixed = args.floor is not None and args.dense is not None
    if args.split == "test" and not fixed:
        sys.exit("choose the floors on a train split; on test, report them with --floor --dense")
    _, queries, qrels = load_beir(args.dataset, args.split)
    judged = [q for q in queries if q in qrels]
    pairs: list[tuple[Point, Point]] = []
    with api.open_engine(api.load_settings(args.data_dir)) as (engine, _):
        lexical, vectors = engine.retriever.lexical, engine.retriever.vectors

        def point(question: str, results: list[RetrievedChunk]) -> Point:
            chunks = {c.point_id: c for c in vectors.get([r.point_id for r in results])}
            ranked = [chunks[r.point_id] for r in results if r.point_id in chunks]
            verdict = judge(question, ranked, lexical.doc_freqs, 0.0)
            return verdict.score, max((r.scores.get("dense", 0.0) for r in results), default=0)

        for qid in judged:
            gold = {d for d, rel in qrels[qid].items() if rel > 0}
            found = engine.retrieve(QueryRequest(query=queries[qid], k=50, generate=False))
            removed = [r for r in found.results if doc_key(r.doc_id) not in gold]
            question = queries[qid]
            pairs.append(
                (point(question, found.results[: args.k]), point(question, removed[: args.k]))
            )
    print(f"{args.dataset.name} {args.split}: {len(judged)} questions, k={args.k}")
    print("| coverage floor | dense floor | answerable kept | gold-removed refused |")
    print("|---|---|---|---|")
    if fixed:
        kept, refused = rates(pairs, args.floor, args.dense)
        print(f"| {args.floor:.2f} | {args.dense:.2f} | {kept:.1%} | {refused:.1%} |")
        return
    grid = [
        (floor / 100, dense / 100, *rates(pairs, floor / 100, dense / 100))
        for floor in range(20, 71, 5)
        for dense in (*range(40, 81, 5), 101)
    ]
    good = sorted((g for g in grid if g[2] >= KEEP), key=lambda g: -g[3])
    for floor, dense, kept, refused in good[:10]:
        print(f"| {floor:.2f} | {dense:.2f} | {kept:.1%} | {refused:.1%} |")
    if good:
        floor, dense, kept, refused = good[0]
        print(f"chosen: coverage {floor:.2f}, dense {dense:.2f}: keeps {kept:.1%}, "
              f"refuses {refused:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
