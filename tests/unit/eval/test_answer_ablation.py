"""The assembly ablation scored on answers (`ragstream eval --mode answers`).

A small fixed SciFact slice (the first 4 judged test queries, their judged abstracts and 40
distractors) is written as a BEIR folder and indexed once through the real ingest; the
ablation runs on it once, and once more (one question) through the CLI and
`evaluate_dataset`. What each technique claims to change is re-derived from the real engine,
asked with each row's settings: parent expansion hands the generator whole sections (more
tokens, text no single hit has), document order the same sources in another order. No
figure is hard-coded: the checks are ranges, consistency between metrics, and comparisons
between rows of one run. Every answer embeds all candidate sentences twice (generate,
verify), ~1-2 s on 2 shared cores: hence only 4 questions.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from ragstream.cli import app
from ragstream.core.answers import Answer, Citation, Claim, QueryRequest, Refusal, SourceChunk
from ragstream.core.settings import Settings
from ragstream.eval.answer_ablation import (
    ANSWERABILITY_ROWS,
    ASSEMBLY_ROWS,
    AnswerAblation,
    answer_ablation,
    markdown_answers,
    row_settings,
    score_answer,
    with_configured_judge,
)
from ragstream.eval.beir import Qrels, Queries, beir_subset, index_corpus, load_beir, write_beir
from ragstream.eval.evaluation import DEFAULT_K, EvalReport, markdown_report
from ragstream.eval.opened import opened
from ragstream.query.assemble import render

QUERIES, DISTRACTORS = 4, 40
RATES = ("answered", "gold_in_context", "gold_cited", "citation_precision", "changed")


@pytest.fixture(scope="module")
def dataset(scifact_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    subset = beir_subset(*load_beir(scifact_dir, "test"), QUERIES, DISTRACTORS)
    return write_beir(tmp_path_factory.mktemp("scifact-answers"), *subset)


Run = tuple[Settings, Queries, Qrels, AnswerAblation]
Asked = dict[str, dict[str, Answer]]  # row -> question id -> answer


@pytest.fixture(scope="module")
def run(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    corpus, queries, qrels = load_beir(dataset, "test")
    settings = index_corpus(corpus, tmp_path_factory.mktemp("answer-ablation"))
    with opened(settings) as engine:
        report, _ = answer_ablation(engine, queries, qrels, DEFAULT_K, rows="assembly")
    print("\n" + markdown_answers(report))
    return settings, queries, qrels, report


@pytest.fixture(scope="module")
def asked(run: Run) -> Asked:
    """Every question asked again through the real engine, with three rows' settings."""
    settings, queries, _, _ = run
    out: Asked = {}
    with opened(settings) as base:
        for row in ("score order", "+document order", "+parent expansion"):
            engine = base.configured(row_settings(base.settings, ASSEMBLY_ROWS[row]))
            out[row] = {q: engine.answer(QueryRequest(query=t)) for q, t in queries.items()}
    return out


@pytest.mark.slow
def test_one_row_per_assembly_config_with_consistent_rates(
    run: Run,
) -> None:
    settings, _, _, report = run
    assert [r.name for r in report.rows] == list(ASSEMBLY_ROWS)
    assert report.questions == QUERIES and report.generator == "extractive"
    assert report.budget_tokens == settings.query.budget_tokens
    for row in report.rows:
        assert row.settings == ASSEMBLY_ROWS[row.name]
        assert all(0.0 <= getattr(row, m) <= 1.0 for m in RATES), row
        assert row.gold_cited <= min(row.answered, row.gold_in_context)
        assert 0.0 <= row.grounding <= 1.0 and 0 < row.context_docs <= row.sources
        assert 0 < row.context_tokens <= report.budget_tokens
        assert 0 < row.p50_ms <= row.p95_ms
    assert report.rows[0].changed == 0.0  # the baseline against itself


@pytest.mark.slow
def test_parent_expansion_grows_the_context_with_whole_sections(run: Run, asked: Asked) -> None:
    """Bigger sources in the ablation (more tokens per source: the budget may bind, so the
    total need not grow), and per question: some source the generator gets is a whole
    section (all live chunks of that document and section path, in order), text that no
    source of the unexpanded run has."""
    settings, queries, _, report = run
    rows = {r.name: r for r in report.rows}

    def per_source(name: str) -> float:
        return rows[name].context_tokens / max(rows[name].sources, 1e-9)

    assert per_source("+parent expansion") > per_source("score order")
    assert per_source("+both") > per_source("+document order")
    plain, grown = asked["score order"], asked["+parent expansion"]
    changed = 0
    with opened(settings) as engine:
        for qid in queries:
            before = {s.text for s in plain[qid].sources}
            for source in grown[qid].sources:
                section = [
                    c
                    for c in engine.retriever.vectors.live_chunks(source.doc_id)
                    if list(c.section_path) == source.section_path
                ]
                whole = "\n".join(c.text for c in sorted(section, key=lambda c: c.char_start))
                if len(section) > 1 and source.text == whole:
                    changed += source.text not in before
    assert changed > 0, "no expanded source reached the generator"


