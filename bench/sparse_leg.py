"""BM25 as Qdrant sparse vectors (`store.lexical_backend = "sparse"`) against the tantivy leg.

    quality   SciFact test nDCG@10 / recall@100 of both lexical legs alone and fused with the
              same dense leg (RRF, DBSF), on the same index: the tantivy data dir (`--from`,
              built by bench/eval_scifact.py or `ragstream eval`) is copied point for point
              (same ids, payloads and dense vectors, plus each point's sparse BM25 vector)
              into `--to`, a data dir with `store.lexical_backend = "sparse"`; then the real eval
              harness runs on both. Nothing is re-embedded.
    latency   BM25 query p50/p95 of each leg at `--chunks` (10k, 100k) on Qdrant Edge, and
              the write cost: seconds to write the chunks with and without sparse vectors.

    .venv/bin/python bench/sparse_leg.py quality --from /work/sf-data --to /work/sf-sparse
    .venv/bin/python bench/sparse_leg.py latency [--chunks 10000 100000] [--json]

Prints Markdown tables (quality) and one JSON line per size (latency); `latency --json`
prints instead one JSON object at the end (`rows`, the same rows), the only thing on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np

from bench._stdout import print_json, stdout_to_stderr
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import (
    configured_live,
    open_configured,
    open_lexical_index,
    open_vector_store,
)
from ragstream.core.ids import content_hash, point_id
from ragstream.core.models import EmbedderVersion, IndexedChunk
from ragstream.core.settings import Settings
from ragstream.eval.datasets import evaluate_dataset
from ragstream.eval.evaluation import markdown_table
from tests.harness.scifact import SCIFACT

ALL = SearchFilter()


def copy_sparse(src: Path, dst: Path) -> int:
    """The live collection of `src` (tantivy data dir) into a sparse-leg data dir `dst`."""
    s = Settings(data_dir=src)
    live = configured_live(s)
    if live is None:
        raise SystemExit(f"no index in {src}")
    t = Settings(data_dir=dst, store={"lexical_backend": "sparse"})
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src / "corpus", dst / "corpus")  # copy2: same mtimes, so nothing re-reads
    shutil.copytree(src / "state", dst / "state", ignore=shutil.ignore_patterns("*.lock"))
    vectors = open_configured(s, live[1])
    lexical = open_lexical_index("tantivy", s.lexical_dir)
    out = open_configured(t, live[1])
    copied = 0
    for page in vectors.live_pages():
        with_context = {c.point_id: c for c in lexical.get([c.point_id for c in page])}
        chunks = [with_context.get(c.point_id, c) for c in page]
        held = vectors.vectors_for_hashes({c.content_hash for c in chunks})
        out.upsert(chunks, [held[c.content_hash] for c in chunks])
        copied += len(chunks)
    for store in (out, vectors, lexical):
        store.close()
    return copied


def quality(src: Path, dst: Path) -> None:
    t0 = time.perf_counter()
    copied = copy_sparse(src, dst)
    print(f"copied {copied} points into {dst} in {time.perf_counter() - t0:.0f} s\n")
    for name, data, overrides in (
        ("tantivy", src, {}),
        ("sparse", dst, {"store": {"lexical_backend": "sparse"}}),
    ):
        report = evaluate_dataset(SCIFACT, data, "test", settings_overrides=overrides)
        print(f"### lexical leg: {name}\n")
        print(markdown_table(report.rows))
        print()


def _chunks(n: int, rng: random.Random) -> list[IndexedChunk]:
    words = [f"w{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(len(words))]  # Zipf-like term frequencies
    out = []
    for i in range(n):
        text = " ".join(rng.choices(words, weights, k=rng.randint(40, 160)))
        did, h = f"docs:d{i // 20}.md", content_hash(text, "bench")
        out.append(
            IndexedChunk(
                point_id=point_id(did, h, 0), doc_id=did, source="docs", path="/x",
                file_type="md", ordinal=i % 20, content_hash=h, text=text, char_start=0,
                char_end=len(text),
            )
        )  # fmt: skip
    return out


def latency(sizes: list[int], queries: int = 200, lines: bool = True) -> list[dict[str, object]]:
    """One row per size, each printed as a JSON line when measured if `lines`."""
    rows: list[dict[str, object]] = []
    emb = EmbedderVersion(name="bench/random-384", fingerprint="0" * 16, dimension=384)
    rng = random.Random(3)
    np_rng = np.random.default_rng(3)
    for n in sizes:
        chunks = _chunks(n, rng)
        m = np_rng.standard_normal((n, emb.dimension)).astype(np.float32)
        vecs = (m / np.linalg.norm(m, axis=1, keepdims=True)).tolist()
        asked = [" ".join(rng.choices([f"w{i}" for i in range(2000)], k=6)) for _ in range(queries)]
        row: dict[str, object] = {"chunks": n}
        with tempfile.TemporaryDirectory() as tmp:
            for sparse in (False, True):
                store = open_vector_store(
                    "edge", Path(tmp) / f"v{sparse}", "idx", emb, sparse=sparse
                )
                t = time.perf_counter()
                for i in range(0, n, 1024):
                    store.upsert(chunks[i : i + 1024], vecs[i : i + 1024])
                store.flush()
                row["write_s_sparse" if sparse else "write_s_dense_only"] = round(
                    time.perf_counter() - t, 1
                )
                if sparse:
                    row |= _timed("sparse", lambda q, s=store: s.search_text(q, 100, ALL), asked)
                store.close()
            lexical = open_lexical_index("tantivy", Path(tmp) / "lex")
            t = time.perf_counter()
            for i in range(0, n, 1024):
                lexical.upsert(chunks[i : i + 1024])
                lexical.commit()
            row["write_s_tantivy"] = round(time.perf_counter() - t, 1)
            row |= _timed("tantivy", lambda q, lx=lexical: lx.search(q, 100, ALL), asked)
            lexical.close()
        rows.append(row)
        if lines:
            print(json.dumps(row), flush=True)
    return rows


def _timed(name: str, search: object, asked: list[str]) -> dict[str, float]:
    ms = []
    for q in asked:
        t = time.perf_counter()
        search(q)  # type: ignore[operator]
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return {f"{name}_p50_ms": round(statistics.median(ms), 2),
            f"{name}_p95_ms": round(ms[int(0.95 * len(ms))], 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--from", dest="src", type=Path, required=True)
    q.add_argument("--to", dest="dst", type=Path, required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    lat.add_argument("--json", action="store_true", help="stdout: one JSON object at the end")
    args = ap.parse_args()
    if args.what == "quality":
        quality(args.src, args.dst)
        return
    with stdout_to_stderr(args.json):  # --json: nothing but the document on stdout
        rows = latency(args.chunks, lines=not args.json)
    if args.json:
        print_json({"rows": rows})


if __name__ == "__main__":
    main()
