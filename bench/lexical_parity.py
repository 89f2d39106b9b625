"""Lexical backend parity on full SciFact: does tantivy rank like the exact-Okapi oracle?

Builds both `LexicalIndex` backends over the whole corpus (title + " " + text per doc),
runs every test query, and prints build time, p50 query latency, mean top-10 overlap and
nDCG@10 (pytrec_eval, against qrels/test.tsv) as a Markdown table.

    .venv/bin/python -m bench.lexical_parity [--data /work/shared/data/scifact]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pytrec_eval

from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import open_lexical_index
from ragstream.core.models import IndexedChunk

KINDS = ("tantivy", "rank-bm25")
K = 10


def load(data: Path) -> tuple[list[IndexedChunk], dict[str, str], dict[str, dict[str, int]]]:
    """BEIR SciFact: corpus as chunks (point_id = doc id), test queries, test qrels."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    with (data / "queries.jsonl").open() as fh:
        queries = {q["_id"]: q["text"] for q in map(json.loads, fh) if q["_id"] in qrels}
    docs = []
    with (data / "corpus.jsonl").open() as fh:
        for d in map(json.loads, fh):
            text = f"{d['title']} {d['text']}"
            docs.append(
                IndexedChunk(
                    point_id=d["_id"],
                    doc_id=f"scifact:{d['_id']}",
                    source="scifact",
                    path=f"{d['_id']}.txt",
                    file_type="txt",
                    ordinal=0,
                    content_hash=d["_id"],
                    text=text,
                    char_start=0,
                    char_end=len(text),
                )
            )
    return docs, queries, qrels


def run_backend(
    kind: str, root: Path, docs: list[IndexedChunk], queries: dict[str, str]
) -> tuple[float, float, dict[str, dict[str, float]]]:
    """Build seconds (incl. rank-bm25's lazy model), p50 query ms, and the top-K run."""
    index = open_lexical_index(kind, root / kind)
    start = time.perf_counter()
    index.upsert(docs)
    index.commit()
    index.search("warm", 1, SearchFilter())  # rank-bm25 builds its model on first search
    build = time.perf_counter() - start
    run: dict[str, dict[str, float]] = {}
    latencies = []
    for qid, text in queries.items():
        t0 = time.perf_counter()
        hits = index.search(text, K, SearchFilter())
        latencies.append((time.perf_counter() - t0) * 1000)
        run[qid] = {h.chunk.point_id: h.score for h in hits}
    index.close()
    return build, statistics.median(latencies), run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/scifact"))
    args = parser.parse_args()
    docs, queries, qrels = load(args.data)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{K}"})
    rows, runs, ndcg = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            build, p50, run = run_backend(kind, Path(tmp), docs, queries)
            per_query = evaluator.evaluate(run)
            ndcg[kind] = statistics.mean(
                per_query.get(q, {}).get(f"ndcg_cut_{K}", 0.0) for q in queries
            )
            runs[kind] = run
            rows.append(f"| {kind} | {build:.2f} | {p50:.2f} | {ndcg[kind]:.4f} |")
    overlap = statistics.mean(
        len(set(runs["tantivy"][q]) & set(runs["rank-bm25"][q]))
        / max(len(runs["tantivy"][q]), len(runs["rank-bm25"][q]), 1)
        for q in queries
    )
    print(f"SciFact: {len(docs)} docs, {len(queries)} test queries, top-{K}\n")
    print(f"| backend | build s | p50 query ms | nDCG@{K} |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nmean top-{K} overlap tantivy vs rank-bm25: {overlap:.3f}")
    print(f"nDCG@{K} difference (tantivy - rank-bm25): {ndcg['tantivy'] - ndcg['rank-bm25']:+.4f}")


if __name__ == "__main__":
    main()
