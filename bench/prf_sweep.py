"""Dense pseudo-relevance feedback (Rocchio) on SciFact, chosen on train, reported on test.

q' = normalize(q + alpha * mean(vectors of the top-k feedback chunks)), searched again over
every live chunk vector of the index (exhaustively, in numpy), then fused with the cached
lexical leg by the library's `rrf` / `dbsf` and scored as `ragstream eval` does. Feedback
comes from the dense leg's own top-k or from the fused (DBSF) top-k. The no-feedback rows
are the same exhaustive search, so they must equal `bench/fusion_sweep.py`'s references.

    .venv/bin/python bench/prf_sweep.py --data-dir D   (D: an index `ragstream eval` built)
"""

from __future__ import annotations

import argparse
import sys
from itertools import product
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fusion_sweep import collect

from ragstream.core.settings import Settings
from ragstream.eval.beir import load_beir
from ragstream.eval.evaluation import DEFAULT_DEPTH, aggregate, score_run
from ragstream.flows.runtime import open_runtime
from ragstream.operators.embed import load_embedder
from ragstream.query.fuse import dbsf, rrf
from tests.harness.scifact import SCIFACT

Ranked = list[tuple[str, float]]


class Index:
    """Every live chunk's point id, doc id and vector, in one matrix."""

    def __init__(self, data_dir: Path) -> None:
        settings = Settings(data_dir=data_dir).with_paths([data_dir / "corpus"])
        with open_runtime(settings) as rt:
            chunks = [c for page in rt.vectors.live_pages() for c in page]
            vectors = rt.vectors.vectors_for_hashes({c.content_hash for c in chunks})
        self.ids = [c.point_id for c in chunks]
        self.doc = {c.point_id: c.doc_id for c in chunks}
        self.row = {pid: i for i, pid in enumerate(self.ids)}
        self.matrix = np.array([vectors[c.content_hash] for c in chunks], dtype=np.float32)
        self.embedder = load_embedder(settings.embedder)

    def search(self, queries: np.ndarray, depth: int) -> list[Ranked]:
        scores = queries @ self.matrix.T
        top = np.argpartition(-scores, depth, axis=1)[:, :depth]
        out = []
        for i, row in enumerate(top):
            ordered = row[np.argsort(-scores[i, row])]
            out.append([(self.ids[j], float(scores[i, j])) for j in ordered])
        return out


def score(
    index: Index,
    lexical: list[Ranked],
    dense: list[Ranked],
    qids: list[str],
    qrels: dict[str, dict[str, int]],
    method: str,
) -> float:
    """nDCG@10 of the fused legs, chunks collapsed to documents as the harness does."""
    run = {}
    for q, lex, den in zip(qids, lexical, dense, strict=True):
        legs = {"dense": den, "lexical": lex}
        fused = rrf(legs, 10, {}) if method == "rrf" else dbsf(legs, {})
        run[q] = aggregate((index.doc[f.point_id], f.score) for f in fused)
    return score_run("x", run, qrels, [0.0]).ndcg_10


def sweep(index: Index, data_dir: Path, split: str, depth: int) -> dict[str, float]:
    legs = collect(data_dir, split, depth)
    _, queries, qrels = load_beir(SCIFACT, split)
    qids = list(legs)
    for q in qids:
        index.doc.update({pid: doc for pid, doc, _ in legs[q]["lexical"]})
    lexical = [[(pid, s) for pid, _, s in legs[q]["lexical"]] for q in qids]
    vectors = np.array([index.embedder.encode_query(queries[q]) for q in qids], np.float32)
    base = index.search(vectors, depth)
    fused_top = [
        [f.point_id for f in dbsf({"dense": d, "lexical": lx}, {})[:10]]
        for d, lx in zip(base, lexical, strict=True)
    ]
    out = {f"none {m}": score(index, lexical, base, qids, qrels, m) for m in ("rrf", "dbsf")}
    for source, k, alpha in product(["dense", "fused"], [3, 5], [0.25, 0.5]):
        feedback = [
            [pid for pid, _ in d[:k]] if source == "dense" else f[:k]
            for d, f in zip(base, fused_top, strict=True)
        ]
        centroid = np.stack([index.matrix[[index.row[p] for p in fb]].mean(0) for fb in feedback])
        moved = vectors + alpha * centroid
        moved /= np.linalg.norm(moved, axis=1, keepdims=True)
        dense = index.search(moved, depth)
        for m in ("rrf", "dbsf"):
            out[f"{source} k={k} a={alpha} {m}"] = score(index, lexical, dense, qids, qrels, m)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--depth", type=int, default=DEFAULT_DEPTH)
    args = ap.parse_args()
    index = Index(args.data_dir)
    train = sweep(index, args.data_dir, "train", args.depth)
    test = sweep(index, args.data_dir, "test", args.depth)
    print("| feedback (source, k, alpha, fusion) | train nDCG@10 | test nDCG@10 |\n|---|---|---|")
    for name in sorted(train, key=lambda n: -train[n]):
        print(f"| {name} | {train[name]:.4f} | {test[name]:.4f} |")
    best = max(train, key=lambda n: train[n])
    print(f"\nchosen on train: {best} -> test {test[best]:.4f}")


if __name__ == "__main__":
    main()
