"""Failure report, gold-context and abstention modes of `ragstream eval`.

One small fixed SciFact slice (the first 8 judged test queries, their judged abstracts and
40 distractors), written as a BEIR folder and indexed once through the real ingest. Every
verdict the report gives is re-derived here from the real retriever or engine, so a wrong
classification fails; the runs that must produce each class are forced through settings
(a gate floor nothing passes) or the OpenAI-compatible stub (an answer the sources do not
support), never by editing results.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import Stub
from ragstream.cli import app
from ragstream.core.answers import QueryRequest
from ragstream.core.settings import Settings
from ragstream.eval.answer_eval import OFF_TOPIC, accepted, gold_eval
from ragstream.eval.beir import (
    Qrels,
    Queries,
    beir_doc_id,
    beir_subset,
    doc_key,
    index_corpus,
    load_beir,
    write_beir,
)
from ragstream.eval.datasets import evaluate_dataset, evaluate_retrieval
from ragstream.eval.evaluation import fused_config, ranked_chunks
from ragstream.eval.failures import classify_retrieval, count_failures
from ragstream.eval.opened import opened
from ragstream.service import ingest

pytestmark = pytest.mark.slow  # indexes a dataset and answers every question

QUERIES, DISTRACTORS = 8, 40


@pytest.fixture(scope="module")
def dataset(scifact_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slice as a BEIR folder, so every mode runs through `evaluate_dataset` / the CLI."""
    subset = beir_subset(*load_beir(scifact_dir, "test"), QUERIES, DISTRACTORS)
    return write_beir(tmp_path_factory.mktemp("scifact-slice"), *subset)


@pytest.fixture(scope="module")
def indexed(
    dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, Queries, Qrels]:
    corpus, queries, qrels = load_beir(dataset, "test")
    settings = index_corpus(corpus, tmp_path_factory.mktemp("eval-modes"))
    return settings, queries, qrels


def with_query(settings: Settings, **query: object) -> Settings:
    return settings.model_copy(update={"query": settings.query.model_copy(update=query)})


def test_subset_is_the_judged_queries_with_their_docs_and_distractors(
    dataset: Path, scifact_dir: Path
) -> None:
    corpus, queries, qrels = load_beir(dataset, "test")
    full_corpus, full_queries, full_qrels = load_beir(scifact_dir, "test")
    assert list(queries) == [q for q in full_queries if q in full_qrels][:QUERIES]
    judged = {d for q in qrels for d in qrels[q]}
    assert judged <= set(corpus) and len(set(corpus) - judged) == DISTRACTORS
    assert all(corpus[d] == full_corpus[d] for d in corpus)


def test_retrieval_failures_are_the_first_stage_that_broke(
    indexed: tuple[Settings, Queries, Qrels],
) -> None:
    """N=1 chunk per leg and k=1 make both retrieval classes occur (the first question is
    also judged against the last question's document, on another topic, so that nothing
    finds it); each verdict is re-checked against the retriever itself."""
    settings, queries, real = indexed
    qids = list(queries)
    qrels = {**real, qids[0]: real[qids[-1]]}
    depth, k = 1, 1
    rows, pipeline, details, stage_ms = evaluate_retrieval(
        settings, queries, qrels, depth=depth, k=k
    )
    assert pipeline.name == "hybrid-rrf" and "hybrid-rrf" in [r.name for r in rows]
    # one latency sample per judged query for every stage of the plain retrieve
    assert {"embed", "dense", "lexical", "fuse", "total"} <= set(stage_ms)
    assert all(len(v) == len(queries) and min(v) >= 0 for v in stage_ms.values())
    counts = count_failures(details, depth, answers=False)
    assert list(counts) == [f"not_retrieved@{depth}", "below_k"]
    assert counts[f"not_retrieved@{depth}"] >= 1 and counts["below_k"] >= 1
    by_qid = {d.qid: d for d in details}
    with opened(settings) as engine:
        for qid, text in queries.items():
            result = engine.retriever.retrieve(text, n=depth)
            docs = [doc_key(d) for d, _ in ranked_chunks(pipeline, result)]
            relevant = {d for d, rel in qrels[qid].items() if rel > 0}
            hit = [i for i, d in enumerate(docs, 1) if d in relevant]
            if not hit:
                assert by_qid[qid].failure == f"not_retrieved@{depth}"
            elif hit[0] > k:
                assert by_qid[qid].failure == "below_k"
                assert by_qid[qid].first_relevant_rank == hit[0]
            else:
                assert qid not in by_qid  # passed


