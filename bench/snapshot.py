"""Snapshot, restore, export and import against rebuilding the index from its folder.

Writes N SciFact abstracts as Markdown files (`--copies C`: the N written C times, copy k >= 1
with a citation mark `[k]` ending each sentence, so no chunk's text is another copy's: each
is embedded, none reused), syncs them into a fresh data dir with
`--embedder` (the rebuild: parse, chunk, embed, write; the model load included), then on
that index times:

- `snapshot create` (through `Client.snapshot()`, its size), `snapshot verify` (every
  checksum, then the counts read back) and `snapshot restore` into a new dir;
- `export` as JSON lines and as Parquet (sizes) and `import` of the Parquet file into a new
  data dir, with the `sync` of the same folder that follows (chunks embedded: 0 expected;
  `--no-export` leaves these out);
- retrieve p50/p95 idle (a round before and a round after) and while a snapshot is being
  taken (one thread querying, round after round, until it is written).

The point is the ratio to a rebuild (target: restore <= 1/10 of it).

    .venv/bin/python bench/snapshot.py [--docs 500] [--copies 1] [--embedder minilm-l6]
        [--queries 40] [--no-export]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import Client, api
from ragstream.core.settings import Settings
from ragstream.service import exports, snapshots
from tests.harness.scifact import SCIFACT, corpus, pct, write_markdown


def _questions(n: int) -> list[str]:
    with (SCIFACT / "queries.jsonl").open() as fh:
        return [json.loads(line)["text"] for _, line in zip(range(n), fh, strict=False)]


def _marked(doc: dict[str, str], copy: int) -> dict[str, str]:
    """Copy `copy` of an abstract: a citation mark `[copy]` ends each of its sentences."""
    return {**doc, "text": re.sub(r"([.!?])(\s+|$)", rf" [{copy}]\1\2", doc["text"])}


def _write_copies(docs: list[dict[str, str]], copies: int, folder: Path) -> None:
    """`docs` once per copy, copy k under `folder/copy-k` (copy 0 as SciFact has it)."""
    if copies == 1:
        write_markdown(docs, folder)
        return
    for k in range(copies):
        write_markdown([_marked(d, k) if k else d for d in docs], folder / f"copy-{k}")


def _timed(run: object) -> tuple[float, object]:
    start = time.perf_counter()
    out = run()  # type: ignore[operator]
    return time.perf_counter() - start, out


def _latencies(c: Client, questions: list[str], until: threading.Event | None) -> list[float]:
    """Retrieve latencies (ms): each question once, or round after round until `until`."""
    out: list[float] = []
    while True:
        for q in questions:
            start = time.perf_counter()
            c.retrieve(q, k=10)
            out.append((time.perf_counter() - start) * 1000)
            if until is not None and until.is_set():
                return out
        if until is None:
            return out


def _in_thread(run: Callable[[], list[float]]) -> list[float]:
    """`run()` on a thread of its own, as the queries during the snapshot run (the same
    path: a thread's model calls may be scheduled unlike the main thread's)."""
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.extend(run()))
    worker.start()
    worker.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=500, help="SciFact abstracts to index")
    ap.add_argument("--copies", type=int, default=1, help="times the abstracts are written")
    ap.add_argument("--embedder", default="minilm-l6", help="preset (minilm-l6, static, ...)")
    ap.add_argument("--queries", type=int, default=40, help="retrieve questions per round")
    ap.add_argument("--no-export", action="store_true", help="leave export and import out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        root = Path(tmp)
        folder = root / "docs"
        _write_copies(corpus(args.docs), args.copies, folder)
        settings = Settings(data_dir=root / "data", embedder=args.embedder)
        rebuild_s, report = _timed(lambda: api.sync([folder], settings=settings))
        chunks = report.chunks_live  # type: ignore[attr-defined]
        embedded = report.chunks_embedded  # type: ignore[attr-defined]
        questions = _questions(args.queries)
        with Client(settings=settings) as c:
            _latencies(c, questions, None)  # a warm-up round: models loaded, caches warm
            idle = _in_thread(lambda: _latencies(c, questions, None))
            done = threading.Event()
            during: list[float] = []
            reader = threading.Thread(
                target=lambda: during.extend(_latencies(c, questions, done)), daemon=True
            )
            reader.start()
            snap_s, info = _timed(c.snapshot)
            done.set()
            reader.join()
            after = _in_thread(lambda: _latencies(c, questions, None))
        path = Path(info.path)  # type: ignore[attr-defined]
        verify_s, _ = _timed(lambda: snapshots.verify(settings, path))
        restore_s, _ = _timed(lambda: snapshots.restore(settings, path, root / "restored"))
        rows: list[tuple[str, float, int | None]] = [
            ("rebuild from the folder (sync)", rebuild_s, None),
            ("snapshot create", snap_s, path.stat().st_size),
            ("snapshot verify", verify_s, None),
            ("snapshot restore", restore_s, None),
        ]
        resync = None
        if not args.no_export:
            jsonl, parquet = root / "index.jsonl", root / "index.parquet"
            export_jsonl_s, _ = _timed(lambda: exports.export(settings, "jsonl", jsonl))
            export_parquet_s, _ = _timed(lambda: exports.export(settings, "parquet", parquet))
            imported = settings.model_copy(update={"data_dir": root / "imported"})
            import_s, _ = _timed(lambda: exports.import_records(imported, parquet))
            resync = api.sync([folder], settings=imported)
            rows += [
                ("export jsonl", export_jsonl_s, jsonl.stat().st_size),
                ("export parquet", export_parquet_s, parquet.stat().st_size),
                ("import parquet", import_s, None),
            ]
    print(
        f"{args.docs} SciFact abstracts x {args.copies}, {chunks} chunks, {embedded} embedded "
        f"by the rebuild ({args.embedder}, Qdrant Edge, sparse BM25)"
    )
    print(f"{'step':34} {'seconds':>9} {'x rebuild':>10} {'size MB':>9}")
    for name, seconds, size in rows:
        mb = f"{size / 1e6:9.1f}" if size is not None else f"{'':>9}"
        print(f"{name:34} {seconds:9.2f} {seconds / rebuild_s:10.3f} {mb}")
    if resync is not None:
        print(f"sync after import: {resync.chunks_embedded} chunks embedded")
    for name, ms in (("idle before", idle), ("during snapshot", during), ("idle after", after)):
        p50, p95 = pct(ms, 0.5), pct(ms, 0.95)
        print(f"retrieve {name:16} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  n={len(ms)}")


if __name__ == "__main__":
    main()
