"""Query transforms: each changes exactly the leg it claims to, on a real index.

The LLM is the OpenAI-compatible stub (a test double at the generator boundary, which
tests/unit/query/test_generate_verify.py exercises for real); the index, the embedder, both stores,
fusion and the engine are real. Each leg check compares against that leg's own store
searched directly with the text the transform should have produced, and against the plain
retrieval for the leg that must not change.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import Stub
from ragstream import api
from ragstream.connectors.protocols import Hit
from ragstream.core.answers import QueryRequest
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.eval.evaluation import EvalConfig, default_configs, fused_config, run_eval
from ragstream.query.assemble import SYSTEM
from ragstream.query.engine import QueryEngine
from ragstream.query.generate import OpenAIGenerator
from ragstream.query.retrieve import NO_FILTER, Candidate, RetrievalResult, Retriever, fuse_results
from ragstream.query.transforms import (
    DECOMPOSE_SYSTEM,
    HYDE_SYSTEM,
    KEYWORDS_SYSTEM,
    QueryTransformer,
    Transform,
    TransformUnavailable,
    parse_keywords,
    parse_passage,
    parse_subquestions,
    retrieve_transformed,
)

DOCS = {
    "volcanoes.md": "# Volcanoes\n\nA volcano erupts when magma rises through the crust. "
    "Basaltic lava flows from shield volcanoes such as Mauna Loa.\n",
    "sourdough.md": "# Sourdough bread\n\nSourdough is leavened by a starter of wild yeast and "
    "lactobacilli. Bakers feed the starter flour and water, then proof the dough overnight.\n",
    "honeybees.md": "# Honeybees\n\nHoneybees pollinate flowers and store nectar as honey in "
    "the hive. Worker bees perform the waggle dance to share where pollen is found.\n",
    "chess.md": "# Chess openings\n\nThe Sicilian Defence answers 1.e4 with c5. Grandmasters "
    "study these opening lines for years.\n",
}
N = 20


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("transforms") / "alpha"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    s = Settings(
        data_dir=tmp_path_factory.mktemp("data"), sources=[FolderConfig(name="alpha", root=root)]
    )
    report = api.sync([root], settings=s)
    assert report.docs_changed == len(DOCS) and not report.dead_letters
    return s


@pytest.fixture(scope="module")
def retriever(settings: Settings) -> Iterator[Retriever]:
    with Retriever.open(settings) as r:
        yield r


def transformer(stub: Stub, *names: Transform) -> QueryTransformer:
    return QueryTransformer(OpenAIGenerator(stub.url, "stub-model", max_retries=0), names)


def leg(result: RetrievalResult, name: str) -> list[tuple[str, int, float]]:
    """One leg's view of a result: (point id, rank, raw score) in that leg's order."""
    mine = sorted((c for c in result.candidates if name in c.ranks), key=lambda c: c.ranks[name])
    return [(c.chunk.point_id, c.ranks[name], round(c.scores[name], 5)) for c in mine]


def searched(hits: list[Hit]) -> list[tuple[str, int, float]]:
    return [(h.chunk.point_id, i, round(h.score, 5)) for i, h in enumerate(hits, 1)]


def test_parsers_strip_labels_bullets_and_duplicates() -> None:
    assert parse_keywords("Keywords: magma, crust; Magma\n- lava flow, 'eruption'") == (
        "magma crust lava flow eruption"
    )
    assert parse_passage('Passage: "Magma rises\n through the crust."') == (
        "Magma rises through the crust."
    )
    reply = "1. How do volcanoes erupt?\n2) How is bread leavened?\n\n- how do volcanoes erupt?"
    assert parse_subquestions(reply, 3) == ["How do volcanoes erupt?", "How is bread leavened?"]
    assert parse_subquestions("a\nb\nc\nd", 2) == ["a", "b"]


def test_keywords_reach_the_lexical_leg_only(retriever: Retriever, stub: Stub) -> None:
    question = "Which opening do grandmasters study?"
    stub.replies.append("Keywords: Sicilian Defence, chess, c5, waggle dance")
    got = retrieve_transformed(retriever, question, transformer(stub, "keywords"), n=N)
    plain = retriever.retrieve(question, n=N)
    expected_text = f"{question} Sicilian Defence chess c5 waggle dance"
    assert leg(got, "lexical") == searched(retriever.lexical.search(expected_text, N, NO_FILTER))
    assert leg(got, "lexical") != leg(plain, "lexical")  # the keywords changed BM25's view
    assert leg(got, "dense") == leg(plain, "dense")  # ... and nothing else
    body = stub.requests[0]["body"]
    assert len(stub.requests) == 1 and body["messages"][0]["content"] == KEYWORDS_SYSTEM
    assert question in body["messages"][1]["content"]
    assert got.query == question and got.timings_ms["transform.keywords"] > 0


def test_hyde_passage_reaches_the_dense_leg_only(retriever: Retriever, stub: Stub) -> None:
    question = "What makes bread rise?"
    passage = "Honeybees store nectar as honey in the hive and dance to share pollen."
    stub.replies.append(passage)
    got = retrieve_transformed(retriever, question, transformer(stub, "hyde"), n=N)
    plain = retriever.retrieve(question, n=N)
    vector = retriever.embedder.encode_query(f"{question}\n{passage}")
    assert leg(got, "dense") == searched(retriever.vectors.search(vector, N, NO_FILTER))
    assert leg(got, "dense") != leg(plain, "dense")
    assert leg(got, "lexical") == leg(plain, "lexical")
    assert stub.requests[0]["body"]["messages"][0]["content"] == HYDE_SYSTEM


def test_decomposition_retrieves_each_subquestion_and_fuses(
    retriever: Retriever, stub: Stub, spans: InMemorySpanExporter
) -> None:
    question = "How do volcanoes erupt, and how is sourdough leavened?"
    subs = ["How does a volcano erupt?", "How is sourdough bread leavened?"]
    stub.replies.append("\n".join(f"{i}. {s}" for i, s in enumerate(subs, 1)))
    spans.clear()
    got = retrieve_transformed(retriever, question, transformer(stub, "decompose"), n=N)
    retrieves = [s for s in spans.get_finished_spans() if s.name == "ragstream.query.retrieve"]
    assert len(retrieves) == 2  # one retrieval per sub-question
    expected = fuse_results(question, [retriever.retrieve(s, n=N) for s in subs])
    assert [c.chunk.point_id for c in got.candidates] == [
        c.chunk.point_id for c in expected.candidates
    ]
    top_docs = {c.chunk.doc_id for c in got.candidates[:2]}
    assert top_docs == {"alpha:volcanoes.md", "alpha:sourdough.md"}  # one per part
    assert all({"sub1", "sub2"} & set(c.ranks) for c in got.candidates)
    system = stub.requests[0]["body"]["messages"][0]["content"]
    assert len(stub.requests) == 1 and system == DECOMPOSE_SYSTEM.format(n=3)


def test_single_part_question_is_not_decomposed(retriever: Retriever, stub: Stub) -> None:
    question = "How does a volcano erupt?"
    stub.replies.append(question)
    plan = transformer(stub, "decompose").plan(question)
    assert [s.question for s in plan.subqueries] == [question]


def test_failed_transform_falls_back_to_the_question(
    retriever: Retriever, stub: Stub, spans: InMemorySpanExporter
) -> None:
    question = "Which opening do grandmasters study?"
    stub.replies.append(500)
    spans.clear()
    t = transformer(stub, "keywords")
    plan = t.plan(question)
    assert plan.failed == ["keywords"] and plan.subqueries[0].lexical_query is None
    (sp,) = [
        s for s in spans.get_finished_spans() if s.name == "ragstream.query.transform.keywords"
    ]
    assert sp.attributes is not None and sp.attributes["failed"] is True
    stub.replies.append(500)
    got = retrieve_transformed(retriever, question, t, n=N)
    assert leg(got, "lexical") == leg(retriever.retrieve(question, n=N), "lexical")


def test_engine_runs_enabled_transforms_with_spans_and_latency(
    settings: Settings, retriever: Retriever, stub: Stub, spans: InMemorySpanExporter
) -> None:
    s = settings.model_copy(deep=True)
    s.generator.base_url = stub.url
    s.query.transform_keywords = s.query.transform_hyde = True
    s.query.log_queries = False
    engine = QueryEngine(s, retriever)
    stub.replies += ["magma, crust", "Magma rises through the crust.", "Magma rises [S1]."]
    spans.clear()
    answer = engine.answer(QueryRequest(query="How does a volcano erupt?"))
    systems = [r["body"]["messages"][0]["content"] for r in stub.requests]
    assert systems == [KEYWORDS_SYSTEM, HYDE_SYSTEM, SYSTEM]  # transforms, then the answer
    assert {"retrieve.transform.keywords", "retrieve.transform.hyde"} <= set(answer.timings_ms)
    assert answer.candidates[0].doc_id == "alpha:volcanoes.md"
    for name in ("keywords", "hyde"):
        (sp,) = [
            x for x in spans.get_finished_spans() if x.name == f"ragstream.query.transform.{name}"
        ]
        assert sp.attributes is not None and float(sp.attributes["latency_ms"]) > 0  # type: ignore[arg-type]
        assert format(sp.context.trace_id, "032x") == answer.trace_id


def test_transforms_are_off_by_default_and_need_an_endpoint(settings: Settings) -> None:
    assert QueryTransformer.from_settings(settings) is None
    on = settings.model_copy(deep=True)
    on.query.transform_hyde = True
    with pytest.raises(TransformUnavailable, match="base_url"):
        QueryTransformer.from_settings(on)


def test_fuse_results_keeps_best_leg_evidence_and_sums_timings() -> None:
    def cand(pid: str, dense: float, rank: int) -> Candidate:
        chunk = IndexedChunk(
            point_id=pid, doc_id=f"s:{pid}.md", source="s", path=f"{pid}.md", file_type="md",
            ordinal=0, content_hash="h", text="t", char_start=0, char_end=1,
        )  # fmt: skip
        return Candidate(
            chunk=chunk, score=1.0 / rank, ranks={"dense": rank}, scores={"dense": dense}
        )

    def result(*cs: Candidate) -> RetrievalResult:
        return RetrievalResult(
            query="q", fusion="rrf", k=10, candidates=list(cs), hits={"dense": len(cs)},
            timings_ms={"total": 5.0},
        )  # fmt: skip

    one = result(cand("a", 0.5, 1), cand("b", 0.4, 2))
    two = result(cand("b", 0.9, 1), cand("c", 0.3, 2))
    assert fuse_results("q", [one]) is one
    fused = fuse_results("q", [one, two])
    assert fused.candidates[0].chunk.point_id == "b"  # found by both parts
    b = fused.candidates[0]
    assert b.ranks == {"dense": 1, "sub1": 2, "sub2": 1} and b.scores == {"dense": 0.9}
    assert fused.timings_ms == {"total": 10.0} and fused.hits == {"dense": 4}


def test_eval_has_one_row_per_transform_only_with_an_endpoint(
    settings: Settings, retriever: Retriever, stub: Stub
) -> None:
    assert not any(c.transforms for c in default_configs(settings))
    s = settings.model_copy(deep=True)
    s.generator.base_url = stub.url
    names = [c.name for c in default_configs(s) if c.transforms]
    assert names == ["hybrid-rrf+keywords", "hybrid-rrf+hyde", "hybrid-rrf+decompose"]
    queries = {"q1": "How does a volcano erupt?", "q2": "What do honeybees make?"}
    qrels = {"q1": {"volcanoes": 1}, "q2": {"honeybees": 1}}
    stub.replies += ["magma, lava", "honey, nectar"]
    configs: list[EvalConfig] = [fused_config("rrf"), fused_config("rrf", transforms=["keywords"])]
    rows = run_eval(s, queries, qrels, configs, depth=N, retriever=retriever)
    assert [r.name for r in rows] == ["hybrid-rrf", "hybrid-rrf+keywords"]
    assert len(stub.requests) == 2  # one keyword call per query, only for the transform row
    assert all(0.0 <= r.ndcg_10 <= 1.0 and r.p50_ms > 0 for r in rows)