@pytest.mark.slow
def test_document_order_reorders_the_same_sources(run: Run, asked: Asked) -> None:
    """Same sources, same ids; laid out by (document, position) instead of by score. The
    extractive generator picks the same sentences either way (scores do not depend on
    position): only their order can change, which is what the ablation's rows show."""
    queries = run[1]
    by_score, by_doc = asked["score order"], asked["+document order"]
    reordered = 0
    for qid in queries:
        a, b = by_score[qid].sources, by_doc[qid].sources
        assert sorted(s.model_dump_json() for s in a) == sorted(s.model_dump_json() for s in b)
        assert [s.cid for s in a] == [f"S{i}" for i in range(1, len(a) + 1)]
        assert [(s.doc_id, s.char_start) for s in b] == sorted((s.doc_id, s.char_start) for s in b)
        reordered += [s.cid for s in a] != [s.cid for s in b]
        assert Counter(c.text for c in by_score[qid].claims) == Counter(
            c.text for c in by_doc[qid].claims
        )
    assert reordered > 0, "document order never changed the layout"


def _words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def _source(cid: str, doc: str, text: str) -> SourceChunk:
    return SourceChunk(
        cid=cid,
        point_id=cid,
        doc_id=f"corpus:{doc}.md",
        path=f"{doc}.md",
        char_start=0,
        char_end=len(text),
        text=text,
        score=1.0,
    )


def test_score_answer_follows_the_metric_definitions() -> None:
    """Precision over distinct cited documents; a refused answer cites no gold; an answer
    refused by the gate (no assembly) has no context size."""
    sources = [_source("S1", "10", "a b c"), _source("S2", "10", "d e"), _source("S3", "20", "f")]
    cites = [Citation(**s.model_dump(include=set(Citation.model_fields))) for s in sources]
    claim = Claim(text="x", cids=["S1"], supported=True, score=1.0)
    base = Answer(
        query="q",
        text="x [S1].",
        citations=cites,
        claims=[claim],
        grounding=1.0,
        sources=sources,
        embedder="e",
        reranker="r",
        generator="g",
        trace_id="t",
        timings_ms={"assemble": 1.0},
    )
    s = score_answer(base, {"10"}, _words, 5.0)
    assert (s.answered, s.gold_in_context, s.gold_cited) == (True, True, True)
    assert s.precision == 0.5 and s.cited == ["10", "20"]  # 2 distinct docs, 1 relevant
    assert (s.sources, s.context_docs) == (3, 2)
    assert s.tokens == sum(_words([render(x) for x in sources]))  # what the budget counts
    refused = base.model_copy(update={"refusal": Refusal(reason="unsupported_answer", detail="")})
    assert not score_answer(refused, {"10"}, _words, 1.0).gold_cited
    gated = base.model_copy(update={"sources": [], "citations": [], "claims": [], "timings_ms": {}})
    g = score_answer(gated, {"10"}, _words, 1.0)
    assert (g.sources, g.tokens, g.precision, g.grounding) == (None, None, None, None)


def test_rows_go_through_validated_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    both = row_settings(settings, ASSEMBLY_ROWS["+both"])
    assert (both.query.order, both.query.expand_parent) == ("document", True)
    assert both.query.budget_tokens == settings.query.budget_tokens  # the rest untouched
    with pytest.raises(ValidationError):
        row_settings(settings, {"order": "random"})
    named = row_settings(settings, {"answerable.named_floor": 0.0})  # a grouped setting
    assert named.query.answerable.named_floor == 0.0
    assert named.query.answerable.judge == settings.query.answerable.judge
    with pytest.raises(ValidationError):
        row_settings(settings, {"answerable.named_flor": 0.0})


def test_judge_rows_read_the_configured_judge_and_no_judge_rows_stay_without() -> None:
    rows = {n: with_configured_judge(o, "/srv/judge") for n, o in ANSWERABILITY_ROWS.items()}
    for name, row in rows.items():
        configured = ANSWERABILITY_ROWS[name]["answerable.judge"] == "bundled"
        assert row["answerable.judge"] == ("/srv/judge" if configured else "none"), name
        assert {k: v for k, v in row.items() if k != "answerable.judge"} == {
            k: v for k, v in ANSWERABILITY_ROWS[name].items() if k != "answerable.judge"
        }
    for off in ("none", "", "off"):  # an index served without a judge: the rows bring one
        assert with_configured_judge(ANSWERABILITY_ROWS["+judge, floor rule"], off)[
            "answerable.judge"
        ] == ("bundled")


@pytest.mark.slow
def test_cli_answers_mode_saves_the_report(dataset: Path, run: Run) -> None:
    data = run[0].data_dir
    args = ["eval", str(dataset), "--data-dir", str(data), "--limit-queries", "1"]
    result = CliRunner().invoke(app, [*args, "--mode", "answers", "--rows", "assembly", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mode"] == "answers" and report["assembly"]["questions"] == 1
    assert [r["name"] for r in report["assembly"]["rows"]] == list(ASSEMBLY_ROWS)
    assert json.loads((data / "eval" / "test.answers.json").read_text()) == report
    details = Path(report["details_file"])
    assert details.name == "test.answers.details.json"
    assert all(set(d["rows"]) == set(ASSEMBLY_ROWS) for d in json.loads(details.read_text()))
    table = markdown_report(EvalReport.model_validate(report))
    assert "| +parent expansion |" in table and "gold cited" in table
    # the decision's frontier: the same question read with its gold documents taken out
    frontier = report["frontier"]
    assert [p["answered"] for p in frontier] == [0.8, 0.85, 0.9, 0.95]
    floors = [p["decision_floor"] for p in frontier]
    assert floors == sorted(floors, reverse=True)  # answering more needs a lower floor
    assert "decision_floor" in table
