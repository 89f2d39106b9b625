"""Blue/green backfill throughput vs raw encode of the new model, and query p95 during it.

Indexes N SciFact abstracts with the old embedder (cached under bench/out/, so reruns skip
it), then in one run:
  1. idle: Q queries through the real engine (retrieve → … → verify), latency p50/p95;
  2. raw: the new model encodes the very chunk texts the backfill will encode (before and
     after step 3, averaged, so load drift on a shared machine hits both sides alike);
  3. backfill: `reindex start` + a full backfill pass (no queries), chunks/s and the ratio
     to (2) (target ≥ 0.85); then `reindex abort` drops the new side again;
  4. during: the same backfill again while a thread runs the queries non-stop, p50/p95.

    .venv/bin/python bench/reindex.py [--docs 1000] [--old static] [--new minilm-l6]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.core.settings import Settings
from ragstream.operators.embed import load_embedder
from ragstream.query.engine import QueryEngine
from ragstream.service.served import open_engine
from tests.harness.scifact import corpus, pct, write_markdown

OUT = Path(__file__).resolve().parent / "out"


def timed_queries(
    engine: QueryEngine, questions: list[str], stop: threading.Event | None
) -> list[float]:
    """Latency (ms) of each query; loops over `questions` until `stop` is set, if given."""
    ms: list[float] = []
    i = 0
    while True:
        if stop is None and i >= len(questions):
            return ms
        if stop is not None and stop.is_set():
            return ms
        t = time.perf_counter()
        engine.answer(QueryRequest(query=questions[i % len(questions)]))
        ms.append((time.perf_counter() - t) * 1000)
        i += 1


def p50_p95(ms: list[float]) -> str:
    return f"p50 {pct(ms, 0.5):.1f} ms, p95 {pct(ms, 0.95):.1f} ms (n={len(ms)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--old", default="static")
    ap.add_argument("--new", default="minilm-l6")
    args = ap.parse_args()
    docs = corpus(args.docs)
    folder = OUT / f"reindex-docs-{args.docs}"
    if not folder.exists():
        write_markdown(docs, folder)
    settings = Settings(
        data_dir=OUT / f"reindex-data-{args.docs}-{args.old}", embedder=args.old
    ).with_paths([folder])
    report = api.sync([folder], settings=settings)
    print(f"index: {report.chunks_live} live chunks from {args.docs} abstracts ({args.old})")
    questions = [d["title"] for d in docs[: args.queries]]
    new_model = load_embedder(args.new)
    with open_engine(settings) as (engine, maintainer):
        if maintainer.sides.record is not None:  # a previous run was interrupted
            maintainer.abort()
        texts = [c.text for p in maintainer.sides.live.vectors.live_pages() for c in p]
        timed_queries(engine, questions[:3], None)  # warm-up
        idle = timed_queries(engine, questions, None)
        unique = list(dict.fromkeys(texts))

        def raw_encode() -> float:
            t = time.perf_counter()
            new_model.encode_passages(unique, batch_size=settings.sync.embed_batch_size)
            return time.perf_counter() - t

        before = raw_encode()  # raw encode before and after the backfill, averaged: on a
        t = time.perf_counter()  # shared machine the load drifts during a run
        status = maintainer.start(args.new, wait=True)
        backfill_s = time.perf_counter() - t
        raw_s = (before + raw_encode()) / 2
        assert status.record is not None and status.lag == 0
        embedded = status.record.progress.pass_embedded
        maintainer.abort()
        stop = threading.Event()
        during: list[float] = []
        runner = threading.Thread(
            target=lambda: during.extend(timed_queries(engine, questions, stop))
        )
        runner.start()
        try:
            maintainer.start(args.new, wait=True)
        finally:
            stop.set()
            runner.join()
        maintainer.abort()
    raw_rate, backfill_rate = embedded / raw_s, embedded / backfill_s
    print(f"raw encode ({args.new}): {embedded} texts in {raw_s:.1f} s = {raw_rate:.1f}/s")
    print(
        f"backfill: {len(texts)} chunks ({embedded} encoded) in {backfill_s:.1f} s "
        f"= {backfill_rate:.1f}/s"
    )
    print(f"backfill / raw encode throughput: {backfill_rate / raw_rate:.3f} (target >= 0.85)")
    print(f"queries idle:            {p50_p95(idle)}")
    print(f"queries during backfill: {p50_p95(during)}")


if __name__ == "__main__":
    main()
