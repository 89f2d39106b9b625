"""Ingest throughput vs raw encode throughput, and peak RSS per 100k chunks, in one run.

Writes N SciFact abstracts as Markdown files (K times with `--copies K`), runs the real sync
flow into a fresh data dir (bytewax + docling + chunker + embedder + Qdrant Edge + tantivy),
then encodes the very same chunk texts with the bare embedder, and prints chunks/s of both
and the ratio (target >= 0.85; `--skip-encode` leaves that half out).

Memory (target: < 1 GiB beyond the model per 100k chunks). The baseline is the resident set
right after the embedder is loaded and torch/transformers are imported (interpreter +
libraries + model: docling imports torch anyway; with minilm-l6 it is part of the model, with
the ONNX minilm-l3 it would otherwise count as ingest). The peak (VmHWM) is reset there
through /proc/self/clear_refs, so loading never counts. After every document the bench reads
VmHWM and the current RssAnon/RssFile; it prints them every `--checkpoint` chunks and at the
end. When the run reaches 100k chunks, the per-100k figure is the peak measured at the
first document past 100k chunks, not an extrapolation; a shorter run prints an
extrapolation, labelled as such.

A real 100k-chunk ingest: SciFact has 5,183 abstracts (~25k chunks with minilm-l6), so
`--copies K` writes the corpus K times under `copy_<i>/` (distinct paths, so distinct doc
ids). Copy 0 is the corpus as is; in copy i >= 1 every sentence ends with a marker ` (ci).`,
so every chunk of every copy is new text that must be encoded (identical copies, as in
bench/query.py, would reuse every vector, and a single marker sentence per document would
change only its first chunk: the chunker is edit-stable). `--embedder minilm-l3` (ONNX, ~2x
faster on CPU) makes a 100k run affordable on 2 cores: its vectors are the same 384-d floats,
so each stored point costs the same, but its 128-token limit caps the chunk budget at 126
tokens instead of 254, so the same corpus gives ~25 % more, shorter chunks, and its encode
activations are smaller than MiniLM-L6's (torch, up to 256 tokens).

`--no-trim` turns off the writer's release of free heap memory after each large batch
(`flows.sync.TRIM_MIN_CHUNKS`), to measure what it buys.

    .venv/bin/python bench/ingest.py [--docs 2000] [--no-trim]
    nice -n 10 .venv/bin/python bench/ingest.py --docs 4400 --copies 4 \
        --embedder minilm-l3 --skip-encode          # 107k chunks, memory only
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import api
from ragstream.core.models import DocOutcome
from ragstream.core.settings import Settings
from ragstream.flows import sync as sync_flow
from ragstream.flows.runtime import open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import load_embedder
from tests.harness.scifact import corpus, write_markdown

PER = 100_000  # chunks the memory target is stated for
_SENTENCE_END = re.compile(r"(?=[.!?](?:\s|$))")


def proc_status_mib(field: str) -> float:
    """A `VmRSS`/`VmHWM`/`RssAnon`/`RssFile` line of /proc/self/status, MiB (ru_maxrss for
    the peak where /proc is absent, NaN for the others)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak if field == "VmHWM" else float("nan")
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else float("nan")


