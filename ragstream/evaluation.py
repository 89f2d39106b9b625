"""Retrieval evaluation on BEIR-format datasets (`ragstream eval`, bench/eval_scifact.py).

The point is to measure the system a user runs, not a re-implementation of it: the corpus is
written as Markdown files and indexed by the real ingest (`api.sync`: parse, chunk, embed,
both stores), and queries go through the real `Retriever` (both legs, real fusion, optional
real reranker). The ingest is incremental, so re-running on the same data dir embeds nothing;
only files whose content changed are rewritten, so their fingerprints (and the index) stay.

Metrics come from pytrec_eval (trec_eval's own code), never hand-rolled: nDCG@10, recall@10,
recall@100, and MRR@10 (reciprocal rank over the top-10 run only, as BEIR/MS MARCO define it).
The index holds chunks but qrels judge documents, so each ranking is collapsed to documents:
a document ranks where its best (first) chunk ranks.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
import pytrec_eval
from pydantic import BaseModel, ConfigDict, Field

from core.answers import DEFAULT_RRF_K
from core.settings import Settings
from query.rerank import load_reranker, rerank
from query.retrieve import Candidate, Fusion, RetrievalResult, Retriever
from ragstream import api

log = logging.getLogger(__name__)

Corpus = dict[str, dict[str, str]]  # doc id -> {"title", "text"}
Queries = dict[str, str]  # query id -> text
Qrels = dict[str, dict[str, int]]  # query id -> doc id -> graded relevance
DEFAULT_DEPTH = 500  # chunks per leg: abstracts split into ~4-5 chunks, recall@100 needs 100 docs
RERANK_DEPTH = 100  # fused chunks the cross-encoder re-scores (the rest keep fused order)
_MEASURES = {"ndcg_cut.10", "recall.10", "recall.100"}


class EvalConfig(BaseModel):
    """One retrieval variant: a single leg (`leg`) or both fused (`fusion`), maybe reranked."""

    model_config = ConfigDict(frozen=True)

    name: str
    fusion: Literal["rrf", "dbsf"] = "rrf"
    leg: Literal["dense", "lexical"] | None = None
    rerank: bool = False
    rrf_k: int = DEFAULT_RRF_K  # RRF's k (DESIGN §8: constants differ wildly between systems)


class Row(BaseModel):
    """One ablation row; serialized with the issue's metric keys (`ndcg@10`, ...)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    name: str
    ndcg_10: float = Field(alias="ndcg@10")
    recall_10: float = Field(alias="recall@10")
    recall_100: float = Field(alias="recall@100")
    mrr_10: float = Field(alias="mrr@10")
    p50_ms: float
    p95_ms: float


class EvalReport(BaseModel):
    """What `ragstream eval --json` prints and saves to `<data_dir>/eval/<split>.json`."""

    dataset: str
    split: str
    queries: int
    depth: int
    rows: list[Row]

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(by_alias=True, indent=indent)


def default_configs(settings: Settings) -> list[EvalConfig]:
    """Both legs alone, both fusions, and `+rerank` variants only if a reranker is set:
    with none configured a rerank row would just repeat its fused row."""
    configs = [
        EvalConfig(name="bm25", leg="lexical"),
        EvalConfig(name="dense", leg="dense"),
        EvalConfig(name="hybrid-rrf", fusion="rrf"),
        EvalConfig(name="hybrid-dbsf", fusion="dbsf"),
    ]
    spec = (settings.query.reranker or "").strip().lower()
    if spec not in {"", "none", "off", "false", "0"}:  # what `load_reranker` treats as off
        configs += [
            EvalConfig(name="hybrid-rrf+rerank", fusion="rrf", rerank=True),
            EvalConfig(name="hybrid-dbsf+rerank", fusion="dbsf", rerank=True),
        ]
    return configs


