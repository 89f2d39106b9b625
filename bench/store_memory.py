"""Resident memory per stored chunk of each store alone: Qdrant Edge, then tantivy.

The per-chunk part of an ingest's memory (docs/scale.md "Memory"), without the model,
docling or encode activations: SciFact sentences as chunks (real payload sizes: doc id, path,
title, text, ...), random unit 384-d vectors (what MiniLM-L6/L3 store; their values do not
change the storage), written in batches of 1,100 points (one flow batch of 256 abstracts)
the way the writer does (Edge: upsert + flush; tantivy: upsert + commit). Prints RSS beyond
the opened store every 11k points, split into anonymous memory and mapped files (the Edge
shard's mmap'd vector and payload chunks, WAL segments), and after `close()`.

`--edge-cold` opens the Edge shard with vectors, payload and id tracker as `Memory.Cold`
(mmap without populate) instead of the defaults, to check whether placement matters while
a shard is being written (it does not: pages written are resident either way).

    .venv/bin/python bench/store_memory.py --store edge [--points 110000] [--edge-cold]
    .venv/bin/python bench/store_memory.py --store tantivy [--points 110000]

One store per run: a second store measured in the same process would reuse the heap the
first one freed and look smaller than it is.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np
from ingest import proc_status_mib

from ragstream.connectors import qdrant_edge
from ragstream.connectors.lexical import TantivyIndex
from ragstream.core.ids import content_hash, point_id
from ragstream.core.models import EmbedderVersion, IndexedChunk
from tests.harness.scifact import SCIFACT

BATCH = 1100
FIELDS = ("VmRSS", "RssAnon", "RssFile")


def sentences() -> list[tuple[str, str, str]]:
    """(doc id, title, sentence) over the SciFact corpus."""
    out = []
    with (SCIFACT / "corpus.jsonl").open() as fh:
        for line in fh:
            d = json.loads(line)
            out += [(d["_id"], d["title"], s) for s in re.split(r"(?<=\.)\s+", d["text"]) if s]
    return out


def chunks(source: list[tuple[str, str, str]], start: int, n: int) -> list[IndexedChunk]:
    """Points start..start+n; past the corpus, further copies under other paths."""
    out = []
    for i in range(start, start + n):
        did, title, text = source[i % len(source)]
        copy = i // len(source)
        doc = f"scifact:copy_{copy}/{did}.md"
        chash = content_hash(f"{copy} {text}", "bench")
        out.append(
            IndexedChunk(
                point_id=point_id(doc, chash, i),
                doc_id=doc,
                source="scifact",
                path=f"/data/scifact/copy_{copy}/{did}.md",
                file_type="md",
                title=title,
                ordinal=i % 8,
                content_hash=chash,
                text=text,
                section_path=(title,),
                char_start=0,
                char_end=len(text),
                file_size=1500,
                file_mtime_ns=1_700_000_000_000_000_000,
            )
        )
    return out


def measure(name: str, points: int, tmp: Path, cold: bool) -> None:
    source = sentences()
    rng = np.random.default_rng(0)
    if name == "edge":
        if cold:
            import qdrant_edge as engine

            cold_mem = engine.Memory.Cold
            qdrant_edge.EdgeVectorParams = functools.partial(  # type: ignore[misc]
                engine.EdgeVectorParams, memory=cold_mem
            )
            qdrant_edge.EdgeConfig = functools.partial(  # type: ignore[misc]
                engine.EdgeConfig, payload_memory=cold_mem, id_tracker_memory=cold_mem
            )
        embedder = EmbedderVersion(name="bench", fingerprint="0", dimension=384)
        store: qdrant_edge.EdgeVectorStore | TantivyIndex = qdrant_edge.EdgeVectorStore.open(
            tmp, "bench", embedder
        )
    else:
        store = TantivyIndex(tmp / "lexical")
    base = {f: proc_status_mib(f) for f in FIELDS}
    print(f"\n### {name}{' (Memory.Cold)' if cold else ''}: RSS beyond the opened store\n")
    print("| points | RSS | anon | file | RSS per point |\n|---|---|---|---|---|")
    t0 = time.perf_counter()
    for start in range(0, points, BATCH):
        part = chunks(source, start, BATCH)
        if isinstance(store, TantivyIndex):
            store.upsert(part)
            store.commit()
        else:
            vectors = rng.standard_normal((BATCH, 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.upsert(part, vectors.tolist())
            store.flush()
        done = start + BATCH
        if (done // BATCH) % 10 == 0 or done >= points:
            now = {f: proc_status_mib(f) - base[f] for f in FIELDS}
            print(
                f"| {done} | {now['VmRSS']:.0f} MiB | {now['RssAnon']:.0f} | "
                f"{now['RssFile']:.0f} | {now['VmRSS'] * 1024 / done:.2f} KiB |",
                flush=True,
            )
    store.close()
    after = {f: proc_status_mib(f) - base[f] for f in FIELDS}
    print(
        f"after close(): RSS {after['VmRSS']:.0f} MiB (anon {after['RssAnon']:.0f}, "
        f"file {after['RssFile']:.0f}); {time.perf_counter() - t0:.0f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=110_000)
    ap.add_argument("--store", choices=("edge", "tantivy"), default="edge")
    ap.add_argument("--edge-cold", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure(args.store, args.points, Path(tmp), args.edge_cold)


if __name__ == "__main__":
    main()
