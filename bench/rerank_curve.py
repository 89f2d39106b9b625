"""The reranker's quality/latency curve: SciFact test nDCG@10 and the rerank
stage's p50/p95 when the reranker re-scores the top D fused chunks, D = 10, 20, 50, 100.

Each test query is retrieved once (hybrid RRF, 500 per leg, as `ragstream eval`); every
depth then reranks the head of the same candidates (the rest keep fused order), so the rows
differ only in D. The index must hold the corpus
(`ragstream eval ../shared/data/scifact --data-dir D` builds it); the reranker is a model
directory `ragstream tune` wrote. Latency is the rerank stage alone, on this machine's cores.

    .venv/bin/python bench/rerank_curve.py --data-dir D --reranker D/models/reranker-...
        [--depths 10,20,50,100] [--limit-queries N] [--split test] [--json]

`--json`: stdout is one JSON object (`queries`, `reranker`, `rows`: `name`, `ndcg@10`,
`p50_ms`, `p95_ms` per row) and nothing else; anything else goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._stdout import print_json, stdout_to_stderr
from ragstream.core.settings import Settings
from ragstream.eval.answer_eval import latency
from ragstream.eval.beir import load_beir
from ragstream.eval.evaluation import (
    DEFAULT_DEPTH,
    aggregate,
    fused_config,
    ranked_chunks,
    score_run,
)
from ragstream.query.rerank import load_reranker, rerank
from ragstream.query.retrieve import Retriever
from tests.harness.scifact import SCIFACT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--reranker", required=True)
    ap.add_argument("--dataset", type=Path, default=SCIFACT)
    ap.add_argument("--split", default="test")
    ap.add_argument("--depths", default="10,20,50,100")
    ap.add_argument("--limit-queries", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="stdout: one JSON object")
    args = ap.parse_args()
    with stdout_to_stderr(args.json):  # --json: nothing but the document on stdout
        qids, name, rows = measure(args)
    if args.json:
        print_json({"queries": len(qids), "reranker": name, "rows": rows})
        return
    print(f"{len(qids)} {args.split} queries; reranker {name}")
    print("latency: the whole retrieve for hybrid-rrf, the rerank stage alone for +rerank@D")
    print("| rows | nDCG@10 | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['ndcg@10']:.4f} | {r['p50_ms']} | {r['p95_ms']} |")


def measure(args: argparse.Namespace) -> tuple[list[str], str, list[dict[str, object]]]:
    """The judged query ids, the reranker's name and one row per configuration."""
    _, queries, qrels = load_beir(args.dataset, args.split)
    qids = [q for q in queries if q in qrels][: args.limit_queries]
    depths = [int(d) for d in args.depths.split(",")]
    reranker = load_reranker(args.reranker)
    assert reranker is not None
    settings = Settings(data_dir=args.data_dir).with_paths([args.data_dir / "corpus"])
    plain = fused_config("rrf")
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {"hybrid-rrf": {}}
    runs |= {f"+rerank@{d}": {} for d in depths}
    ms: dict[str, list[float]] = {name: [] for name in runs}
    with Retriever.open(settings) as retriever:
        retriever.retrieve("warm-up", n=DEFAULT_DEPTH)
        reranker.score("warm-up", ["a passage"])
        for qid in qids:
            result = retriever.retrieve(queries[qid], n=DEFAULT_DEPTH)
            runs["hybrid-rrf"][qid] = aggregate(ranked_chunks(plain, result))
            ms["hybrid-rrf"].append(result.timings_ms["total"])
            for d in depths:
                t0 = time.perf_counter()
                top = rerank(queries[qid], result.candidates[:d], reranker, d)
                ms[f"+rerank@{d}"].append((time.perf_counter() - t0) * 1000.0)
                head = [r.candidate.model_copy(update={"score": r.score}) for r in top]
                order = ranked_chunks(plain, result, head + result.candidates[d:])
                runs[f"+rerank@{d}"][qid] = aggregate(order)
    rows: list[dict[str, object]] = []
    for name, run in runs.items():
        row = score_run(name, run, qrels, ms[name])
        p50, p95 = latency(ms[name])
        rows.append({"name": name, "ndcg@10": round(row.ndcg_10, 4), "p50_ms": round(p50, 1),
                     "p95_ms": round(p95, 1)})  # fmt: skip
    return qids, reranker.name, rows


if __name__ == "__main__":
    main()