def test_classify_retrieval_is_ordered_by_stage() -> None:
    assert classify_retrieval(["a", "b"], {"c"}, k=1, depth=50) == ("not_retrieved@50", None)
    assert classify_retrieval(["a", "b", "c"], {"c", "b"}, k=1, depth=50) == ("below_k", 2)
    assert classify_retrieval(["c"], {"c"}, k=1, depth=50) == (None, 1)


def test_gate_refusal_with_relevant_context_is_refused_wrongly(
    indexed: tuple[Settings, Queries, Qrels],
) -> None:
    settings, queries, qrels = indexed
    strict = with_query(settings, dense_floor=0.99)  # the gate refuses every question
    one = [fused_config("rrf")]
    _, _, details, _ = evaluate_retrieval(
        strict, queries, qrels, depth=100, answers=True, configs=one
    )
    answered = [d for d in details if d.refusal is not None]
    assert answered, "no query reached the answer stage"
    for d in answered:
        assert d.failure == "refused_wrongly" and d.refusal == "insufficient_evidence"
    passed_retrieval = QUERIES - sum(d.failure.startswith("not_retrieved") for d in details)
    assert len(answered) == passed_retrieval - sum(d.failure == "below_k" for d in details)


def test_answer_the_sources_do_not_support_is_unsupported(
    indexed: tuple[Settings, Queries, Qrels], stub: Stub
) -> None:
    settings, queries, qrels = indexed
    llm = settings.model_copy(deep=True)
    llm.generator.base_url = stub.url
    stub.replies += ["The Eiffel Tower is in Paris and was painted red in 1999 [S1]."] * QUERIES
    # only the plain row: with an endpoint the default rows would add transform calls
    configs = [fused_config("rrf")]
    _, _, details, _ = evaluate_retrieval(
        llm, queries, qrels, depth=100, answers=True, configs=configs
    )
    unsupported = [d for d in details if d.failure == "unsupported_answer"]
    assert unsupported and len(unsupported) == len(stub.requests)  # every generated answer
    assert all(d.refusal == "unsupported_answer" and (d.grounding or 0) < 0.5 for d in unsupported)


def test_gold_context_bypasses_retrieval_and_cites_only_gold(
    indexed: tuple[Settings, Queries, Qrels],
) -> None:
    settings, queries, qrels = indexed
    strict = with_query(settings, dense_floor=0.99)  # would refuse everything if it were asked
    with opened(strict) as engine:
        report, details = gold_eval(engine, queries, qrels)
        qid = next(iter(queries))
        gold = {d for d, rel in qrels[qid].items() if rel > 0}
        vectors = engine.retriever.vectors
        chunks = [c for d in gold for c in vectors.live_chunks(beir_doc_id(strict, d))]
        answer = engine.answer_from(QueryRequest(query=queries[qid]), chunks)
    assert report.queries == QUERIES and report.missing_gold == 0
    assert report.accepted == QUERIES - len(details)
    assert report.accept_rate >= 0.5, report  # the offline generator answers from gold text
    assert {doc_key(c.doc_id) for c in answer.citations} <= gold
    assert accepted(answer, strict.query.min_grounding) == (qid not in {d["qid"] for d in details})


