"""Fusion settings swept offline on SciFact, chosen on train, reported on test.

Each leg is searched once per query through the real retriever (depth 500 chunks per leg)
and its ranked (point, score) list is cached in `<data-dir>/eval/legs-<split>.json`. Every
variant is then the library's own `query.fuse.rrf` / `dbsf` over those lists (cut to the
variant's candidate depth), collapsed to documents and scored exactly as `ragstream eval`
does (`aggregate`, `score_run`) — so the `rrf k=10 / depth 500` and `dbsf / depth 500` rows
must equal the harness's `hybrid-rrf` / `hybrid-dbsf` rows on the same index. The winner is
picked on train only; its test row is the number to report.

    .venv/bin/python bench/fusion_sweep.py --data-dir D [--splits train test]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream.eval.beir import index_corpus, load_beir
from ragstream.eval.evaluation import DEFAULT_DEPTH, aggregate, score_run
from ragstream.query.fuse import dbsf, rrf
from ragstream.query.retrieve import Retriever
from tests.harness.scifact import SCIFACT

Leg = list[tuple[str, str, float]]  # (point id, doc id, leg score), best first
Legs = dict[str, dict[str, Leg]]  # query id -> leg -> ranked list
Variant = tuple[str, int, float, int]  # method, RRF k, lexical weight, candidate depth


def collect(data_dir: Path, split: str, depth: int) -> Legs:
    """Both legs' ranked lists for every judged query of `split` (cached per split)."""
    cache = data_dir / "eval" / f"legs-{split}-{depth}.json"
    if cache.exists():
        cached: Legs = json.loads(cache.read_text())
        return cached
    corpus, queries, qrels = load_beir(SCIFACT, split)
    settings = index_corpus(corpus, data_dir)
    out: Legs = {}
    with Retriever.open(settings) as retriever:
        for qid in (q for q in queries if q in qrels):
            result = retriever.retrieve(queries[qid], n=depth)
            legs: dict[str, Leg] = {}
            for leg in ("dense", "lexical"):
                mine = sorted(
                    (c for c in result.candidates if leg in c.ranks), key=lambda c: c.ranks[leg]
                )
                legs[leg] = [(c.chunk.point_id, c.chunk.doc_id, c.scores[leg]) for c in mine]
            out[qid] = legs
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out))
    return out


def fused_docs(
    legs: dict[str, Leg], method: str, k: int, w_lex: float, depth: int
) -> list[tuple[str, float]]:
    docs = {pid: doc for leg in legs.values() for pid, doc, _ in leg}
    cut = {leg: [(pid, s) for pid, _, s in ranked[:depth]] for leg, ranked in legs.items()}
    weights = {"lexical": w_lex}
    fused = rrf(cut, k, weights) if method == "rrf" else dbsf(cut, weights)
    return aggregate((docs[f.point_id], f.score) for f in fused)


def sweep(legs: Legs, split: str, variants: Iterable[Variant]) -> dict[Variant, float]:
    _, _, qrels = load_beir(SCIFACT, split)
    scores = {}
    for variant in variants:
        run = {qid: fused_docs(per_q, *variant) for qid, per_q in legs.items()}
        scores[variant] = score_run("x", run, qrels, [0.0]).ndcg_10
    return scores


def variants() -> list[Variant]:
    rrfs = product(["rrf"], [5, 10, 20, 60], [0.8, 1.0, 1.25], [50, 100, 200, 500])
    dbsfs = product(["dbsf"], [0], [0.8, 1.0, 1.25], [50, 100, 200, 500])
    return [*rrfs, *dbsfs]


def name(v: Sequence[object]) -> str:
    method, k, w, depth = v
    return f"{method}" + (f" k={k}" if method == "rrf" else "") + f" w_lex={w} depth={depth}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--depth", type=int, default=DEFAULT_DEPTH)
    args = ap.parse_args()
    vs = variants()
    train = sweep(collect(args.data_dir, "train", args.depth), "train", vs)
    test = sweep(collect(args.data_dir, "test", args.depth), "test", vs)
    print("| variant | train nDCG@10 | test nDCG@10 |\n|---|---|---|")
    for v in sorted(vs, key=lambda v: -train[v]):
        print(f"| {name(v)} | {train[v]:.4f} | {test[v]:.4f} |")
    best = max(vs, key=lambda v: train[v])
    print(f"\nchosen on train: {name(best)} -> test {test[best]:.4f}")
    for ref in [("rrf", 10, 1.0, args.depth), ("dbsf", 0, 1.0, args.depth)]:
        print(f"reference {name(ref)}: train {train[ref]:.4f} test {test[ref]:.4f}")


if __name__ == "__main__":
    main()
