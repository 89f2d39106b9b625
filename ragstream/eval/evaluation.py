"""Retrieval scoring and the eval reports: the ablation rows over an open retriever
(`run_eval`, also the promote gate's score of a reindex side), the report `ragstream eval`
saves and prints, and the saved reports a served index lists.

Everything here takes an index that is already open: opening one, indexing a dataset and
running each mode is `eval.datasets`. Queries go through the real `Retriever` (both legs, real
fusion, optional real reranker) under each config (`EvalConfig`): a single leg, both fused by
RRF or DBSF, reranked, or with a query transform (`hybrid-rrf+keywords`, `+hyde`,
`+decompose`: rows that exist only when an OpenAI-compatible endpoint is configured, since
without one there is nothing to write them).

Metrics come from pytrec_eval (trec_eval's own code), never hand-rolled: nDCG@10, recall@10,
recall@100, and MRR@10 (reciprocal rank over the top-10 run only, as BEIR/MS MARCO define it).
The index holds chunks but qrels judge documents, so each ranking is collapsed to documents:
a document ranks where its best (first) chunk ranks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytrec_eval
from pydantic import BaseModel, ConfigDict, Field

from ragstream.core.answers import DEFAULT_RRF_K, QueryRequest
from ragstream.core.settings import Settings
from ragstream.eval.answer_ablation import AnswerAblation, markdown_answers
from ragstream.eval.answer_eval import (
    AbstainReport,
    GoldReport,
    latency,
    markdown_abstain,
    markdown_gold,
)
from ragstream.eval.beir import Qrels, Queries, doc_key
from ragstream.eval.failures import markdown_failures
from ragstream.eval.kinds import FrontierPoint
from ragstream.eval.squad_eval import SquadReport, markdown_squad
from ragstream.query.rerank import is_tuned, load_reranker, rerank, rerank_depth
from ragstream.query.retrieve import Candidate, Fusion, RetrievalResult, Retriever
from ragstream.query.transforms import (
    TRANSFORMS,
    QueryTransformer,
    Transform,
    enabled_transforms,
    retrieve_transformed,
)

log = logging.getLogger(__name__)

DEFAULT_DEPTH = 500  # chunks per leg: abstracts split into ~4-5 chunks, recall@100 needs 100 docs
DEFAULT_K = QueryRequest.model_fields["k"].default  # chunks an answer is generated from
Mode = Literal["retrieval", "gold", "abstain", "answers"]
MODES: tuple[Mode, ...] = ("retrieval", "gold", "abstain", "answers")
_MEASURES = {"ndcg_cut.10", "recall.10", "recall.100"}


class EvalConfig(BaseModel):
    """One retrieval variant: a single leg (`leg`) or both fused (`fusion`), maybe reranked."""

    model_config = ConfigDict(frozen=True)

    name: str
    fusion: Literal["rrf", "dbsf"] = "rrf"
    leg: Literal["dense", "lexical"] | None = None
    rerank: bool = False
    rrf_k: int = DEFAULT_RRF_K  # RRF's k: explicit, and evaluated (docs/architecture.md, "Fusion")
    transforms: tuple[Transform, ...] = ()  # query transforms (need an LLM endpoint)


class Row(BaseModel):
    """One ablation row; serialized with the usual metric keys (`ndcg@10`, ...)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    name: str
    ndcg_10: float = Field(alias="ndcg@10")
    recall_10: float = Field(alias="recall@10")
    recall_100: float = Field(alias="recall@100")
    mrr_10: float = Field(alias="mrr@10")
    p50_ms: float
    p95_ms: float


class EvalReport(BaseModel):
    """What `ragstream eval --json` prints and saves to `<data_dir>/eval/<split>[.<mode>].json`.

    `rows` (retrieval mode) are the ablation rows; `failures` maps each failure class to its
    count for the `failure_config` row; `gold` / `abstain` hold the answer-level modes and
    `assembly` the `answers` mode's ablation; `details_file` names the per-query JSON (failing
    queries, not accepted, not refused, or where the assembly rows disagree)."""

    dataset: str
    split: str
    mode: Mode = "retrieval"
    queries: int
    depth: int
    k: int = DEFAULT_K
    answers: bool = False
    rows: list[Row] = Field(default_factory=list)
    failure_config: str | None = None
    failures: dict[str, int] | None = None
    gold: GoldReport | None = None
    abstain: AbstainReport | None = None
    assembly: AnswerAblation | None = None
    squad: SquadReport | None = None  # a SQuAD-format set, --mode answers / abstain
    # --mode answers on a BEIR set: the decision's frontier over the judged questions read
    # with their gold documents and with them taken out (`eval.kinds.frontier`)
    frontier: list[FrontierPoint] | None = None
    details_file: str | None = None
    # retrieval mode: each stage's latency per query (ms) of the plain hybrid retrieve, plus
    # the reranker's when a row reranks (the Quality page and `--plot` draw their spread)
    stage_ms: dict[str, list[float]] | None = None
    created_at: float | None = None

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(by_alias=True, indent=indent, exclude_none=True)


