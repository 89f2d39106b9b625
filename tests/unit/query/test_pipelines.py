"""The named pipelines (query/pipelines.py) on a real index: each one, blocking and awaited,
returns the same answer on the same question; a stage added to a pipeline in one line runs
and shows on the answer's root span; every stage reads the one question on the run.

The index, the embedder, the stores and the models are real; the endpoint generator talks to
the OpenAI-compatible stub (tests/conftest.py), so the awaited runs await a real completion.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import Stub
from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.operators.judge import BUNDLED, load_judge
from ragstream.query import pipelines
from ragstream.query.engine import QueryEngine
from ragstream.query.generate import OpenAIGenerator
from ragstream.query.stages import GENERATE, AnswerRun, EngineParts, Stage

DOCS = {
    "volcanoes.md": "# Volcanoes\n\nA volcano erupts when magma rises through the crust. "
    "Basaltic lava flows from shield volcanoes such as Mauna Loa.\n",
    "sourdough.md": "# Sourdough bread\n\nSourdough is leavened by a starter of wild yeast and "
    "lactobacilli. Bakers feed the starter flour and water, then proof the dough overnight.\n",
    "honeybees.md": "# Honeybees\n\nHoneybees pollinate flowers and store nectar as honey in "
    "the hive. Worker bees perform the waggle dance to share where pollen is found.\n",
}
QUESTION = "What is sourdough bread leavened by?"
PIPELINES = ("RETRIEVE", "DECIDE", "ANSWER", "FROM_CHUNKS")
UNTIMED = {"trace_id", "timings_ms"}  # differ between any two runs


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueryEngine]:
    root = tmp_path_factory.mktemp("pipelines") / "alpha"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        sources=[FolderConfig(name="alpha", root=root)],
        query={"log_queries": False},
    )
    report = api.sync([root], settings=settings)
    assert report.docs_changed == len(DOCS) and not report.dead_letters
    with QueryEngine.open(settings) as eng:
        yield eng


def with_endpoint(engine: QueryEngine, stub: Stub) -> QueryEngine:
    """The same index and models, answering with an endpoint generator (it has `agenerate`)."""
    stub.default = "Sourdough is leavened by a starter of wild yeast and lactobacilli [S1]."
    other = QueryEngine(engine.settings, engine.retriever, engine.models)
    other.generator = OpenAIGenerator(stub.url, "stub-model", max_retries=0)
    return other


async def offload(fn: Callable[..., Any], *args: Any) -> Any:
    """A server's offload: `fn(*args)` on a worker thread, the context variables along."""
    return await asyncio.to_thread(fn, *args)


def both(engine: QueryEngine, pipeline: pipelines.Pipeline) -> tuple[AnswerRun, AnswerRun]:
    """The blocking and the awaited run of `pipeline` on the same question (the chunks
    `RETRIEVE` ranks are the ones `FROM_CHUNKS` is given)."""
    request = QueryRequest(query=QUESTION)
    retrieved = engine.run(pipelines.RETRIEVE, request)
    given = [r.candidate.chunk for r in retrieved.ranked]
    blocking = engine.run(pipeline, request, None, None, given)
    awaited = asyncio.run(engine.run_async(pipeline, request, None, None, given, offload=offload))
    return blocking, awaited


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("generator", ["extractive", "endpoint"])
def test_blocking_and_awaited_runs_return_equal_answers(
    engine: QueryEngine, stub: Stub, name: str, generator: str
) -> None:
    eng = with_endpoint(engine, stub) if generator == "endpoint" else engine
    pipeline = getattr(pipelines, name)
    blocking, awaited = both(eng, pipeline)
    assert blocking.ran == awaited.ran == [stage.name for stage in pipeline]  # none refused
    assert awaited.answer.model_dump(exclude=UNTIMED) == blocking.answer.model_dump(exclude=UNTIMED)
    assert awaited.answer.timings_ms.keys() == blocking.answer.timings_ms.keys()
    # an endpoint generator's completion is awaited, stage by stage, where a pipeline writes
    writes = generator == "endpoint" and GENERATE in pipeline
    assert pipelines.awaits(eng, pipeline) is writes


