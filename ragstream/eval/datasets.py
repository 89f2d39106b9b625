"""Evaluating a dataset end to end (`ragstream eval`, bench/eval_scifact.py): its corpus
indexed through the real ingest, the index opened as every other face opens it
(`eval.opened`), the mode run and the report saved.

The point is to measure the system a user runs, not a re-implementation of it: the corpus is
written as Markdown files and indexed by the real ingest (`eval.beir.index_corpus`, what
`ragstream sync` runs: parse, chunk, embed, both stores), and queries go through the served
index's engine and its retriever. The ingest is incremental, so re-running on the same data
dir embeds nothing: only files whose content changed are rewritten, so the other files'
fingerprints (and their chunks in the index) stay.

Beside the ablation rows (`eval.evaluation`), every retrieval run classifies each failing
query by the first stage that broke (`failures`): `not_retrieved@N` (no relevant document
among the N chunks per leg of the pipeline configuration), `below_k` (retrieved, but not in
the top k chunks that go to the answer), and, with `answers=True` (the whole answer path per
query: slower, so off by default), `refused_wrongly` (refused though a relevant document was
in the context) and `unsupported_answer` (answered, but verification found the citations do
not support it). `--mode gold|abstain` runs the answer-level checks of
`ragstream.eval.answer_eval` instead, and `--mode answers` the assembly ablation of
`ragstream.eval.answer_ablation` (measured on answers) with the decision's frontier. A SQuAD
2.0-format set is read with `--mode answers` or `--mode abstain` only, through
`ragstream.eval.squad_eval`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragstream.core.settings import Settings
from ragstream.eval import kinds
from ragstream.eval.answer_ablation import answer_ablation
from ragstream.eval.answer_eval import OFF_TOPIC, AbstainReport, abstain_group, gold_eval
from ragstream.eval.beir import Corpus, Qrels, Queries, beir_doc_id, index_corpus, load_beir
from ragstream.eval.evaluation import (
    DEFAULT_DEPTH,
    DEFAULT_K,
    MODES,
    EvalConfig,
    EvalReport,
    Mode,
    Row,
    default_configs,
    pipeline_config,
    run_configs,
    save_report,
)
from ragstream.eval.failures import FailureDetail, classify_failures, count_failures
from ragstream.eval.kinds import FrontierPoint
from ragstream.eval.opened import opened
from ragstream.eval.squad import load_squad, squad_file
from ragstream.eval.squad_eval import squad_answers
from ragstream.query.engine import QueryEngine


def evaluate_retrieval(
    settings: Settings,
    queries: Queries,
    qrels: Qrels,
    *,
    depth: int = DEFAULT_DEPTH,
    k: int = DEFAULT_K,
    answers: bool = False,
    configs: Sequence[EvalConfig] | None = None,
) -> tuple[list[Row], EvalConfig, list[FailureDetail], dict[str, list[float]]]:
    """The ablation rows, the failure report of the pipeline config and each stage's
    latency per query, in one pass over the index of `settings`."""
    configs = list(configs) if configs is not None else default_configs(settings)
    pipeline = pipeline_config(settings)
    if pipeline.name not in {c.name for c in configs}:
        configs.append(pipeline)
    with opened(settings) as engine:
        run = run_configs(settings, engine.retriever, queries, qrels, configs, depth, pipeline.name)
        details = classify_failures(
            queries,
            qrels,
            run.kept,
            k=k,
            depth=depth,
            engine=engine if answers else None,
            config=pipeline,
        )
    return run.rows, pipeline, details, run.stage_ms


def evaluate_dataset(
    dataset_dir: str | Path,
    data_dir: str | Path,
    split: str = "test",
    *,
    limit_queries: int | None = None,
    depth: int = DEFAULT_DEPTH,
    settings_overrides: Mapping[str, Any] | None = None,
    mode: Mode = "retrieval",
    answers: bool = False,
    k: int = DEFAULT_K,
    row_set: str = "all",
) -> EvalReport:
    """Load, index (incrementally), evaluate in `mode`, and save the report to
    `<data_dir>/eval/<split>.json` (retrieval) or `<split>.<mode>.json`, with per-query
    details beside it in `<split>.<mode>.details.json`. A SQuAD-format dataset (`answers` or
    `abstain` only) is asked through the engine instead (`squad_eval`).

    `abstain` re-syncs the data dir without the judged queries' relevant documents, asks, then
    syncs the full corpus back (the re-added chunks reuse their tombstoned vectors)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {MODES}")
    if squad_file(dataset_dir) is not None:
        return _squad_dataset(
            dataset_dir, data_dir, split, mode, limit_queries, k, settings_overrides
        )
    corpus, queries, qrels = load_beir(dataset_dir, split)
    judged = [q for q in queries if q in qrels][:limit_queries]  # None keeps all
    asked = {q: queries[q] for q in judged}
    base = {"dataset": Path(dataset_dir).name, "split": split, "mode": mode, "k": k}
    base |= {"queries": len(judged), "depth": depth}
    details: Any
    if mode == "abstain":
        abstain, details = _abstain_mode(corpus, qrels, judged, asked, data_dir, settings_overrides)
        report = EvalReport(**base, abstain=abstain)
    elif mode == "gold":
        settings = index_corpus(corpus, data_dir, settings_overrides)
        with opened(settings) as engine:
            gold, details = gold_eval(engine, asked, qrels)
        report = EvalReport(**base, gold=gold)
    elif mode == "answers":
        settings = index_corpus(corpus, data_dir, settings_overrides)
        report, details = _answers_mode(settings, base, dataset_dir, split, asked, qrels, row_set)
    else:
        settings = index_corpus(corpus, data_dir, settings_overrides)
        rows, pipeline, failing, stage_ms = evaluate_retrieval(
            settings, asked, qrels, depth=depth, k=k, answers=answers
        )
        report = EvalReport(
            **base,
            answers=answers,
            rows=rows,
            failure_config=pipeline.name,
            failures=count_failures(failing, depth, answers),
            stage_ms=stage_ms,
        )
        details = [d.model_dump() for d in failing]
    return save_report(report, data_dir, split, mode, details)


