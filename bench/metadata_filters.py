"""Metadata filters: what a filter costs a query, and how fast an edit of front matter is
seen (docs/guide/filters.md).

- filter cost: an embedded Qdrant Edge store of `--chunks` synthetic points (random 384-dim
  vectors, the BM25 sparse leg on), each with metadata fields as the flow writes them
  (`team`: a keyword of 100 values; `draft`: a bool, half true; `year`: an integer; `date`:
  a datetime), payload indexes on every field. Dense and BM25 searches (n=100) of random
  queries under no metadata filter, a selective one (`team = t07`: 1 % of the chunks), a
  broad one (`not draft`: 50 %) and a range (`date >= <the median>`: 50 %), side by side in
  one run: p50 / p95 each, the ratio to the unfiltered search, and a hybrid query's two
  searches summed. With `--optimize`, the graph is then built (`ragstream optimize`: Edge's
  HNSW) and the same queries run again: both tables in one run.
- re-stamp: a real `ragstream watch --serve` (static embedder, debounce 100 ms) over
  `--files` notes with YAML front matter; `--changes` times a random note's `tags` is
  flipped between `red` and `blue`, and `/v1/retrieve` with `filter: "tags = red"` is
  polled until the note's presence follows: edit → filtered answer changed, p50 / p95 / max,
  with the chunks embedded (0 expected) and re-stamped over the run.

Figures go to stdout.

    .venv/bin/python bench/metadata_filters.py [--chunks 100000] [--queries 300] \
        [--files 40] [--changes 20] [--optimize]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream.connectors.protocols import SearchFilter, VectorStore
from ragstream.connectors.stores import open_vector_store
from ragstream.core.filters import check, parse_where
from ragstream.core.metadata import FieldType, instant_text
from ragstream.core.models import EmbedderVersion, IndexedChunk
from tests.harness.helpers import synthetic_chunk, watch_serving

TYPES: dict[str, FieldType] = {
    "team": "keyword",
    "draft": "bool",
    "year": "integer",
    "date": "datetime",
}
WORDS = ["station", "log", "quartz", "reading", "valve", "pressure", "survey", "north", "ridge"]
START = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
DAYS = 2000  # dates spread over this many days; the median is START + DAYS / 2
FILTERS = {
    "selective (team = t07, 1 %)": "team = t07",
    "broad (not draft, 50 %)": "not draft",
    "range (date >= median, 50 %)": f"date >= {(START + dt.timedelta(days=DAYS // 2)).date()}",
}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def synthetic(chunks: int, rng: random.Random) -> list[IndexedChunk]:
    points = []
    for i in range(chunks):
        text = " ".join(rng.choices(WORDS, k=12))
        meta = {
            "team": f"t{i % 100:02d}",
            "draft": "true" if i % 2 else "false",
            "year": 2000 + i % 25,
            "date": instant_text(START + dt.timedelta(days=rng.randrange(DAYS))),
        }
        points.append(synthetic_chunk(i, text, meta=meta))
    return points


def filter_cost(chunks: int, queries: int, seed: int, optimize: bool) -> None:
    """The filters' cost on Edge's plain scan, then (`optimize`) on its HNSW graph."""
    emb = EmbedderVersion(name="bench/random-384", fingerprint="0" * 16, dimension=384)
    vectors = np.random.default_rng(seed).standard_normal((chunks, 384)).astype(np.float32)
    points = synthetic(chunks, random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        store = open_vector_store("edge", Path(tmp), "bench", emb, sparse=True)
        store.index_fields(TYPES)
        start = time.perf_counter()
        for s in range(0, chunks, 2048):
            store.upsert(points[s : s + 2048], vectors[s : s + 2048].tolist())
        store.flush()
        built = time.perf_counter() - start
        report(
            f"plain scan, {chunks} chunks, built in {built:.1f} s", measure(store, queries, seed)
        )
        if optimize:
            start = time.perf_counter()
            store.optimize()
            took = time.perf_counter() - start
            report(f"HNSW graph, built by optimize in {took:.1f} s", measure(store, queries, seed))
        store.close()


def measure(store: VectorStore, queries: int, seed: int) -> dict[tuple[str, str], list[float]]:
    """Each query's dense and BM25 searches (n=100) under every filter, in turn."""
    rng = random.Random(seed + 2)
    filters = {"no filter": SearchFilter()} | {
        name: SearchFilter(where=check(parse_where(text), TYPES)) for name, text in FILTERS.items()
    }
    timings: dict[tuple[str, str], list[float]] = {}
    qvecs = np.random.default_rng(seed + 1).standard_normal((queries, 384)).tolist()
    for q in qvecs:
        text = " ".join(rng.choices(WORDS, k=3))
        for name, flt in filters.items():
            t = time.perf_counter()
            store.search(q, 100, flt)
            timings.setdefault((name, "dense"), []).append(time.perf_counter() - t)
            t = time.perf_counter()
            store.search_text(text, 100, flt)
            timings.setdefault((name, "bm25"), []).append(time.perf_counter() - t)
    for name in filters:
        pairs = zip(timings[(name, "dense")], timings[(name, "bm25")], strict=True)
        timings[(name, "query")] = [d + b for d, b in pairs]
    return timings


