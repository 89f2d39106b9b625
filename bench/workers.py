"""Sync throughput vs bytewax workers (threads) and processes, on real documents.

Copies the shared documents up to `--max-bytes` (HTML, DOCX, PDF, PPTX, Markdown) into a
temp folder and syncs them into a fresh data dir per configuration:

- threads: `ragstream.sync(..., workers=N)` in this process, after a warm-up pass, so imports,
  docling's converter and the model are loaded once and every row measures the flow itself.
  The stage spans say where the time went: parsing is what the extra workers share (summed
  over workers), the single writer (chunk, embed, write) is not, so the parse share bounds
  the speed-up (Amdahl).
- processes: `python -m bytewax.run "ragstream.flows.sync:get_flow(watch=False)" -i I -a ...` with N
  real processes, wall time from launch to the last exit (interpreter start and model load
  included, in every row alike).

- partitions (`--partitions`): 1 then 2 `ragstream sync` processes, each owning
  a partition of the documents with one torch thread, and the parallel efficiency.

    nice -n 10 .venv/bin/python bench/workers.py [--workers 1 2] [--max-bytes 120000]
        [--limit N] [--no-processes] [--no-threads] [--partitions] [--scifact N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from ragstream import api  # noqa: E402
from ragstream.core.models import DocOutcome  # noqa: E402
from ragstream.core.settings import SUPPORTED_SUFFIXES  # noqa: E402
from ragstream.core.telemetry import install_exporter  # noqa: E402

DOCS = ROOT.parent / "shared" / "data" / "docs"
STAGES = ("parse", "chunk", "diff", "embed", "write")
HEADER = f"{'mode':<10} {'n':>3} {'docs':>5} {'chunks':>7} {'seconds':>8} {'docs/s':>7} chunks/s"


def pick_docs(max_bytes: int, limit: int | None) -> list[Path]:
    """Files up to `max_bytes`, taken round-robin over the format folders (so any `limit`
    still mixes PDF, DOCX, HTML and Markdown)."""
    by_dir: dict[Path, list[Path]] = defaultdict(list)
    for p in sorted(DOCS.rglob("*")):
        if p.is_file() and p.suffix in SUPPORTED_SUFFIXES and p.stat().st_size <= max_bytes:
            by_dir[p.parent].append(p)
    queues = [files for _, files in sorted(by_dir.items())]
    out: list[Path] = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out[:limit] if limit else out


def copy_folder(files: Sequence[Path], root: Path) -> Path:
    root.mkdir(parents=True)
    for f in files:
        shutil.copy2(f, root / f"{f.parent.name}__{f.name}")
    return root


def row(mode: str, n: int, docs: int, chunks: int, seconds: float, extra: str = "") -> str:
    return (
        f"{mode:<10} {n:>3} {docs:>5} {chunks:>7} {seconds:>8.1f} {docs / seconds:>7.2f} "
        f"{chunks / seconds:>9.1f}  {extra}"
    )


def threads(folder: Path, work: Path, counts: Sequence[int]) -> None:
    spans = InMemorySpanExporter()
    install_exporter(spans)
    warm = copy_folder(sorted(folder.iterdir())[:2], work / "warm")
    api.sync([warm], data_dir=work / "warm-data")  # imports, converter, model: loaded once
    for n in counts:
        spans.clear()
        started = time.perf_counter()
        outcomes: list[DocOutcome] = []
        report = api.sync(
            [folder], data_dir=work / f"threads-{n}", workers=n, on_outcome=outcomes.append
        )
        seconds = time.perf_counter() - started
        busy: dict[str, float] = defaultdict(float)
        for s in spans.get_finished_spans():
            stage = s.name.removeprefix("ragstream.ingest.")
            if stage in STAGES and s.end_time and s.start_time:
                busy[stage] += (s.end_time - s.start_time) / 1e9
        writer = sum(busy[s] for s in STAGES if s != "parse")
        share = busy["parse"] / (busy["parse"] + writer) if busy["parse"] + writer else 0.0
        extra = (
            f"parse {busy['parse']:.1f}s (summed), writer {writer:.1f}s, parse share {share:.0%}"
        )
        print(row("threads", n, len(outcomes), report.chunks_live, seconds, extra), flush=True)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def processes(folder: Path, work: Path, counts: Sequence[int]) -> None:
    sources = json.dumps([{"name": folder.name, "root": str(folder)}])
    for n in counts:
        env = dict(
            os.environ, RAGSTREAM_DATA_DIR=str(work / f"procs-{n}"), RAGSTREAM_SOURCES=sources
        )
        addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(n))
        cmd = [sys.executable, "-m", "bytewax.run", "ragstream.flows.sync:get_flow(watch=False)"]
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [*cmd, "-i", str(i), "-a", addresses] if n > 1 else cmd,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for i in range(n)
        ]
        outs = [p.communicate()[0] for p in procs]
        seconds = time.perf_counter() - started
        if any(p.returncode for p in procs):
            raise SystemExit(f"a process of the {n}-process cluster failed")
        outcomes = [
            json.loads(line) for out in outs for line in out.splitlines() if line[:1] == "{"
        ]
        chunks = sum(int(o["chunks_live"]) for o in outcomes)
        print(
            row("processes", n, len(outcomes), chunks, seconds, "wall, incl. start-up"), flush=True
        )


def partitions(folder: Path, work: Path, counts: Sequence[int]) -> dict[int, float]:
    """Scale-out ingest: n `ragstream sync` processes, process i owning partition
    i of n (`RAGSTREAM_SYNC__PARTITION_*`), each with ONE torch/BLAS thread (so n processes use
    n cores), the server code path (qdrant-client + the sparse BM25 leg). qdrant-client's local
    mode is the only Qdrant installable here and holds one process, so each process writes
    its own local store (a server would take all of them; the store is ~2 % of ingest time,
    docs/benchmarks.md "Workers and partitions"). Rate: chunks embedded by all ÷ the slowest
    process's flow seconds (its model load included, interpreter start-up not); returns
    {n: chunks/s}."""
    rates: dict[int, float] = {}
    for n in counts:
        started = time.perf_counter()
        procs = []
        for i in range(n):
            env = dict(
                os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                RAGSTREAM_STORE__VECTOR_BACKEND="qdrant", RAGSTREAM_STORE__LEXICAL_BACKEND="sparse",
                RAGSTREAM_SYNC__PARTITION_INDEX=str(i), RAGSTREAM_SYNC__PARTITION_COUNT=str(n),
            )  # fmt: skip
            cmd = [sys.executable, "-m", "ragstream.cli", "sync", str(folder), "--json"]
            cmd += ["--data-dir", str(work / f"part-{n}-{i}")]
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        outs = [p.communicate()[0] for p in procs]
        wall = time.perf_counter() - started
        if any(p.returncode for p in procs):
            raise SystemExit(f"a sync process of the {n}-partition run failed")
        reports = [json.loads(out.strip().splitlines()[-1]) for out in outs]
        chunks = sum(int(r["chunks_embedded"]) for r in reports)
        docs = sum(int(r["docs_seen"]) for r in reports)
        flow_s = max(float(r["seconds"]) for r in reports)
        rates[n] = chunks / flow_s
        shares = "/".join(str(r["chunks_embedded"]) for r in reports)
        extra = (
            f"1 thread each; flow s of the slowest; chunks per process {shares}; wall {wall:.1f}s"
        )
        print(row("partitions", n, docs, chunks, flow_s, extra), flush=True)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--max-bytes", type=int, default=120_000)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--no-processes", action="store_true")
    ap.add_argument("--no-threads", action="store_true")
    ap.add_argument(
        "--partitions", action="store_true", help="scale-out ingest: -p 1 vs -p 2 partitions"
    )
    ap.add_argument(
        "--scifact", type=int, default=0, help="corpus: the first N SciFact abstracts instead"
    )
    args = ap.parse_args()
    files = pick_docs(args.max_bytes, args.limit)
    load = os.getloadavg()[0]
    print(
        f"{len(files)} documents <= {args.max_bytes} bytes from {DOCS}; "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at start"
    )
    print(HEADER)
    with tempfile.TemporaryDirectory(prefix="ragstream-workers-") as tmp:
        work = Path(tmp)
        if args.scifact:
            from tests.harness.scifact import corpus, write_markdown

            folder = work / "docs"
            write_markdown(corpus(args.scifact), folder)
            print(f"corpus: the first {args.scifact} SciFact abstracts as Markdown instead")
        else:
            folder = copy_folder(files, work / "docs")
        if not args.no_threads:
            threads(folder, work, args.workers)
        if not args.no_processes:
            processes(folder, work, args.workers)
        if args.partitions:
            rates = partitions(folder, work, [1, 2])
            efficiency = rates[2] / (2 * rates[1])
            print(f"parallel efficiency (-p 2 / (2 x -p 1)): {efficiency:.3f} (target >= 0.8)")


if __name__ == "__main__":
    main()
