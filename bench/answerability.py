"""Calibrate the answerability floor on a BEIR split (train only: the floor is a choice).

For each judged question of the split, the evidence-coverage judge (`query/answerable.py`)
scores the top-k chunks twice: as retrieved (the gold documents are in the index), and with
the question's gold documents taken out of the fused candidates before the cut to k (what
`eval --mode abstain` does by re-indexing without them; same ranking here, far faster).
Prints, per candidate floor, the share of answerable questions kept and of gold-removed ones
refused, and the floor that refuses the most gold-removed questions while keeping ≥ 90 %.

    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split train
(D: a data dir the dataset is indexed into, e.g. by `ragstream eval DATASET --data-dir D`.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.eval.beir import beir_doc_id, load_beir
from ragstream.query.answerable import judge

KEEP = 0.90  # answerable questions that must stay answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    if args.split == "test":
        sys.exit("choose the floor on a train split; the test split is for reporting")
    _, queries, qrels = load_beir(args.dataset, args.split)
    judged = [q for q in queries if q in qrels][: args.limit]
    settings = api.load_settings(args.data_dir)
    signals: dict[str, list[tuple[float, float]]] = {}
    with api.open_engine(settings) as (engine, _):
        lexical = engine.retriever.lexical
        for qid in judged:
            gold = {beir_doc_id(settings, d) for d, rel in qrels[qid].items() if rel > 0}
            found = engine.retrieve(QueryRequest(query=queries[qid], k=50, generate=False))
            ids = [r.point_id for r in found.results]
            chunks = {c.point_id: c for c in engine.retriever.vectors.get(ids)}
            ranked = [chunks[i] for i in ids if i in chunks]
            present = judge(queries[qid], ranked[: args.k], lexical.doc_freqs, 0.0)
            removed = [c for c in ranked if c.doc_id not in gold][: args.k]
            absent = judge(queries[qid], removed, lexical.doc_freqs, 0.0)
            for name in present.signals:
                pair = (present.signals[name], absent.signals[name])
                signals.setdefault(name, []).append(pair)
    print(f"{args.dataset.name} {args.split}: {len(judged)} questions, k={args.k}")
    for name in ("coverage_best", "coverage_union"):
        pairs = signals[name]
        print(f"\n{name}: median answerable {statistics.median(p for p, _ in pairs):.3f}, "
              f"gold removed {statistics.median(a for _, a in pairs):.3f}")  # fmt: skip
        print("| floor | answerable kept | gold-removed refused |\n|---|---|---|")
        best = None
        for step in range(0, 101, 5):
            floor = step / 100
            kept = sum(p >= floor for p, _ in pairs) / len(pairs)
            refused = sum(a < floor for _, a in pairs) / len(pairs)
            print(f"| {floor:.2f} | {kept:.1%} | {refused:.1%} |")
            if kept >= KEEP:
                best = (floor, kept, refused)
        if best:
            print(f"chosen (keeps ≥ {KEEP:.0%}): floor {best[0]:.2f} "
                  f"keeps {best[1]:.1%}, refuses {best[2]:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