def reset_peak_rss() -> bool:
    """Make VmHWM restart from the current RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def marked(text: str, copy: int) -> str:
    """Copy 0 as is; copy i ends every sentence with ` (ci).`, so each chunk is new text."""
    return text if copy == 0 else _SENTENCE_END.sub(f" (c{copy})", text)


def write_copies(docs: list[dict[str, str]], root: Path, copies: int) -> None:
    """The corpus `copies` times, as `root/copy_<i>/<id>.md` (see the module docstring)."""
    for i in range(copies):
        write_markdown([{**d, "text": marked(d["text"], i)} for d in docs], root / f"copy_{i}")


@dataclass(frozen=True)
class Sample:
    docs: int
    chunks: int
    peak: float  # VmHWM, MiB
    anon: float  # RssAnon now, MiB
    file: float  # RssFile now (mapped files: libraries, model, store mmaps), MiB


class MemorySampler:
    """Peak and current RSS after each document's outcome, against the chunks written so far."""

    def __init__(self, base: Sample, every: int) -> None:
        self.base, self.every = base, every
        self.chunks = 0
        self.samples: list[Sample] = []
        self.started = time.perf_counter()

    def __call__(self, outcome: DocOutcome) -> None:
        self.chunks += outcome.chunks_live
        sample = Sample(
            len(self.samples) + 1,
            self.chunks,
            proc_status_mib("VmHWM"),
            proc_status_mib("RssAnon"),
            proc_status_mib("RssFile"),
        )
        before = self.samples[-1].chunks if self.samples else 0
        self.samples.append(sample)
        if sample.chunks // self.every > before // self.every:  # progress, for long runs
            print(
                f"[{time.perf_counter() - self.started:.0f} s] {self.row(sample)}",
                file=sys.stderr,
                flush=True,
            )

    def row(self, s: Sample) -> str:
        b = self.base
        return (
            f"| {s.chunks} | {s.docs} | {s.peak - b.peak:.0f} MiB "
            f"| {s.anon - b.anon:.0f} + {s.file - b.file:.0f} MiB |"
        )

    def checkpoints(self, every: int) -> list[Sample]:
        """The first sample at or past each multiple of `every` chunks, and the last one."""
        out: list[Sample] = []
        mark = every
        for s in self.samples:
            if s.chunks >= mark:
                out.append(s)
                mark = (s.chunks // every + 1) * every
        if self.samples and (not out or out[-1] is not self.samples[-1]):
            out.append(self.samples[-1])
        return out

    def memory_lines(self) -> list[str]:
        if not self.samples:
            return ["no documents were indexed"]
        base = self.base
        lines = [
            "| chunks | docs | peak RSS beyond the model | RSS now beyond it: anon + file |",
            "|---|---|---|---|",
            *(self.row(s) for s in self.checkpoints(self.every)),
        ]
        last = self.samples[-1]
        at = next((s for s in self.samples if s.chunks >= PER), None)
        if at is not None:
            lines.append(
                f"peak RSS beyond the model per {PER:,} chunks (measured: peak when the "
                f"index first held >= {PER:,}, {at.chunks} chunks): "
                f"{at.peak - base.peak:.0f} MiB = {(at.peak - base.peak) / 1024:.2f} GiB"
            )
            return lines
        half = self.samples[len(self.samples) // 2]
        if last.chunks <= half.chunks:
            return [*lines, f"(per {PER:,} chunks: the run is too short to say)"]
        slope = (last.peak - half.peak) / (last.chunks - half.chunks)  # MiB/chunk, 2nd half
        extrapolated = last.peak - base.peak + slope * (PER - last.chunks)
        lines.append(
            f"EXTRAPOLATED (the run reached only {last.chunks} chunks) to {PER:,}: "
            f"{extrapolated / 1024:.2f} GiB beyond the model (this peak + "
            f"{slope * 1024:.1f} KiB per further chunk, the growth over the second half; "
            "likely an overestimate: a short run's peak still climbs as longer encode batches "
            "come by, and stores grow fastest while they are small; --copies measures it)"
        )
        return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=2000, help="SciFact abstracts per copy")
    ap.add_argument("--copies", type=int, default=1, help="write the corpus this many times")
    ap.add_argument("--embedder", default=None, help="preset (default: the settings' default)")
    ap.add_argument("--checkpoint", type=int, default=20_000, help="chunks between lines")
    ap.add_argument("--skip-encode", action="store_true", help="memory only: no raw encode")
    ap.add_argument(
        "--no-trim", action="store_true", help="never release the free heap (the code before)"
    )
    args = ap.parse_args()
    if args.no_trim:  # A/B of the writer's heap release (flows/sync.py, core/memory.py)
        sync_flow.TRIM_MIN_CHUNKS = sys.maxsize
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "scifact"
        write_copies(corpus(args.docs), root, args.copies)
        settings = Settings(data_dir=Path(tmp) / "data").with_paths([root])
        if args.embedder:
            settings = settings.model_copy(update={"embedder": args.embedder})
        embedder = load_embedder(settings.embedder)  # loaded once, outside both timings
        import torch  # noqa: F401  (part of the baseline: see the module docstring)
        import transformers  # noqa: F401

        base = Sample(
            0, 0, proc_status_mib("VmRSS"), proc_status_mib("RssAnon"), proc_status_mib("RssFile")
        )
        peak_reset = reset_peak_rss()
        sampler = MemorySampler(base, args.checkpoint)
        t0 = time.perf_counter()
        report = api.sync([root], settings=settings, on_outcome=sampler)
        ingest_s = time.perf_counter() - t0
        rss_peak = proc_status_mib("VmHWM")
        texts: list[str] = []
        if not args.skip_encode:
            with open_runtime(settings) as rt:
                texts = [  # what the sync encoded: contextual header + text
                    embedding_text(c.context, c.text)
                    for d in rt.vectors.live_doc_fingerprints()
                    for c in rt.vectors.live_chunks(d)
                ]
            t0 = time.perf_counter()
            embedder.encode_passages(texts, batch_size=settings.sync.embed_batch_size)
            encode_s = time.perf_counter() - t0
    n = report.chunks_embedded
    print(
        f"embedder={settings.embedder} ({embedder.version.name}, max {embedder.max_seq_length} "
        f"tokens) sync.embed_batch_size={settings.sync.embed_batch_size} "
        f"sync.ingest_batch_docs={settings.sync.ingest_batch_docs}"
        f"{' heap release OFF (--no-trim)' if args.no_trim else ''}"
    )
    print(
        f"docs={report.docs_seen} chunks={report.chunks_live} embedded={n} "
        f"reused={report.chunks_reused} dead_letters={len(report.dead_letters)}"
    )
    print("| path | seconds | chunks/s |\n|---|---|---|")
    print(f"| ragstream sync (parse+chunk+embed+write) | {ingest_s:.1f} | {n / ingest_s:.1f} |")
    if texts:
        print(f"| encode only (same texts) | {encode_s:.1f} | {len(texts) / encode_s:.1f} |")
        print(f"ratio ingest/encode throughput: {(n / ingest_s) / (len(texts) / encode_s):.3f}")
    print(
        f"RSS after model load: {base.peak:.0f} MiB (anon {base.anon:.0f} + file "
        f"{base.file:.0f}); peak RSS during ingest: {rss_peak:.0f} MiB"
        f"{'' if peak_reset else ' (peak since process start: clear_refs unavailable)'}"
    )
    for line in sampler.memory_lines():
        print(line)


if __name__ == "__main__":
    main()