def test_abstain_mode_removes_the_answers_then_restores_the_index(
    dataset: Path, indexed: tuple[Settings, Queries, Qrels], caplog: pytest.LogCaptureFixture
) -> None:
    settings, _, qrels = indexed
    before = ingest.status(settings=settings)
    with caplog.at_level(logging.INFO, logger="ragstream.eval.beir"):
        report = evaluate_dataset(dataset, settings.data_dir, mode="abstain")
    a = report.abstain
    assert a is not None and report.rows == [] and report.failures is None
    removed = {d for q in qrels for d, rel in qrels[q].items() if rel > 0}
    assert a.heldout_docs == len(removed) and a.heldout_leaks == 0
    assert a.heldout.questions == QUERIES and a.offtopic.questions == len(OFF_TOPIC)
    for group in (a.heldout, a.offtopic):
        assert group.rate == pytest.approx(group.refused / group.questions)
        assert sum(group.by_reason.values()) == group.refused
        signals = group.by_signal  # one abstention rate per signal, from the same answers
        assert signals["engine as configured (+generator)"] == pytest.approx(group.rate)
        both = signals["+floor rule +coverage/dense"]
        rule = signals["+judge or dense override (the floor rule)"]
        assert both >= max(rule, signals["+coverage/dense 0.5/0.5"])
        assert signals["+trained judge alone"] >= rule
        calibrated = signals["+calibrated decision (the default)"]
        assert signals["+calibrated +coverage/dense"] >= calibrated
        # the engine refuses what its decision refuses, and more (the generator may too)
        assert signals["engine as configured (+generator)"] >= calibrated
        assert min(signals.values()) == signals["retrieval gate only"]
    assert a.offtopic.rate >= 0.75, a.offtopic  # the gate's floor keeps far-off questions out
    details = json.loads(Path(str(report.details_file)).read_text())
    assert len(details["heldout_answered"]) == a.heldout.questions - a.heldout.refused
    after = ingest.status(settings=settings)
    assert (after.docs, after.chunks_live) == (before.docs, before.chunks_live)
    indexed_logs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("indexed")]
    assert indexed_logs[-1].endswith("(0 chunks embedded)")  # restored from kept vectors


def test_cli_modes_and_json_fields(dataset: Path, indexed: tuple[Settings, Queries, Qrels]) -> None:
    data = str(indexed[0].data_dir)
    base = ["eval", str(dataset), "--data-dir", data, "--json", "--limit-queries", "3"]
    retrieval = CliRunner().invoke(app, base)
    assert retrieval.exit_code == 0, retrieval.output
    report = json.loads(retrieval.stdout)
    assert report["mode"] == "retrieval" and report["failure_config"] == "hybrid-rrf"
    assert set(report["failures"]) == {"not_retrieved@500", "below_k"}
    assert Path(report["details_file"]).name == "test.retrieval.details.json"
    assert "gold" not in report and "abstain" not in report
    gold = CliRunner().invoke(app, [*base, "--mode", "gold"])
    assert gold.exit_code == 0, gold.output
    g = json.loads(gold.stdout)
    assert g["rows"] == [] and g["gold"]["queries"] == 3 and 0 <= g["gold"]["accept_rate"] <= 1
    assert json.loads((Path(data) / "eval" / "test.gold.json").read_text()) == g
    table = CliRunner().invoke(app, [*base[:-3], "--limit-queries", "3", "--mode", "gold"])
    assert "| accepted (answered, grounding ≥ min) |" in table.stdout
    bad = CliRunner().invoke(app, [*base, "--mode", "nope"])
    assert bad.exit_code != 0


def test_answers_flag_adds_the_answer_classes(
    indexed: tuple[Settings, Queries, Qrels],
) -> None:
    settings, queries, qrels = indexed
    one = [fused_config("rrf")]  # the failure report's subject; the other rows add nothing here
    _, _, details, _ = evaluate_retrieval(
        settings, queries, qrels, depth=100, answers=True, configs=one
    )
    counts = count_failures(details, 100, answers=True)
    assert list(counts) == ["not_retrieved@100", "below_k", "refused_wrongly", "unsupported_answer"]
    assert sum(counts.values()) == len(details) <= QUERIES
    assert fused_config("rrf", rerank=True, transforms=["hyde"]).name == "hybrid-rrf+hyde+rerank"
