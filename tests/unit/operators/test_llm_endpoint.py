"""The query pipeline against a real OpenAI-compatible LLM server (`make test-llm`).

`make test-llm` starts llama-cpp-python's server with SmolLM2-135M-Instruct (`make llm`) and
runs this module with `-m llm` and `RAGSTREAM_TEST_LLM_URL` pointing at it; `make test`
deselects it (tests/conftest.py). Everything goes through the real `openai` client, as a
deployment with `generator.base_url` would. A 135M model invents things: the assertions are
about the contract (generator name, citations only to sources in the context, every claim
scored, grounding in [0, 1], refusals structured), i.e. that the verifier catches what the
model makes up, never about what the model says.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.core.answers import Answer, QueryRequest
from ragstream.core.settings import Settings
from ragstream.query.engine import QueryEngine
from ragstream.query.verify import strip_invented
from ragstream.service.served import open_engine
from tests.harness.helpers import copy_docs

pytestmark = [pytest.mark.llm]

LLM_URL = os.environ.get("RAGSTREAM_TEST_LLM_URL")  # a non-setting variable Settings allows
MODEL = "smollm2"  # the --model_alias of `make llm`
DOCS = (
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_architecture.md",
    "html/python311_tutorial_appetite.html",
)
TRANSFORM_SPAN = "ragstream.query.transform."
ON_TOPIC = "What does the hybrid chunker do with the hierarchical chunks?"


@pytest.fixture(scope="module")
def llm_url() -> str:
    if not LLM_URL:
        pytest.fail(
            "RAGSTREAM_TEST_LLM_URL is not set: these tests need a running OpenAI-compatible "
            "server; run them with `make test-llm` (it starts one), or start `make llm` and "
            "pass RAGSTREAM_TEST_LLM_URL=http://127.0.0.1:8766/v1 with -m llm"
        )
    from openai import OpenAI

    models = [m.id for m in OpenAI(base_url=LLM_URL, api_key="unused").models.list()]
    assert MODEL in models, f"{LLM_URL} serves {models}, not {MODEL!r}"
    return LLM_URL


@pytest.fixture(scope="module")
def settings(llm_url: str, tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> Settings:
    base = tmp_path_factory.mktemp("llm")
    root = copy_docs(shared_docs, DOCS, base / "docs", flat=True)
    s = Settings(
        data_dir=base / "data",
        generator={"base_url": llm_url, "model": MODEL, "max_tokens": 128, "timeout_s": 120},
    )
    report = api.sync([root], settings=s)  # the source is named by its folder: docs
    assert report.dead_letters == []
    return s


@pytest.fixture(scope="module")
def engine(settings: Settings) -> Iterator[QueryEngine]:
    with open_engine(settings) as (eng, _maintainer):
        yield eng


def check_contract(answer: Answer) -> None:
    """What must hold whatever the model wrote."""
    assert answer.generator == f"openai:{MODEL}"
    source_ids = {s.cid for s in answer.sources}
    assert {c.cid for c in answer.citations} <= source_ids
    for claim in answer.claims:  # every claim scored, cites only sources in the context
        assert set(claim.cids) <= source_ids, (claim, answer.invented_cids)
        assert 0.0 <= claim.score <= 1.0
        if claim.supported:
            assert claim.support_cid in claim.cids
    assert 0.0 <= answer.grounding <= 1.0
    for cid in answer.invented_cids:  # flagged and removed from the text
        assert cid not in source_ids and f"[{cid}]" not in answer.text
    if answer.refusal is None:
        assert answer.text.strip() and answer.claims
        assert answer.grounding >= 0.5  # query.min_grounding: below it the engine refuses
    else:
        reasons = ("insufficient_evidence", "unsupported_answer", "not_answerable")
        assert answer.refusal.reason in reasons
        if answer.refusal.reason == "not_answerable" and "generate" in answer.timings_ms:
            verdict = answer.answerability  # the model itself said the sources lack it
            assert verdict is not None and verdict.signals.get("generator_declined") == 1.0


def test_on_topic_answer_is_generated_and_verified(engine: QueryEngine) -> None:
    answer = engine.answer(QueryRequest(query=ON_TOPIC))
    assert answer.candidates[0].doc_id == "docs:docling_concepts_chunking.md"
    assert "generate" in answer.timings_ms and "verify" in answer.timings_ms  # the LLM ran
    assert answer.sources
    check_contract(answer)
    assert answer.text.strip() or answer.refusal is not None


def test_streaming_yields_pieces_that_make_the_answer(engine: QueryEngine) -> None:
    pieces: list[str] = []
    answer = engine.answer(QueryRequest(query=ON_TOPIC), on_text=pieces.append)
    assert len(pieces) > 1, pieces
    streamed = "".join(pieces)
    check_contract(answer)
    # the verified text is the streamed text less any invented citations
    valid = {s.cid for s in answer.sources}
    assert answer.text == strip_invented(streamed, valid)[0]


def test_off_topic_question_is_refused_or_flagged(settings: Settings, engine: QueryEngine) -> None:
    request = QueryRequest(query="What is the best recipe for banana bread?")
    gated = engine.answer(request)  # the sufficiency gate refuses before any LLM call
    check_contract(gated)
    assert gated.refusal is not None and "generate" not in gated.timings_ms
    # with the gate and the answerability judge off the model is asked: it must decline
    # (NOT_ANSWERABLE, one more answerability signal) or the verifier must catch its answer
    query = settings.query.model_copy(update={"dense_floor": -1.0, "judge": "none"})
    ungated = QueryEngine(settings.model_copy(update={"query": query}), engine.retriever)
    answer = ungated.answer(request)
    assert "generate" in answer.timings_ms
    check_contract(answer)
    unsupported = [c for c in answer.claims if not c.supported]
    assert answer.refusal is not None or unsupported or answer.invented_cids, answer
    judged = QueryEngine(
        settings.model_copy(
            update={"query": settings.query.model_copy(update={"dense_floor": -1.0})}
        ),
        engine.retriever,
    ).answer(request)  # the judge alone refuses it before the model is asked
    assert judged.refusal is not None and judged.refusal.reason == "not_answerable"
    assert "generate" not in judged.timings_ms


def test_query_transforms_run_against_the_endpoint(
    settings: Settings, engine: QueryEngine, spans: InMemorySpanExporter
) -> None:
    on = {"transform_keywords": True, "transform_hyde": True, "transform_decompose": True}
    query = settings.query.model_copy(update=on)
    transforming = QueryEngine(settings.model_copy(update={"query": query}), engine.retriever)
    assert transforming.transformer is not None
    question = "How does Docling chunk documents, and why is Python good for scripting?"
    spans.clear()
    got = transforming.retrieve(QueryRequest(query=question, generate=False))
    calls = [s for s in spans.get_finished_spans() if s.name.startswith(TRANSFORM_SPAN)]
    names = {s.name.removeprefix(TRANSFORM_SPAN) for s in calls}
    assert names == {"keywords", "hyde", "decompose"}, names
    # every call answered: a failed one falls back to the question and is marked on its span
    assert not [s.attributes for s in calls if (s.attributes or {}).get("failed")]
    assert all((s.attributes or {}).get("output_chars", 0) > 0 for s in calls)
    for name in ("keywords", "hyde", "decompose"):
        assert got.timings_ms[f"retrieve.transform.{name}"] > 0
    assert {r.doc_id for r in got.results} & {
        "docs:docling_concepts_chunking.md",
        "docs:python311_tutorial_appetite.html",
    }
