"""The named pipelines of the query engine, and the one runner that runs them.

This is the one place the stage order is written (the stages are in query/stages.py), with
the refusal rules (query/refusal.py) each stage applies; the first refusal ends the answer:

- `RETRIEVE`: `rank`: retrieve → fuse → rerank; refused by `wordless` (no letters) and the
  sufficiency `gate` (`engine.retrieve`).
- `DECIDE`: `RETRIEVE`, then `answerable`: the answer judge and the decision; refused by
  `not_answerable` (an answer with `generate=False`).
- `ANSWER`: `DECIDE`, then `WRITE` (`engine.answer`, `engine.answer_async`).
- `FROM_CHUNKS`: `given` (the chunks given stand in for `RETRIEVE`), `read` (the answer
  judge's reading, its verdict not applied), then `WRITE` (`engine.answer_from`, the
  gold-context evaluation).
- `CHAT` / `CHAT_DECIDE` / `CHAT_RETRIEVE`: `converse` (a conversation's question and
  history → the effective question and each retrieval leg's text, query/conversation.py; no
  refusal rule), then `ANSWER` / `DECIDE` / `RETRIEVE` on the effective question
  (`engine.chat`, `engine.chat_async`, `engine.chat_retrieve`).
- `WRITE`: `generate`: assemble → generate → verify, refused by `declined_answer`; `cite`:
  text, citations and file versions, refused by `no_answer` and `low_grounding`; `names`: the
  question's proper names in the cited documents, refused by `unnamed`.

A pipeline is a tuple of `Stage`s, so adding a stage is one line:
`(*ANSWER, Stage("audit", audit))`.
`run_blocking` runs the stages in order until one refuses; `run_awaited` runs the same
stages with the same result for an asyncio server: consecutive CPU stages in one `offload`
call, and a stage's awaitable form (`Stage.awaited`) awaited on the loop. Either records each
stage's name in `AnswerRun.ran`, which the engine puts on the answer's root span (`stages`).
"""

from __future__ import annotations

from typing import cast

from ragstream.core.answers import Refusal
from ragstream.query.stages import (
    ANSWERABLE,
    CITE,
    CONVERSE,
    GENERATE,
    GIVEN,
    NAMES,
    RANK,
    READ,
    AnswerRun,
    EngineParts,
    Offload,
    Stage,
)

Pipeline = tuple[Stage, ...]

RETRIEVE: Pipeline = (RANK,)
DECIDE: Pipeline = (*RETRIEVE, ANSWERABLE)
WRITE: Pipeline = (GENERATE, CITE, NAMES)
ANSWER: Pipeline = (*DECIDE, *WRITE)
FROM_CHUNKS: Pipeline = (GIVEN, READ, *WRITE)
CHAT: Pipeline = (CONVERSE, *ANSWER)
CHAT_DECIDE: Pipeline = (CONVERSE, *DECIDE)
CHAT_RETRIEVE: Pipeline = (CONVERSE, *RETRIEVE)


def run_blocking(parts: EngineParts, run: AnswerRun, pipeline: Pipeline) -> Refusal | None:
    """The stages in order, each in its blocking form, until one refuses: that refusal, or
    None."""
    for stage in pipeline:
        run.ran.append(stage.name)
        if (refused := stage.run(parts, run)) is not None:
            return refused
    return None


def awaits(parts: EngineParts, pipeline: Pipeline) -> bool:
    """Whether the awaiting form has anything to await: a stage of `pipeline` has an
    awaitable form and the generator it awaits is an endpoint's (it has `agenerate`)."""
    awaitable = getattr(parts.generator, "agenerate", None) is not None
    return awaitable and any(stage.awaited is not None for stage in pipeline)


async def run_awaited(
    parts: EngineParts, run: AnswerRun, pipeline: Pipeline, offload: Offload
) -> Refusal | None:
    """`run_blocking` for an asyncio server, the same stages and result: consecutive CPU
    stages run in one `offload` call (a bounded thread pool), each stage's awaitable form is
    awaited between them. With nothing to await (`awaits`), the whole pipeline is one call."""
    if not awaits(parts, pipeline):
        return cast(Refusal | None, await offload(run_blocking, parts, run, pipeline))
    cpu: list[Stage] = []
    for stage in (*pipeline, None):  # None: the end, where the last CPU stages run
        if stage is not None and stage.awaited is None:
            cpu.append(stage)
            continue
        refused = await offload(run_blocking, parts, run, tuple(cpu)) if cpu else None
        cpu = []
        if refused is not None or stage is None:
            return cast(Refusal | None, refused)
        assert stage.awaited is not None
        run.ran.append(stage.name)
        if (refused := await stage.awaited(parts, run, offload)) is not None:
            return refused
    return None