def _reranker_on(settings: Settings) -> bool:
    spec = (settings.query.reranker or "").strip().lower()
    return spec not in {"", "none", "off", "false", "0"}  # what `load_reranker` treats as off


def fused_config(
    fusion: Fusion = "rrf",
    *,
    rerank: bool = False,
    transforms: Iterable[Transform] = (),
    tuned: bool = False,
) -> EvalConfig:
    """A fused config named for what it changes: `hybrid-rrf+keywords`, `hybrid-dbsf+rerank`,
    `hybrid-rrf+rerank(tuned)` (the reranker `ragstream tune` trained for this index)."""
    ts = tuple(t for t in TRANSFORMS if t in set(transforms))
    reranked = ("+rerank(tuned)" if tuned else "+rerank") if rerank else ""
    name = f"hybrid-{fusion}" + "".join(f"+{t}" for t in ts) + reranked
    return EvalConfig(name=name, fusion=fusion, rerank=rerank, transforms=ts)


def pipeline_config(settings: Settings) -> EvalConfig:
    """The config `ragstream query` runs with these settings: the failure report's subject."""
    return fused_config(
        "rrf",
        rerank=_reranker_on(settings),
        transforms=enabled_transforms(settings.query),
        tuned=is_tuned(settings.query.reranker),
    )


def default_configs(settings: Settings) -> list[EvalConfig]:
    """Both legs alone, both fusions, `+rerank` variants only if a reranker is set (with
    none configured a rerank row would just repeat its fused row), one row per query
    transform only if an LLM endpoint is configured (none can run without one), and the
    pipeline config of these settings if it is none of those."""
    configs = [
        EvalConfig(name="bm25", leg="lexical"),
        EvalConfig(name="dense", leg="dense"),
        fused_config("rrf"),
        fused_config("dbsf"),
    ]
    if _reranker_on(settings):
        tuned = is_tuned(settings.query.reranker)
        configs += [fused_config(f, rerank=True, tuned=tuned) for f in ("rrf", "dbsf")]
    if settings.generator.base_url:
        configs += [fused_config("rrf", transforms=[t]) for t in TRANSFORMS]
    pipeline = pipeline_config(settings)
    if pipeline.name not in {c.name for c in configs}:
        configs.append(pipeline)
    return configs


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
    *,
    retriever: Retriever,
) -> list[Row]:
    """Every query that has qrels, through `retriever` (an open one, left open: the served
    index's, or one pinned to a reindex side), scored per config."""
    configs = list(configs) if configs is not None else default_configs(settings)
    return run_configs(settings, retriever, queries, qrels, configs, depth).rows


def _judged(queries: Queries, qrels: Qrels) -> list[str]:
    qids = [q for q in queries if q in qrels]
    if not qids:
        raise ValueError("no query has relevance judgments in this split")
    return qids


@dataclass(frozen=True)
class RunResult:
    """What `run_configs` measured: the rows, one config's chunk rankings, stage latencies."""

    rows: list[Row]
    kept: dict[str, list[str]]  # qid -> chunk ranking (BEIR doc ids) of the `keep` config
    stage_ms: dict[str, list[float]]  # stage -> per-query latency of the plain retrieve


