"""Encode throughput and peak memory vs the embed mini-batch size (`sync.embed_batch_size`).

Indexes N SciFact abstracts through the real sync (so the texts are the real chunk texts,
header included), then, for every embedder and batch size, encodes all of them in a fresh
process (torch's and glibc's allocators keep memory, so a shared process would carry one
measurement into the next) and prints chunks/s and the peak RSS growth over the model.

    .venv/bin/python bench/encode_batch.py [--docs 300] [--embedders minilm-l6 minilm-l3]
        [--batch-sizes 64 32 16 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ingest import proc_status_mib, reset_peak_rss

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import load_embedder
from tests.harness.scifact import corpus, write_markdown


def chunk_texts(docs: int, folder: Path) -> list[str]:
    """What the embedder sees for every live chunk of `docs` abstracts (header + text)."""
    root = folder / "corpus"
    write_markdown(corpus(docs), root)
    settings = Settings(data_dir=folder / "data").with_paths([root])
    api.sync([root], settings=settings)
    with open_runtime(settings) as rt:
        return [
            embedding_text(c.context, c.text)
            for d in rt.vectors.live_doc_fingerprints()
            for c in rt.vectors.live_chunks(d)
        ]


def one(texts_file: Path, embedder: str, batch_size: int) -> dict[str, float]:
    """Run in a child: load the model, warm it up, then time and watch one full encode."""
    texts = json.loads(texts_file.read_text())
    model = load_embedder(embedder)
    model.encode_passages(texts[:batch_size], batch_size=batch_size)
    base = proc_status_mib("VmRSS")
    reset_peak_rss()
    t = time.perf_counter()
    model.encode_passages(texts, batch_size=batch_size)
    seconds = time.perf_counter() - t
    return {"per_s": len(texts) / seconds, "peak": proc_status_mib("VmHWM") - base}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--embedders", nargs="+", default=["minilm-l6", "minilm-l3"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 32, 16, 8])
    ap.add_argument("--one", nargs=3, metavar=("TEXTS", "EMBEDDER", "BATCH"), help="(child)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one[0]), args.one[1], int(args.one[2]))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        texts = chunk_texts(args.docs, Path(tmp))
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        print(f"{len(texts)} chunk texts of {args.docs} SciFact abstracts\n")
        print("| embedder | batch | chunks/s | peak RSS over the loaded model |\n|---|---|---|---|")
        for embedder in args.embedders:
            for bs in args.batch_sizes:
                child = [sys.executable, __file__, "--one", str(texts_file), embedder, str(bs)]
                out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                print(f"| {embedder} | {bs} | {row['per_s']:.1f} | +{row['peak']:.0f} MiB |")


if __name__ == "__main__":
    main()
