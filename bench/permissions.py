"""Mirrored file permissions: how fast a permission change is enforced, what the principal
filter costs a query, and what the stamp costs a chunk (docs/guide/permissions.md).

- freshness: a real `ragstream watch --serve` (static embedder) over `--files` notes with
  `permissions = "posix"`; `--changes` times, a random note is chmod'ed between 600 (its
  owner's) and 644 (everyone's), and the HTTP API is polled as another user (the trusted
  `X-Ragstream-User` header) until the answer follows: chmod → enforced, p50/p95/max. The
  watcher's outcomes over the run say how many chunks were embedded (0 expected).
- filter cost: an embedded Qdrant Edge store of `--chunks` synthetic points (random 384-dim
  vectors, the BM25 sparse leg on) stamped with `--sets` distinct principal sets; dense and
  BM25 searches (n=100) of random principals against the same searches with no principal
  filter: p50/p95 each, and the ratio; and a hybrid query's two searches (each query's dense
  and BM25 time summed), its latency with and without. Each chunk's text is 12 words and
  each query's 3, drawn from `--vocab` words: the default 10 put almost every chunk in each
  query term's posting list (every point a BM25 candidate); a larger vocabulary draws its
  words by Zipf's law (weight 1/rank), as a real corpus's terms are spread. Then the BM25
  leg's engine call alone under three filter shapes (`status=live`, what a search without
  readers sends; the readers' any-of alone, what a principal's search sends, a tombstone
  having no readers; both): where the principal filter's cost comes from.
- stamp size: the stamp's payload bytes per chunk (`readers`, `readers_fp`,
  `readers_reason` as JSON) over the synthetic sets.

Needs root (it creates the test users, as the tests do). Figures go to stdout.

    sudo .venv/bin/python bench/permissions.py [--files 40] [--changes 20] \
        [--chunks 100000] [--sets 100] [--queries 300] [--vocab 10]
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
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream.connectors.lexical import tokenize
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.sparse import query_vector
from ragstream.connectors.stores import open_vector_store
from ragstream.connectors.vector_stores import (
    LIVE,
    READER_FIELDS,
    BaseQdrantStore,
    Condition,
    MatchIn,
    chunk_payload,
)
from ragstream.core.models import EmbedderVersion
from ragstream.core.permissions import EVERYONE, source_token
from tests.harness.helpers import synthetic_chunk
from tests.harness.users import real_users, retrieved_as, shared_root, watching

QUESTION = "quartz reading of the station log"
WORDS = [
    "station",
    "log",
    "quartz",
    "reading",
    "valve",
    "pressure",
    "survey",
    "north",
    "ridge",
    "sample",
]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def freshness(files: int, changes: int, seed: int) -> None:
    real_users()
    rng = random.Random(seed)
    base = shared_root()
    try:
        docs = base / "docs"
        docs.mkdir()
        docs.chmod(0o755)
        notes = []
        for i in range(files):
            note = docs / f"note{i:03d}.md"
            note.write_text(f"# Note {i}\n\nThe station log {i} holds quartz reading {i}.\n")
            shutil.chown(note, "rsperm_alice", "rsperm_alice")
            note.chmod(0o600)
            notes.append(note)
        with watching(docs, base / "data") as (url, outcomes):
            for _ in range(files):
                outcomes.get(timeout=300)  # the catch-up indexed every note
            lags = []
            for _ in range(changes):
                note = rng.choice(notes)
                did = f"docs:{note.name}"
                opened = note.stat().st_mode & 0o777 == 0o600
                start = time.perf_counter()
                note.chmod(0o644 if opened else 0o600)
                while retrieved_as(url, "rsperm_bob", did, QUESTION) != opened:
                    if time.perf_counter() - start > 30:
                        raise SystemExit(f"{did}: the change was not enforced within 30 s")
                    time.sleep(0.01)
                lags.append(time.perf_counter() - start)
            time.sleep(0.5)
            seen = []
            while not outcomes.empty():
                seen.append(outcomes.get())
        embedded = sum(o["chunks_embedded"] for o in seen)
        restamped = sum(o.get("chunks_restamped", 0) for o in seen)
        print(
            f"freshness (watch --serve, {files} notes, {changes} chmods, debounce 100 ms): "
            f"chmod -> enforced p50 {pct(lags, 50):.3f} s, p95 {pct(lags, 95):.3f} s, "
            f"max {max(lags):.3f} s; chunks embedded {embedded}, re-stamped {restamped}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


# the BM25 leg's filter shapes the bench times apart (a principal's search sends the second:
# `SearchFilter.status_condition`)
SHAPES: dict[str, Callable[[tuple[str, ...]], list[Condition]]] = {
    "status=live": lambda readers: [LIVE],
    "readers alone": lambda readers: [MatchIn("readers", readers)],
    "status=live and readers": lambda readers: [LIVE, MatchIn("readers", readers)],
}


def principal_sets(count: int, rng: random.Random) -> list[tuple[str, ...]]:
    """`count` distinct stamps: a few users and groups each, some `everyone`."""
    users = [f"user:u{i:03d}" for i in range(200)]
    groups = [f"group:g{i:02d}" for i in range(40)]
    out: set[tuple[str, ...]] = {(EVERYONE,)}
    while len(out) < count:
        picked = rng.sample(users, rng.randint(1, 4)) + rng.sample(groups, rng.randint(0, 3))
        out.add(tuple(sorted(picked)))
    return sorted(out)


def vocabulary(size: int) -> tuple[list[str], list[float]]:
    """`size` words and their draw weights: `WORDS` alike, or beyond it Zipf's 1/rank."""
    if size <= len(WORDS):
        return WORDS[:size], [1.0] * size
    words = WORDS + [f"term{i:05d}" for i in range(size - len(WORDS))]
    return words, [1.0 / (rank + 1) for rank in range(size)]


