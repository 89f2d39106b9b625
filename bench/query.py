"""Query latency in the embedded default at ~10k and ~100k chunks (SciFact abstracts).

Stage 1 indexes N abstracts as Markdown files (~10k chunks). Stage 2 adds 9 copies of the
folder under other names: identical text, so the ingest reuses every vector (no encode)
and the index grows to ~100k live chunks. At each size it runs Q SciFact test queries
through the retriever alone (embed + dense + BM25 + RRF, N=100 per leg) and through the
full offline answer (+ gate, assemble, extractive generate, verify; no reranker installed),
with the generator/verifier sentence-vector memo off and on (side by side, same queries),
and prints p50/p95 per stage from the answers' own timings.

    .venv/bin/python bench/query.py [--docs 2200] [--queries 100] [--copies 9]
    .venv/bin/python bench/query.py --data-dir D [--queries 100]   # an existing index only

The `answerable` row is the answerability judge's added latency (coverage + the trained
judge reading the best sentences of the k = 8 chunks).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.core.settings import Settings
from ragstream.operators.embed import with_vector_memo
from ragstream.query.engine import QueryEngine
from ragstream.query.retrieve import Retriever
from tests.harness.scifact import SCIFACT, corpus, pct, write_markdown


def measure(settings: Settings, queries: list[str]) -> dict[str, tuple[float, float]]:
    """Per query: retrieve alone, then the full answer with the sentence-vector memo off and
    on (two engines over one retriever, same query in turn, so the rows are side by side)."""
    rows: dict[str, list[float]] = {}
    # the memo is per embedder for the whole process: start each stage cold, or stage 2 would
    # find stage 1's sentences (same queries, same text) already encoded
    with_vector_memo.cache_clear()
    no_memo = settings.model_copy(
        update={"query": settings.query.model_copy(update={"vector_memo": 0})}
    )
    with Retriever.open(settings) as retriever:
        engines = {
            "memo off": QueryEngine(no_memo, retriever),
            "": QueryEngine(settings, retriever),
        }
        for engine in engines.values():
            engine.answer(QueryRequest(query="warm-up"))
        for q in queries:
            t = time.perf_counter()
            retriever.retrieve(q, n=100)
            rows.setdefault("retrieve (wall)", []).append((time.perf_counter() - t) * 1000)
            for label, engine in engines.items():
                suffix = f", {label}" if label else ""
                t = time.perf_counter()
                answer = engine.answer(QueryRequest(query=q))
                wall = (time.perf_counter() - t) * 1000
                rows.setdefault(f"full answer (wall{suffix})", []).append(wall)
                for stage, ms in answer.timings_ms.items():
                    rows.setdefault(f"{stage}{suffix}", []).append(ms)
        live = retriever.vectors.count("live")
    print(f"\n### {live} live chunks, {len(queries)} queries\n")
    print("| stage | p50 ms | p95 ms |\n|---|---|---|")
    out = {}
    for stage, values in rows.items():
        out[stage] = (pct(values, 0.5), pct(values, 0.95))
        print(f"| {stage} | {out[stage][0]:.1f} | {out[stage][1]:.1f} |")
    return out


def stage(n: int, root: Path, settings: Settings, queries: list[str]) -> None:
    """Sync the folder (timed), then measure query latency at the resulting size."""
    t = time.perf_counter()
    report = api.sync([root], settings=settings)
    print(
        f"\nstage {n}: {report.chunks_live} chunks, {report.chunks_embedded} embedded, "
        f"{report.chunks_reused} reused, {time.perf_counter() - t:.0f} s"
    )
    measure(settings, queries)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2200)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--copies", type=int, default=9)
    ap.add_argument("--data-dir", type=Path, default=None, help="measure this index only")
    args = ap.parse_args()
    with (SCIFACT / "queries.jsonl").open() as fh:
        queries = [json.loads(line)["text"] for line in fh][: args.queries]
    if args.data_dir is not None:
        measure(api.load_settings(args.data_dir), queries)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        write_markdown(corpus(args.docs), root / "copy_0")
        settings = Settings(data_dir=Path(tmp) / "data").with_paths([root])
        stage(1, root, settings, queries)
        for i in range(1, args.copies + 1):
            shutil.copytree(root / "copy_0", root / f"copy_{i}")
        stage(2, root, settings, queries)
        print("\nmedian over stages is not additive: 'retrieve.*' rows are inside 'full answer'")


if __name__ == "__main__":
    main()