def _answers_mode(
    settings: Settings,
    base: dict[str, Any],
    dataset_dir: str | Path,
    split: str,
    asked: Queries,
    qrels: Qrels,
    row_set: str,
) -> tuple[EvalReport, Any]:
    """The answers mode on a BEIR set: the assembly ablation, and the decision's frontier."""
    with opened(settings) as engine:
        assembly, details = answer_ablation(engine, asked, qrels, base["k"], row_set)
        points = _frontier(engine, dataset_dir, split, asked)
    return EvalReport(**base, assembly=assembly, frontier=points), details


def _frontier(
    engine: QueryEngine, dataset_dir: str | Path, split: str, asked: Queries
) -> list[FrontierPoint] | None:
    """The calibrated decision's frontier on the asked questions, each read with its gold
    documents and with them taken out; None without a calibrated decision."""
    decision = engine.decision
    if decision is None:
        return None
    read = kinds.engine_reader(engine)
    readings = kinds.beir_readings(read, Path(dataset_dir), split, "set", keep=asked.__contains__)
    return kinds.frontier(readings, decision.probability)


def _abstain_mode(
    corpus: Corpus,
    qrels: Qrels,
    judged: list[str],
    asked: Queries,
    data_dir: str | Path,
    settings_overrides: Mapping[str, Any] | None,
) -> tuple[AbstainReport, dict[str, Any]]:
    """The judged queries asked of the index without their relevant documents, and general
    questions from far outside the corpus; the full corpus is synced back afterwards."""
    heldout = {d for q in judged for d, rel in qrels[q].items() if rel > 0} & corpus.keys()
    rest = {d: doc for d, doc in corpus.items() if d not in heldout}
    settings = index_corpus(rest, data_dir, settings_overrides)
    try:
        with opened(settings) as engine:
            hidden = {beir_doc_id(settings, d) for d in heldout}
            held, leaks, held_details = abstain_group(engine, asked, hidden)
            offtopic = {f"offtopic-{i}": q for i, q in enumerate(OFF_TOPIC, 1)}
            off, _, off_details = abstain_group(engine, offtopic)
            generator = engine.generator.name
    finally:
        index_corpus(corpus, data_dir, settings_overrides)
    abstain = AbstainReport(
        heldout_docs=len(heldout),
        heldout_leaks=leaks,
        heldout=held,
        offtopic=off,
        generator=generator,
    )
    return abstain, {"heldout_answered": held_details, "offtopic_answered": off_details}


def _squad_dataset(
    dataset: str | Path,
    data_dir: str | Path,
    split: str,
    mode: Mode,
    limit_queries: int | None,
    k: int,
    settings_overrides: Mapping[str, Any] | None,
) -> EvalReport:
    """A SQuAD 2.0-format set: its split's paragraphs indexed, its questions asked through
    the engine (`answers`: all; `abstain`: the unanswerable ones), saved like any report."""
    if mode not in ("answers", "abstain"):
        raise ValueError(
            f"a SQuAD-format set is evaluated with --mode answers or abstain, not {mode}"
        )
    data = load_squad(dataset, split)
    asked = [q for q in data.questions if mode == "answers" or not q.answerable][:limit_queries]
    settings = index_corpus(data.corpus, data_dir, settings_overrides)
    with opened(settings) as engine:
        squad, details = squad_answers(engine, asked, k)
    name = Path(dataset).name
    report = EvalReport(
        dataset=name, split=split, mode=mode, queries=len(asked), depth=0, k=k, squad=squad
    )
    return save_report(report, data_dir, split, mode, details)
