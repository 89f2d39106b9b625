"""Encode throughput and peak memory vs the embed mini-batch size (`sync.embed_batch_size`).

Indexes N SciFact abstracts through the real sync (so the texts are the real chunk texts,
header included), then, for every embedder, runtime and batch size, encodes all of them in a
fresh process (torch's and glibc's allocators keep memory, so a shared process would carry
one measurement into the next) and prints the seconds to the first vector (imports and the
model's open), chunks/s and the peak RSS growth over the model.

A runtime is `default` (what the embedder opens here), `torch` (MiniLM-L6 with no ONNX export
found) or `onnx` (MiniLM-L6's export, `python -m ragstream.operators.onnx_export`).

    .venv/bin/python bench/encode_batch.py [--docs 300] [--embedders minilm-l6 minilm-l3]
        [--batch-sizes 64 32 16 8] [--runtimes default]
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
from ragstream.operators import embed
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import load_embedder
from ragstream.operators.onnx_export import export_path, preset_root
from tests.harness.scifact import corpus, write_markdown

RUNTIMES = ("default", "torch", "onnx")


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


def one(texts_file: Path, embedder: str, batch_size: int, runtime: str) -> dict[str, float]:
    """Run in a child: load the model, warm it up, then time and watch one full encode."""
    texts = json.loads(texts_file.read_text())
    if runtime == "torch":  # as where no export was made
        embed.onnx_export_path = lambda fingerprint: Path("/nonexistent/export.onnx")
    elif runtime == "onnx" and not export_path(preset_root(embedder)).is_file():
        raise SystemExit(f"no ONNX export of {embedder}: python -m ragstream.operators.onnx_export")
    t = time.perf_counter()
    model = load_embedder(embedder)
    model.encode_passages(texts[:batch_size], batch_size=batch_size)
    first = time.perf_counter() - t
    base = proc_status_mib("VmRSS")
    reset_peak_rss()
    t = time.perf_counter()
    model.encode_passages(texts, batch_size=batch_size)
    seconds = time.perf_counter() - t
    return {"first": first, "per_s": len(texts) / seconds, "peak": proc_status_mib("VmHWM") - base}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--embedders", nargs="+", default=["minilm-l6", "minilm-l3"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 32, 16, 8])
    ap.add_argument("--runtimes", nargs="+", default=["default"], choices=RUNTIMES)
    ap.add_argument("--one", nargs=4, metavar=("TEXTS", "EMBEDDER", "BATCH", "RUNTIME"))
    args = ap.parse_args()
    if args.one:
        texts, embedder, batch, runtime = args.one
        print(json.dumps(one(Path(texts), embedder, int(batch), runtime)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        texts = chunk_texts(args.docs, Path(tmp))
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        print(f"{len(texts)} chunk texts of {args.docs} SciFact abstracts\n")
        print("| embedder | runtime | batch | first vector | chunks/s | peak RSS over the model |")
        print("|---|---|---|---|---|---|")
        runs = [(e, r) for e in args.embedders for r in args.runtimes]
        for embedder, runtime in runs:
            for bs in args.batch_sizes:
                child = [sys.executable, __file__, "--one", str(texts_file), embedder, str(bs)]
                out = subprocess.run([*child, runtime], check=True, capture_output=True, text=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                cells = [embedder, runtime, bs, f"{row['first']:.2f} s", f"{row['per_s']:.1f}"]
                print("| " + " | ".join(map(str, cells)) + f" | +{row['peak']:.0f} MiB |")


if __name__ == "__main__":
    main()