def test_the_public_methods_run_their_pipelines(engine: QueryEngine) -> None:
    request = QueryRequest(query=QUESTION)
    undecided = request.model_copy(update={"generate": False})
    answered, decided = engine.answer(request), engine.answer(undecided)
    assert answered.model_dump(exclude=UNTIMED) == engine.run(
        pipelines.ANSWER, request
    ).answer.model_dump(exclude=UNTIMED)
    assert decided.model_dump(exclude=UNTIMED) == engine.run(
        pipelines.DECIDE, undecided
    ).answer.model_dump(exclude=UNTIMED)
    assert answered.refusal is None and answered.query == QUESTION


def test_only_a_verified_answer_opens_the_support_judge(
    engine: QueryEngine, stub: Stub, tmp_path: Path
) -> None:
    """The verifier alone reads the support judge: a retrieval and a `generate=False`
    answer leave its model unopened; the first answer whose claims it must judge (a
    generator's paraphrase, not a sentence copied from a source) opens it."""
    link = tmp_path / "judge"
    link.symlink_to(BUNDLED)  # another path: not the process's shared bundled judge
    judge = load_judge(str(link))
    assert judge is not None and not judge.loaded
    models = dataclasses.replace(engine.models, support_judge=judge)
    fresh = QueryEngine(engine.settings, engine.retriever, models)
    fresh.retrieve(QueryRequest(query=QUESTION))
    decided = fresh.answer(QueryRequest(query=QUESTION, generate=False))
    assert decided.refusal is None and not judge.loaded
    fresh.answer(QueryRequest(query=QUESTION))  # extractive: copied sentences
    paraphrasing = with_endpoint(fresh, stub)
    stub.default = "Sourdough rises because a starter of wild yeast leavens it [S1]."
    answered = paraphrasing.answer(QueryRequest(query=QUESTION))
    assert answered.claims and judge.loaded


def test_a_stage_added_in_one_line_runs_and_shows_in_the_spans(
    engine: QueryEngine, spans: InMemorySpanExporter
) -> None:
    seen: list[str] = []

    def noop(parts: EngineParts, run: AnswerRun) -> None:
        seen.append(run.question)

    pipeline = (*pipelines.DECIDE, Stage("noop", noop))  # the one line
    spans.clear()
    run = engine.run(pipeline, QueryRequest(query=QUESTION))
    root = [s for s in spans.get_finished_spans() if s.name == "ragstream.query"][-1]
    assert root.attributes is not None
    assert tuple(root.attributes["stages"]) == ("rank", "answerable", "noop")
    assert seen == [QUESTION] and run.answer.refusal is None
    awaited = asyncio.run(engine.run_async(pipeline, QueryRequest(query=QUESTION), offload=offload))
    assert awaited.ran[-1] == "noop" and seen == [QUESTION, QUESTION]


def test_every_stage_reads_the_one_question_on_the_run(engine: QueryEngine) -> None:
    """A stage that rewrites the question before retrieval changes what every later stage
    answers: the sources and the text follow the rewritten question."""

    def rewrite(parts: EngineParts, run: AnswerRun) -> None:
        run.question = "How do honeybees share where pollen is found?"

    run = engine.run((Stage("rewrite", rewrite), *pipelines.ANSWER), QueryRequest(query=QUESTION))
    assert run.answer.refusal is None, run.answer.refusal
    cited = [c.doc_id for c in run.answer.citations]
    assert cited[:1] == ["alpha:honeybees.md"] and "waggle dance" in run.answer.text
    plain = engine.run(pipelines.ANSWER, QueryRequest(query=QUESTION)).answer
    assert [c.doc_id for c in plain.citations][:1] == ["alpha:sourdough.md"]