def load_beir(dataset_dir: str | Path, split: str = "test") -> tuple[Corpus, Queries, Qrels]:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv (with header) of a BEIR dataset."""
    root = Path(dataset_dir)
    corpus: Corpus = {}
    with (root / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in filter(str.strip, fh):
            d = json.loads(line)
            corpus[str(d["_id"])] = {"title": d.get("title") or "", "text": d.get("text") or ""}
    queries: Queries = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in filter(str.strip, fh):
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: Qrels = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        next(rows, None)  # header: query-id, corpus-id, score
        for row in rows:
            if row:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return corpus, queries, qrels


def markdown_doc(doc: Mapping[str, str]) -> str:
    """A BEIR document as the Markdown a user would keep: the title as the heading."""
    title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
    return f"# {title}\n\n{text}\n" if title else f"{text}\n"


def index_corpus(
    corpus: Corpus, data_dir: str | Path, settings_overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Write `<data_dir>/corpus/<id>.md` and run the real ingest over that folder.

    Unchanged files are not rewritten (their mtime is the ingest's change signal), files of
    ids no longer in the corpus are removed, so the index always equals this corpus."""
    data = Path(data_dir)
    folder = data / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for doc_id, doc in corpus.items():
        if not doc_id or "/" in doc_id or "\\" in doc_id or doc_id.startswith("."):
            raise ValueError(f"document id {doc_id!r} cannot be a file name")
        path = folder / f"{doc_id}.md"
        wanted.add(path.name)
        text = markdown_doc(doc)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for stale in folder.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    settings = Settings(**{**(settings_overrides or {}), "data_dir": data}).with_paths([folder])
    report = api.sync([folder], settings=settings, allow_mass_delete=True)
    log.info("indexed %d docs (%d chunks embedded)", report.docs_seen, report.chunks_embedded)
    if report.dead_letters:
        log.warning("%d documents could not be indexed", len(report.dead_letters))
    return settings


def doc_key(doc_id: str) -> str:
    """The BEIR id of a chunk's document: the file stem of `<source>:<path>`."""
    return PurePosixPath(doc_id.split(":", 1)[-1]).stem