def run_configs(
    settings: Settings,
    retriever: Retriever,
    queries: Queries,
    qrels: Qrels,
    configs: Sequence[EvalConfig],
    depth: int,
    keep: str | None = None,
) -> RunResult:
    """Rows per config, plus (for config `keep`) each query's chunk ranking as BEIR doc ids:
    the failure report needs chunk ranks, the metrics only document ranks; and each stage's
    latency per query."""
    qids = _judged(queries, qrels)
    plain = sorted({(c.fusion, c.rrf_k) for c in configs if c.leg is None and not c.transforms})
    plain = plain or [("rrf", DEFAULT_RRF_K)]  # the single-leg configs still need both legs
    transformed = sorted({(c.fusion, c.rrf_k, c.transforms) for c in configs if c.transforms})
    transformers = {t: QueryTransformer.from_settings(settings, t) for _, _, t in transformed}
    reranker = load_reranker(settings.query.reranker) if any(c.rerank for c in configs) else None
    # as the engine: the reranked head, the rest in fused order
    depth_r = rerank_depth(reranker, settings.query.rerank_depth, 1) or depth
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {c.name: {} for c in configs}
    latency_ms: dict[str, list[float]] = {c.name: [] for c in configs}
    kept: dict[str, list[str]] = {}
    stage_ms: dict[str, list[float]] = {}
    retriever.retrieve("warm-up", n=depth)  # first call pays one-off model/store costs
    for qid in qids:
        text = queries[qid]
        results: dict[tuple[Fusion, int, tuple[Transform, ...]], RetrievalResult] = {
            (f, k, ()): retriever.retrieve(text, n=depth, fusion=f, k=k) for f, k in plain
        }
        for stage, ms in results[(*plain[0], ())].timings_ms.items():
            stage_ms.setdefault(stage, []).append(round(ms, 3))
        for f, k, t in transformed:
            results[(f, k, t)] = retrieve_transformed(
                retriever, text, transformers[t], n=depth, fusion=f, k=k
            )
        for config in configs:
            key = (config.fusion, config.rrf_k, config.transforms)
            result = results[(*plain[0], ())] if config.leg is not None else results[key]
            ms, head = _latency(config, result), None
            if config.rerank:
                t0 = time.perf_counter()
                top = rerank(text, result.candidates[:depth_r], reranker, depth_r)
                rerank_ms = (time.perf_counter() - t0) * 1000.0
                ms += rerank_ms
                stage_ms.setdefault(f"rerank ({config.name})", []).append(round(rerank_ms, 3))
                rescored = [r.candidate.model_copy(update={"score": r.score}) for r in top]
                head = rescored + result.candidates[depth_r:]
            chunks = ranked_chunks(config, result, head)
            if config.name == keep:
                kept[qid] = [doc_key(d) for d, _ in chunks]
            runs[config.name][qid] = aggregate(chunks)
            latency_ms[config.name].append(ms)
    rows = [score_run(c.name, runs[c.name], qrels, latency_ms[c.name]) for c in configs]
    return RunResult(rows, kept, stage_ms)


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
            "p50_ms": latency(ms)[0],
            "p95_ms": latency(ms)[1],
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


def markdown_report(report: EvalReport) -> str:
    """Everything a report shows as Markdown: the mode's table(s), then where details are."""
    if report.squad is not None:
        body = markdown_squad(report.squad)
    elif report.gold is not None:
        body = markdown_gold(report.gold)
    elif report.abstain is not None:
        body = markdown_abstain(report.abstain)
    elif report.assembly is not None:
        body = markdown_answers(report.assembly) + markdown_frontier(report.frontier or [])
    else:
        body = markdown_table(report.rows)
        if report.failures is not None and report.failure_config is not None:
            failures = markdown_failures(
                report.failures,
                report.queries,
                report.failure_config,
                report.k,
                report.depth,
                report.answers,
            )
            body += "\n\n" + failures
    return body + (f"\n\nper-query details: {report.details_file}" if report.details_file else "")


def markdown_frontier(points: Sequence[FrontierPoint]) -> str:
    """The frontier as a table: which `query.answerable.decision_floor` keeps which share of
    the answerable questions answered, and what it refuses of the same questions with their
    gold documents taken out."""
    if not points:
        return ""
    lines = [
        "",
        "",
        "The decision's frontier (the same questions, their gold documents taken out of the "
        "candidates): set `query.answerable.decision_floor` to the floor of the share to keep.",
        "",
        "| answerable answered | gold-removed refused | decision_floor |",
        "|---|---|---|",
    ]
    lines += [f"| {p.answered:.0%} | {p.refused:.1%} | {p.decision_floor:.4f} |" for p in points]
    return "\n".join(lines)


def save_report(
    report: EvalReport, data_dir: str | Path, split: str, mode: Mode, details: Any
) -> EvalReport:
    """Write `report` to `<data_dir>/eval/<split>.json` (retrieval) or `<split>.<mode>.json`,
    its per-query `details` beside it in `<split>.<mode>.details.json`; the report, stamped."""
    folder = Path(data_dir) / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    stem = split if mode == "retrieval" else f"{split}.{mode}"
    details_path = folder / f"{split}.{mode}.details.json"
    details_path.write_text(json.dumps(details, indent=2) + "\n", encoding="utf-8")
    report.details_file = str(details_path)
    report.created_at = time.time()
    (folder / f"{stem}.json").write_text(report.to_json(indent=2) + "\n", encoding="utf-8")
    return report


def saved_reports(data_dir: str | Path) -> list[tuple[str, EvalReport]]:
    """The reports `save_report` wrote under `<data_dir>/eval/`, newest first, as
    (file name, report); per-query details files and unreadable files are left out."""
    folder = Path(data_dir) / "eval"
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        if path.name.endswith(".details.json"):
            continue
        try:
            report = EvalReport.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("skipping eval report %s: %s", path, exc)
            continue
        found.append((report.created_at or path.stat().st_mtime, path.name, report))
    found.sort(key=lambda f: f[0], reverse=True)
    return [(name, report) for _, name, report in found]