def report(title: str, timings: dict[tuple[str, str], list[float]]) -> None:
    print(f"filter cost (Qdrant Edge, {title}; n=100):")
    names = list(dict.fromkeys(name for name, _ in timings))
    for leg in ("query", "dense", "bm25"):
        base = timings[("no filter", leg)]
        for name in names:
            got = timings[(name, leg)]
            print(
                f"  {leg:5s} {name:30s} p50 {pct(got, 50) * 1e3:6.2f} ms p95 "
                f"{pct(got, 95) * 1e3:6.2f} ms | x{pct(got, 50) / pct(base, 50):.2f} p50 "
                f"x{pct(got, 95) / pct(base, 95):.2f} p95"
            )


def note_text(i: int, tag: str) -> str:
    return f"---\ntags: [{tag}]\n---\n# Note {i}\n\nThe station log {i} holds quartz reading {i}.\n"


def filtered_has(url: str, doc_id: str, i: int) -> bool:
    body = {"query": f"station log {i} quartz reading", "k": 5, "filter": "tags = red"}
    reply = httpx.post(f"{url}/v1/retrieve", json=body, timeout=60)
    reply.raise_for_status()
    return any(r["doc_id"] == doc_id for r in reply.json()["results"])


def restamp(files: int, changes: int, seed: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        tags = {i: "blue" for i in range(files)}
        for i in range(files):
            (docs / f"note{i:03d}.md").write_text(note_text(i, "blue"))
        (docs / "red.md").write_text(note_text(999, "red"))  # the field's values include red
        env = dict(os.environ, RAGSTREAM_EMBEDDER="static", RAGSTREAM_SYNC__DEBOUNCE_MS="100")
        with watch_serving(docs, Path(tmp) / "data", env) as (url, outcomes):
            for _ in range(files + 1):
                outcomes.get(timeout=300)  # the catch-up indexed every note
            lags = []
            for _ in range(changes):
                i = rng.randrange(files)
                tags[i] = "red" if tags[i] == "blue" else "blue"
                start = time.perf_counter()
                (docs / f"note{i:03d}.md").write_text(note_text(i, tags[i]))
                while filtered_has(url, f"docs:note{i:03d}.md", i) != (tags[i] == "red"):
                    if time.perf_counter() - start > 30:
                        raise SystemExit(f"note{i:03d}: the edit was not seen within 30 s")
                    time.sleep(0.01)
                lags.append(time.perf_counter() - start)
            time.sleep(0.5)
            seen = []
            while not outcomes.empty():
                seen.append(outcomes.get())
    embedded = sum(o.get("chunks_embedded", 0) for o in seen)
    restamped = sum(o.get("chunks_restamped", 0) for o in seen)
    print(
        f"re-stamp (watch --serve, {files} notes, {changes} front matter edits, debounce 100 ms): "
        f"edit -> filtered answer p50 {pct(lags, 50):.3f} s, p95 {pct(lags, 95):.3f} s, "
        f"max {max(lags):.3f} s; chunks embedded {embedded}, re-stamped {restamped}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--optimize", action="store_true", help="then build HNSW and measure again")
    args = ap.parse_args()
    if args.changes:
        restamp(args.files, args.changes, args.seed)
    if args.chunks:
        filter_cost(args.chunks, args.queries, args.seed, args.optimize)


if __name__ == "__main__":
    main()