def aggregate(ranked: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Chunks (doc_id, score) in rank order -> documents in rank order, each scored by its
    best (first) chunk; later chunks of the same document add nothing."""
    seen: dict[str, float] = {}
    for doc_id, score in ranked:
        seen.setdefault(doc_key(doc_id), score)
    return list(seen.items())


def ranked_chunks(
    config: EvalConfig, result: RetrievalResult, reranked: Sequence[Candidate] | None = None
) -> list[tuple[str, float]]:
    """(doc_id, score) in the order this config ranks chunks: one leg's own order (only
    the chunks that leg returned), the fused order, or the reranked head + fused tail."""
    if config.leg is not None:
        leg = config.leg
        mine = [c for c in result.candidates if leg in c.ranks]
        mine.sort(key=lambda c: c.ranks[leg])
        return [(c.chunk.doc_id, c.scores.get(leg, 0.0)) for c in mine]
    order = list(reranked) if reranked is not None else result.candidates
    return [(c.chunk.doc_id, c.score) for c in order]


def _latency(config: EvalConfig, result: RetrievalResult) -> float:
    """What this variant alone costs: one leg's search (+ the query embedding for dense),
    or the whole retrieve for a fused variant."""
    t = result.timings_ms
    return {"lexical": t["lexical"], "dense": t["embed"] + t["dense"]}.get(
        config.leg or "", t["total"]
    )


def run_eval(
    settings: Settings,
    queries: Queries,
    qrels: Qrels,
    configs: Sequence[EvalConfig] | None = None,
    depth: int = DEFAULT_DEPTH,
) -> list[Row]:
    """Every query that has qrels, through the real retriever, scored per config."""
    configs = list(configs) if configs is not None else default_configs(settings)
    qids = [q for q in queries if q in qrels]
    if not qids:
        raise ValueError("no query has relevance judgments in this split")
    fused: set[tuple[Fusion, int]] = {(c.fusion, c.rrf_k) for c in configs if c.leg is None}
    calls: list[tuple[Fusion, int]] = sorted(fused) if fused else [("rrf", 60)]  # any: both legs
    reranker = load_reranker(settings.query.reranker) if any(c.rerank for c in configs) else None
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {c.name: {} for c in configs}
    latency: dict[str, list[float]] = {c.name: [] for c in configs}
    with Retriever.open(settings) as retriever:
        retriever.retrieve("warm-up", n=depth)  # first call pays one-off model/store costs
        for qid in qids:
            text = queries[qid]
            results = {(f, k): retriever.retrieve(text, n=depth, fusion=f, k=k) for f, k in calls}
            for config in configs:
                result = results.get((config.fusion, config.rrf_k), results[calls[0]])
                ms, head = _latency(config, result), None
                if config.rerank:
                    t = time.perf_counter()
                    top = rerank(text, result.candidates[:RERANK_DEPTH], reranker, RERANK_DEPTH)
                    ms += (time.perf_counter() - t) * 1000.0
                    rescored = [r.candidate.model_copy(update={"score": r.score}) for r in top]
                    head = rescored + result.candidates[RERANK_DEPTH:]
                runs[config.name][qid] = aggregate(ranked_chunks(config, result, head))
                latency[config.name].append(ms)
    return [score_run(c.name, runs[c.name], qrels, latency[c.name]) for c in configs]


def score_run(
    name: str, run: Mapping[str, Sequence[tuple[str, float]]], qrels: Qrels, ms: Sequence[float]
) -> Row:
    """pytrec_eval metrics averaged over the run's queries (a query it cannot score, e.g.
    with nothing retrieved, counts as 0), plus latency percentiles."""
    judged = {q: qrels[q] for q in run}
    # trec_eval re-sorts by score and breaks ties by doc id, which would reorder a tie the
    # system ranked; rank-derived scores hand it exactly the system's order
    full = {
        q: {d: float(len(docs) - i) for i, (d, _) in enumerate(docs)} for q, docs in run.items()
    }
    top10 = {q: dict(list(docs.items())[:10]) for q, docs in full.items()}
    per_q = pytrec_eval.RelevanceEvaluator(judged, _MEASURES).evaluate(full)
    rr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top10)

    def mean(values: Mapping[str, Mapping[str, float]], key: str) -> float:
        return sum(values.get(q, {}).get(key, 0.0) for q in run) / max(1, len(run))

    return Row.model_validate(
        {
            "name": name,
            "ndcg@10": mean(per_q, "ndcg_cut_10"),
            "recall@10": mean(per_q, "recall_10"),
            "recall@100": mean(per_q, "recall_100"),
            "mrr@10": mean(rr, "recip_rank"),
            "p50_ms": float(np.percentile(ms, 50)) if ms else 0.0,
            "p95_ms": float(np.percentile(ms, 95)) if ms else 0.0,
        }
    )


def markdown_table(rows: Sequence[Row]) -> str:
    """The ablation table as GitHub Markdown."""
    lines = [
        "| config | nDCG@10 | recall@10 | recall@100 | MRR@10 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.ndcg_10:.4f} | {r.recall_10:.4f} | {r.recall_100:.4f} | "
            f"{r.mrr_10:.4f} | {r.p50_ms:.1f} | {r.p95_ms:.1f} |"
        )
    return "\n".join(lines)


def evaluate_dataset(
    dataset_dir: str | Path,
    data_dir: str | Path,
    split: str = "test",
    *,
    limit_queries: int | None = None,
    depth: int = DEFAULT_DEPTH,
    settings_overrides: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Load, index (incrementally), evaluate, and save `<data_dir>/eval/<split>.json`."""
    corpus, queries, qrels = load_beir(dataset_dir, split)
    judged = [q for q in queries if q in qrels]
    judged = judged[:limit_queries]  # None keeps all
    settings = index_corpus(corpus, data_dir, settings_overrides)
    rows = run_eval(settings, {q: queries[q] for q in judged}, qrels, depth=depth)
    report = EvalReport(
        dataset=Path(dataset_dir).name, split=split, queries=len(judged), depth=depth, rows=rows
    )
    out = Path(data_dir) / "eval" / f"{split}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report.to_json(indent=2) + "\n", encoding="utf-8")
    return report
