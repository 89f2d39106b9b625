"""Ingest throughput vs raw encode throughput, measured side by side in one run.

Writes N SciFact abstracts as Markdown files, runs the real sync flow into a fresh data
dir (bytewax + docling + chunker + MiniLM + Qdrant Edge + tantivy), then encodes the very
same chunk texts with the bare SentenceTransformer, and prints chunks/s of both and the
ratio (target >= 0.85).

    .venv/bin/python bench/ingest.py [--docs 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _scifact import corpus, write_markdown

from core.settings import Settings
from flows.runtime import open_runtime
from operators.embed import load_embedder
from ragstream import api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scifact"
        write_markdown(corpus(args.docs), folder)
        settings = Settings(data_dir=Path(tmp) / "data").with_paths([folder])
        embedder = load_embedder(settings.embedder)  # loaded once, outside both timings
        t0 = time.perf_counter()
        report = api.sync([folder], settings=settings)
        ingest_s = time.perf_counter() - t0
        with open_runtime(settings) as rt:
            texts = [
                c.text
                for d in rt.vectors.live_doc_fingerprints()
                for c in rt.vectors.live_chunks(d)
            ]
        t0 = time.perf_counter()
        embedder.encode_passages(texts, batch_size=settings.embed_batch_size)
        encode_s = time.perf_counter() - t0
    n = report.chunks_embedded
    print(
        f"docs={report.docs_seen} chunks={len(texts)} embedded={n} "
        f"dead_letters={len(report.dead_letters)}"
    )
    print("| path | seconds | chunks/s |\n|---|---|---|")
    print(f"| ragstream sync (parse+chunk+embed+write) | {ingest_s:.1f} | {n / ingest_s:.1f} |")
    print(f"| SentenceTransformer.encode only | {encode_s:.1f} | {len(texts) / encode_s:.1f} |")
    print(f"ratio ingest/encode throughput: {(n / ingest_s) / (len(texts) / encode_s):.3f}")


if __name__ == "__main__":
    main()
