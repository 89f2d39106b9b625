"""Ingest throughput vs raw encode throughput, measured side by side in one run.

Writes N SciFact abstracts as Markdown files, runs the real sync flow into a fresh data
dir (bytewax + docling + chunker + MiniLM + Qdrant Edge + tantivy), then encodes the very
same chunk texts with the bare SentenceTransformer, and prints chunks/s of both and the
ratio (target >= 0.85).

Memory (target: < 1 GiB beyond the model per 100k chunks): resident set size right after
the model is loaded (interpreter + libraries + model) and the peak RSS during the sync, from
/proc/self/status (the peak is reset after the model load through /proc/self/clear_refs, so
loading the model never counts as ingest). Most of the difference is fixed (docling,
bytewax, encode activations, store buffers), so the peak is also sampled after every
document and printed after each flow batch; the 100k figure extrapolates the growth per
chunk over the second half of the run. It is an extrapolation: growth per chunk falls with
size (the curve is printed so a reader can judge); only an ingest of 100k chunks measures it.

    .venv/bin/python bench/ingest.py [--docs 2000]
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _scifact import corpus, write_markdown

from core.models import DocOutcome
from core.settings import Settings
from flows.runtime import open_runtime
from operators.embed import load_embedder
from ragstream import api


def rss_mib(field: str) -> float:
    """`VmRSS` (now) or `VmHWM` (peak) of this process, MiB; ru_maxrss if /proc is absent."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else float("nan")


def reset_peak_rss() -> bool:
    """Make VmHWM restart from the current RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakSampler:
    """Peak RSS after each document's outcome, against the chunks written so far."""

    def __init__(self) -> None:
        self.chunks = 0
        self.samples: list[tuple[int, int, float]] = []  # (docs, chunks, peak MiB)

    def __call__(self, outcome: DocOutcome) -> None:
        self.chunks += outcome.chunks_live
        self.samples.append((len(self.samples) + 1, self.chunks, rss_mib("VmHWM")))

    def memory_lines(self, rss_model: float, batch_docs: int) -> list[str]:
        docs, chunks, peak = self.samples[-1]
        ends = [x for x in self.samples if x[0] % batch_docs == 0 and x[0] < docs]
        series = ", ".join(f"{c}: {p - rss_model:.0f}" for _, c, p in [*ends, self.samples[-1]])
        lines = [
            f"ingest beyond the model: {peak - rss_model:.0f} MiB peak for {chunks} chunks",
            f"peak beyond the model after each flow batch (chunks: MiB): {series}",
        ]
        _, c_half, p_half = self.samples[len(self.samples) // 2]
        if chunks <= c_half or not ends:
            return [*lines, f"(per 100k chunks: needs more than {batch_docs} docs)"]
        slope = (peak - p_half) / (chunks - c_half)  # MiB per chunk, second half of the run
        at_100k = peak - rss_model + slope * max(100_000 - chunks, 0)
        linear = (peak - rss_model) * 100_000 / chunks
        return [
            *lines,
            f"extrapolated to 100k chunks: {at_100k / 1024:.2f} GiB beyond the model "
            f"(this peak + {slope * 1024:.1f} KiB per further chunk, the growth over the "
            f"second half of this run; scaling the whole peak linearly: {linear / 1024:.1f} GiB)",
        ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scifact"
        write_markdown(corpus(args.docs), folder)
        settings = Settings(data_dir=Path(tmp) / "data").with_paths([folder])
        embedder = load_embedder(settings.embedder)  # loaded once, outside both timings
        rss_model = rss_mib("VmRSS")
        peak_reset = reset_peak_rss()
        sampler = PeakSampler()
        t0 = time.perf_counter()
        report = api.sync([folder], settings=settings, on_outcome=sampler)
        ingest_s = time.perf_counter() - t0
        rss_peak = rss_mib("VmHWM")
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
    print(
        f"RSS after model load: {rss_model:.0f} MiB; peak RSS during ingest: {rss_peak:.0f} MiB"
        f"{'' if peak_reset else ' (peak since process start: clear_refs unavailable)'}"
    )
    for line in sampler.memory_lines(rss_model, settings.ingest_batch_docs):
        print(line)


if __name__ == "__main__":
    main()
