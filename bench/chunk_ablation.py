"""Chunking ablation on BEIR SciFact: which chunk settings retrieve best while an
edit still re-embeds about one chunk.

Each config `NAME=MAX/MIN/MODULUS[/hN]` (chunk.max_tokens / min_tokens / boundary_modulus, and
an optional contextual header of N tokens embedded with each chunk) indexes
the whole corpus through the real ingest into its own data dir `<out>/<NAME>/` — a config
can share nothing with another anyway (the chunker settings are in every content hash), and
an eval data dir someone else uses is never touched. Then it evaluates the `--split` queries
(train by default: choices are made on train, never on test) with the harness's four rows,
and runs bench/incremental.py's edit benchmark with the same chunk settings, because bigger
chunks could make an edit re-cut (and re-embed) more than the chunk it is in.

The ingest caps max_tokens at the embedder's sequence length - 2 and min_tokens at half of
that (all-MiniLM-L6-v2: 254 / 127), so the table shows each config as given and as chunked,
and a config that chunks exactly like an earlier one is skipped, not re-measured.

A config ending in `/s` also writes an LLM situating sentence into each chunk's context
(`chunk.situate`). It needs an OpenAI-compatible endpoint, `--generator-url` (and
`--generator-model`): without one the bench refuses to start rather than report a row it did
not measure. Its cost is its own columns: LLM calls and the seconds of the situate step
while indexing (sentences are cached by content hash, so a re-run pays nothing), and the
calls its edits made in the edit benchmark. With the endpoint the eval harness also runs
its query-transform rows for that config (query-time calls, not counted here). SciFact has
5,183 abstracts, one call per chunk: `--slice Q/D` runs every config on the first Q judged
queries of the split, their documents and D distractors instead.

One Markdown table comes out, one line per config, and `<out>/ablation.json`. With `--test`,
the first config (the baseline), the best one (highest hybrid-rrf nDCG@10 among those whose
re-embed ratio is within the issue's 1.1) and the best one whatever its ratio (the trade-off
the lead decides) are also evaluated on the test split, on the same data dirs (nothing is
re-embedded). Re-runs are incremental: a data dir that already
holds its config's index embeds nothing; `--reuse` skips a config whose result is saved.

    nice -n 10 .venv/bin/python bench/chunk_ablation.py [NAME=MAX/MIN/MOD[/hN][/s] ...]
        [--split train] [--test] [--edits 50] [--out bench/out/chunk-ablation] [--reuse]
        [--generator-url URL --generator-model M] [--slice 50/500]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream.core.settings import ChunkSettings, Settings
from ragstream.core.telemetry import install_exporter
from ragstream.eval.beir import beir_subset, index_corpus, load_beir, write_beir
from ragstream.eval.datasets import evaluate_dataset
from ragstream.eval.evaluation import Row, markdown_table
from ragstream.flows.runtime import chunker_for
from ragstream.operators.embed import Embedder, load_embedder
from ragstream.service import ingest
from tests.harness.scifact import SCIFACT

OUT = Path(__file__).resolve().parent / "out" / "chunk-ablation"
DEFAULT_SPECS = ("current=256/32/8", "min128=256/128/8", "min200=256/200/8", "mod32=256/32/32")
MAX_RATIO = 1.1  # the target: re-embedded chunks per changed chunk must stay at most this
PIPELINE_ROW = "hybrid-rrf"  # what `ragstream query` runs: the row a config is chosen by
ROW_NAMES = ("bm25", "dense", "hybrid-rrf", "hybrid-dbsf")
_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+)=(?P<max>\d+)/(?P<min>\d+)/(?P<mod>\d+)(?:/h(?P<header>\d+))?"
    r"(?P<situate>/s)?$"
)


class ConfigResult(BaseModel):
    """Everything measured for one chunk config (saved as `<out>/<name>/ablation.json`)."""

    name: str
    chunk: ChunkSettings  # as given
    effective: ChunkSettings | None = None  # as the chunker runs it (see `effective_chunk`)
    split: str
    queries: int
    docs: int
    chunks: int
    index_s: float  # first run: the whole corpus embedded; a re-run: only the scan
    rows: list[Row]
    edits: int
    changed: int
    re_embedded: int
    llm_calls: int = 0  # situating sentences asked for while indexing (0 when off)
    llm_s: float = 0.0  # … and the seconds spent in the situate step
    edit_llm_calls: int = 0  # … and during the edit benchmark
    test_rows: list[Row] = Field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.re_embedded / max(self.changed, 1)

    def row(self, name: str, test: bool = False) -> Row:
        return next(r for r in (self.test_rows if test else self.rows) if r.name == name)


def parse_spec(spec: str) -> tuple[str, ChunkSettings]:
    """`NAME=MAX/MIN/MODULUS[/hN]` -> (name, validated ChunkSettings); the name is a folder."""
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(
            f"config {spec!r} is not "
            "NAME=MAX_TOKENS/MIN_TOKENS/BOUNDARY_MODULUS[/hHEADER_TOKENS][/s]"
        )
    chunk = ChunkSettings(
        max_tokens=int(m["max"]),
        min_tokens=int(m["min"]),
        boundary_modulus=int(m["mod"]),
        header_tokens=int(m["header"] or 0),
        situate=bool(m["situate"]),
    )
    return m["name"], chunk


def effective_chunk(chunk: ChunkSettings, embedder: Embedder) -> ChunkSettings:
    """The settings the ingest really chunks with: `chunker_for` caps max_tokens at the
    embedder's sequence length - 2 and min_tokens at half of that, so two configs given
    differently can chunk identically (then only the first is measured)."""
    cfg = chunker_for(Settings(chunk=chunk), embedder)
    return ChunkSettings(
        max_tokens=cfg.max_tokens,
        min_tokens=cfg.min_tokens,
        boundary_modulus=cfg.boundary_modulus,
        header_tokens=cfg.header_tokens,
        situate=chunk.situate,
        situate_tokens=chunk.situate_tokens,
    )


def pick_best(results: Sequence[ConfigResult], max_ratio: float = MAX_RATIO) -> ConfigResult:
    """The config with the best pipeline-row nDCG@10 among those that keep edits cheap."""
    cheap = [r for r in results if r.ratio <= max_ratio]
    if not cheap:
        raise ValueError(f"no config keeps the re-embed ratio within {max_ratio}")
    return max(cheap, key=lambda r: r.row(PIPELINE_ROW).ndcg_10)


def markdown_ablation(results: Sequence[ConfigResult]) -> str:
    """One line per config: size of the index, nDCG@10 per row kind, hybrid recall@100,
    and the edit benchmark's re-embed ratio."""
    ndcg = " | ".join(f"{n} nDCG@10" for n in ROW_NAMES)
    lines = [
        f"| config | max/min/mod (effective) | chunks | per abstract | {ndcg} | rrf R@100 "
        "| dbsf R@100 | re-embed ratio | index s | LLM calls (s) | edit LLM calls |",
        "|---|---|---|---|" + "---|" * len(ROW_NAMES) + "---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.effective or r.chunk
        scores = " | ".join(f"{r.row(n).ndcg_10:.4f}" for n in ROW_NAMES)
        lines.append(
            f"| {r.name} | {_triple(r.chunk)} ({_triple(c)}) | {r.chunks} | "
            f"{r.chunks / max(r.docs, 1):.2f} | {scores} | "
            f"{r.row('hybrid-rrf').recall_100:.4f} | {r.row('hybrid-dbsf').recall_100:.4f} | "
            f"{r.ratio:.3f} ({r.re_embedded}/{r.changed}) | {r.index_s:.0f} | "
            f"{_llm(r.chunk, f'{r.llm_calls} ({r.llm_s:.0f})')} | "
            f"{_llm(r.chunk, str(r.edit_llm_calls))} |"
        )
    return "\n".join(lines)


class SituateMeter(SpanExporter):
    """Tallies the `ingest.situate` spans: LLM calls (sentences generated or failed) and the
    seconds the step took. Installed once; `take` returns and resets the tally."""

    def __init__(self) -> None:
        self.calls, self.seconds = 0, 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for sp in spans:
            if sp.name == "ragstream.ingest.situate":
                attrs = sp.attributes or {}
                self.calls += sum(_count(attrs.get(k)) for k in ("generated", "failed"))
                self.seconds += ((sp.end_time or 0) - (sp.start_time or 0)) / 1e9
        return SpanExportResult.SUCCESS

    def take(self) -> tuple[int, float]:
        out, (self.calls, self.seconds) = (self.calls, self.seconds), (0, 0.0)
        return out


METER = SituateMeter()


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def run_config(
    name: str, chunk: ChunkSettings, dataset: Path, out: Path, split: str, edits: int
) -> ConfigResult:
    """Index, evaluate `split`, and run the edit benchmark for one chunk config."""
    from bench.incremental import measure  # the script's own imports need bench/ on the path

    data_dir = out / name
    overrides = settings_overrides(chunk)
    corpus, _, _ = load_beir(dataset, split)
    t0 = time.perf_counter()
    METER.take()
    settings = index_corpus(corpus, data_dir, overrides)
    index_s = time.perf_counter() - t0
    llm_calls, llm_s = METER.take()
    status = ingest.status(settings=settings)
    print(f"[{name}] {status.chunks_live} chunks, indexed in {index_s:.0f} s", flush=True)
    report = evaluate_dataset(dataset, data_dir, split, settings_overrides=overrides)
    print(f"[{name}] {split}: {markdown_table(report.rows)}", flush=True)
    with _generator_env(chunk):
        inc = measure(edits, chunk=chunk)
    # its first index is a fresh data dir: one call per chunk it embeds, then the edits'
    edit_llm_calls = METER.take()[0] - (inc.initial_embedded if chunk.situate else 0)
    print(f"[{name}] edits: {inc.re_embedded} re-embedded / {inc.changed} changed", flush=True)
    return ConfigResult(
        name=name,
        chunk=chunk,
        split=split,
        queries=report.queries,
        docs=status.docs,
        chunks=status.chunks_live,
        index_s=index_s,
        rows=report.rows,
        edits=inc.edits,
        changed=inc.changed,
        re_embedded=inc.re_embedded,
        llm_calls=llm_calls,
        llm_s=llm_s,
        edit_llm_calls=edit_llm_calls,
    )


def _llm(chunk: ChunkSettings, figure: str) -> str:
    return figure if chunk.situate else "-"


GENERATOR: dict[str, str] = {}  # generator settings of `--generator-*`, for /s configs only


def use_generator(url: str, model: str | None, api_key: str | None) -> None:
    """The endpoint of the /s configs; from now on the situate step's calls are counted."""
    GENERATOR.update(base_url=url, **({"model": model} if model else {}))
    GENERATOR.update({"api_key": api_key} if api_key else {})
    install_exporter(METER)


def settings_overrides(chunk: ChunkSettings) -> dict[str, Any]:
    """A config's settings. Only a situate config gets the endpoint: with one configured, the
    eval harness also runs its query-transform rows (extra LLM calls, at query time)."""
    return {"chunk": chunk.model_dump()} | ({"generator": GENERATOR} if chunk.situate else {})


@contextmanager
def _generator_env(chunk: ChunkSettings) -> Iterator[None]:
    """The edit benchmark builds its own `Settings()`: it sees the endpoint through the
    environment, and only while a situate config runs it."""
    names = {f"RAGSTREAM_GENERATOR__{k.upper()}": v for k, v in GENERATOR.items()}
    saved = {n: os.environ.get(n) for n in names}
    if chunk.situate:
        os.environ.update(names)
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


def write_slice(dataset: Path, split: str, n_queries: int, n_distractors: int, root: Path) -> Path:
    """The first `n_queries` judged queries of `split`, their documents and `n_distractors`
    others, as a BEIR folder under `root` (`ragstream.eval.beir.beir_subset`): a situate run's LLM
    bill is one call per chunk, so it is measured on a slice, every config on the same one."""
    subset = beir_subset(*load_beir(dataset, split), n_queries, n_distractors)
    return write_beir(root / "dataset", *subset, split=split)


def _triple(c: ChunkSettings) -> str:
    header = f"/h{c.header_tokens}" if c.header_tokens else ""
    situate = "/s" if c.situate else ""
    return f"{c.max_tokens}/{c.min_tokens}/{c.boundary_modulus}{header}{situate}"


def _save(result: ConfigResult, out: Path) -> None:
    path = out / result.name / "ablation.json"
    path.write_text(result.model_dump_json(by_alias=True, indent=2) + "\n", encoding="utf-8")


def _saved(name: str, chunk: ChunkSettings, split: str, out: Path) -> ConfigResult | None:
    path = out / name / "ablation.json"
    if not path.is_file():
        return None
    saved = ConfigResult.model_validate_json(path.read_text(encoding="utf-8"))
    return saved if saved.chunk == chunk and saved.split == split else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=list(DEFAULT_SPECS), help="NAME=MAX/MIN/MOD")
    ap.add_argument("--dataset", type=Path, default=SCIFACT)
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--edits", type=int, default=50, help="edits of the re-embed benchmark")
    ap.add_argument("--test", action="store_true", help="test split for best + baseline")
    ap.add_argument("--reuse", action="store_true", help="keep a config's saved result")
    ap.add_argument("--generator-url", help="OpenAI-compatible endpoint (needed by /s configs)")
    ap.add_argument("--generator-model", help="its model (default: generator.model)")
    ap.add_argument("--generator-key", help="its API key, if it wants one")
    ap.add_argument("--slice", help="Q/D: Q judged queries, their docs + D distractors")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("ragstream.eval.evaluation").setLevel(logging.INFO)
    specs = [parse_spec(s) for s in args.configs]
    if len({n for n, _ in specs}) != len(specs):
        raise SystemExit("config names must be distinct (each is a data dir)")
    situated = [n for n, c in specs if c.situate]
    if situated and not args.generator_url:
        raise SystemExit(
            f"configs {situated} write an LLM situating sentence per chunk: give "
            "--generator-url (an OpenAI-compatible endpoint), or leave them out (not measured)"
        )
    if args.generator_url:
        use_generator(args.generator_url, args.generator_model, args.generator_key)
    if args.slice:  # its own out dir: the full corpus' data dirs are never shrunk to it
        if args.test:
            raise SystemExit("--slice slices one split: run --split test --slice Q/D instead")
        q, d = (int(x) for x in args.slice.split("/"))
        args.out = args.out / f"slice-{args.dataset.name}-{args.split}-{q}-{d}"
        args.dataset = write_slice(args.dataset, args.split, q, d, args.out)
        print(f"slice of {q} queries, their documents and {d} others: {args.dataset}")
    embedder = load_embedder(Settings().embedder)  # what a fresh data dir is built with
    results: list[ConfigResult] = []
    for name, chunk in specs:
        effective = effective_chunk(chunk, embedder)
        twin = next((r.name for r in results if r.effective == effective), None)
        if twin is not None:
            print(f"[{name}] chunks exactly like {twin} ({_triple(effective)}): skipped")
            continue
        saved = _saved(name, chunk, args.split, args.out) if args.reuse else None
        result = saved or run_config(name, chunk, args.dataset, args.out, args.split, args.edits)
        result.effective = effective
        _save(result, args.out)
        results.append(result)
    print(
        f"\n### Chunking ablation: {args.dataset.name} {args.split}, {results[0].queries} queries"
    )
    print(markdown_ablation(results))
    if args.test and args.split != "test":
        best, unbounded = pick_best(results), pick_best(results, max_ratio=float("inf"))
        for result in {r.name: r for r in (results[0], best, unbounded)}.values():
            if not result.test_rows:
                overrides = settings_overrides(result.chunk)
                report = evaluate_dataset(
                    args.dataset, args.out / result.name, "test", settings_overrides=overrides
                )
                result.test_rows = report.rows
                _save(result, args.out)
            print(f"\n### {result.name} on the test split\n\n{markdown_table(result.test_rows)}")
        print(f"\nbest on {args.split} (re-embed ratio <= {MAX_RATIO}): {best.name}")
        print(f"best on {args.split} whatever edits cost: {unbounded.name}")
    summary = [r.model_dump(mode="json", by_alias=True) for r in results]
    (args.out / "ablation.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