def filter_cost(chunks: int, sets: int, queries: int, seed: int, vocab: int) -> None:
    rng = random.Random(seed)
    words, weights = vocabulary(vocab)
    stamps = principal_sets(sets, rng)
    emb = EmbedderVersion(name="bench/random-384", fingerprint="0" * 16, dimension=384)
    vectors = np.random.default_rng(seed).standard_normal((chunks, 384)).astype(np.float32)
    points = []
    for i in range(chunks):
        stamp = stamps[i % len(stamps)]
        text = " ".join(rng.choices(words, weights, k=12))
        points.append(
            synthetic_chunk(
                i,
                text,
                readers=(*stamp, source_token("docs")),
                readers_fp=f"{i % len(stamps):016x}",
            )
        )
    sizes = [
        len(json.dumps({k: chunk_payload(p)[k] for k in READER_FIELDS}).encode())
        for p in points[: len(stamps)]
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_vector_store("edge", Path(tmp), "bench", emb, sparse=True)
        start = time.perf_counter()
        for s in range(0, chunks, 2048):
            store.upsert(points[s : s + 2048], vectors[s : s + 2048].tolist())
        store.flush()
        built = time.perf_counter() - start
        qvecs = np.random.default_rng(seed + 1).standard_normal((queries, 384)).tolist()
        principals = [rng.choice(stamps) for _ in range(queries)]
        timings: dict[str, list[float]] = {k: [] for k in ("dense", "dense+p", "bm25", "bm25+p")}
        shapes: dict[str, list[float]] = {k: [] for k in SHAPES}
        for q, principal in zip(qvecs, principals, strict=True):
            tokens = (*principal[:2], EVERYONE, "group:g00")
            text = " ".join(rng.choices(words, weights, k=3))
            for name, flt in (("", SearchFilter()), ("+p", SearchFilter(readers=tokens))):
                t = time.perf_counter()
                store.search(q, 100, flt)
                timings["dense" + name].append(time.perf_counter() - t)
                t = time.perf_counter()
                store.search_text(text, 100, flt)
                timings["bm25" + name].append(time.perf_counter() - t)
            assert isinstance(store, BaseQdrantStore)
            sparse = query_vector(tokenize(text))
            for shape, conds in SHAPES.items():
                t = time.perf_counter()
                store._query_sparse(sparse, 100, conds(tokens), True)  # the engine call alone
                shapes[shape].append(time.perf_counter() - t)
        store.close()
    print(
        f"filter cost (Qdrant Edge, {chunks} chunks, {len(stamps)} principal sets, "
        f"{queries} queries, n=100, {len(words)} words; built in {built:.1f} s):"
    )
    for name in ("", "+p"):  # a hybrid query's two searches, each query's pair summed
        pairs = zip(timings["dense" + name], timings["bm25" + name], strict=True)
        timings["query" + name] = [d + b for d, b in pairs]
    for leg in ("dense", "bm25", "query"):
        base_t, with_t = timings[leg], timings[leg + "+p"]
        print(
            f"  {leg:5s} no filter p50 {pct(base_t, 50) * 1e3:.2f} ms p95 "
            f"{pct(base_t, 95) * 1e3:.2f} ms | principal filter p50 "
            f"{pct(with_t, 50) * 1e3:.2f} ms p95 {pct(with_t, 95) * 1e3:.2f} ms | ratio p50 "
            f"{pct(with_t, 50) / pct(base_t, 50):.2f}x p95 {pct(with_t, 95) / pct(base_t, 95):.2f}x"
        )
    live = pct(shapes["status=live"], 50)
    print(
        "  bm25 engine call by filter shape: "
        + ", ".join(
            f"{shape} p50 {pct(t, 50) * 1e3:.2f} ms ({pct(t, 50) / live:.2f}x)"
            for shape, t in shapes.items()
        )
    )
    print(
        f"stamp size: {statistics.mean(sizes):.0f} payload bytes per chunk on average "
        f"(JSON of {', '.join(READER_FIELDS)}; min {min(sizes)}, max {max(sizes)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--sets", type=int, default=100)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=len(WORDS), help="words chunks are drawn from")
    args = ap.parse_args()
    if args.changes:
        freshness(args.files, args.changes, args.seed)
    if args.chunks:
        filter_cost(args.chunks, args.sets, args.queries, args.seed, args.vocab)


if __name__ == "__main__":
    main()
