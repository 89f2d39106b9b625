"""The stages of one answer: what each computes into the answer in the making (`AnswerRun`),
then the refusal rules of query/refusal.py it applies.

A stage (`Stage`) is a name and a function `(parts, run) -> Refusal | None`: `parts` is what
it reads of the engine (`EngineParts`: settings, stores, models, generator), `run` the answer
so far, whose `question` every stage reads. A stage that waits on an LLM also carries its
awaitable form (`GENERATE`: the endpoint's completion awaited, assembly and verification
offloaded). Which stages run, in which order, and the refusal rules each applies are written
once, in the named pipelines of query/pipelines.py.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from opentelemetry.trace import Span

from ragstream.connectors.sources import configured
from ragstream.core.answers import (
    Answer,
    Answerability,
    QueryRequest,
    Refusal,
    SourceChunk,
)
from ragstream.core.answers import Verification as Verified
from ragstream.core.filters import Where
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.operators.answer_judge import AnswerJudge
from ragstream.operators.embed import Embedder
from ragstream.operators.judge import SupportJudge
from ragstream.query import recency, refusal, shapes
from ragstream.query.answerable import (
    AnswerRule,
    Asked,
    Evidence,
    Limits,
    answering,
    judge,
    new_terms,
    reading_language,
    said_as,
    said_before,
    unmentioned_in,
)
from ragstream.query.answerable import ranking_signals as ranking
from ragstream.query.assemble import Context, assemble
from ragstream.query.conversation import Bounded, ChatPlan, Rewriter
from ragstream.query.decision import LEAD_TAIL, Decision, asked_after, leg_leads
from ragstream.query.freshness import with_versions
from ragstream.query.gate import DEFAULT_DENSE_FLOOR
from ragstream.query.generate import GenerationError, Generator
from ragstream.query.recency import Recency
from ragstream.query.rerank import Reranked, Reranker, rerank, rerank_depth
from ragstream.query.retrieve import Candidate, FixedSide, LiveSide, Retriever
from ragstream.query.scales import CosineScales
from ragstream.query.transforms import QueryTransformer, retrieve_transformed
from ragstream.query.verify import verify


@dataclass
class AnswerRun:
    """One answer in the making: the request, the question being answered, and what the
    stages so far computed."""

    request: QueryRequest
    # the question every stage answers: set once, when the run starts, or (a conversation)
    # by the `converse` stage, the first, to the effective question
    question: str
    answer: Answer
    root: Span  # the answer's root span
    tenants: tuple[str, ...] | None = None
    on_text: Callable[[str], None] | None = None
    given: Sequence[IndexedChunk] = ()  # the chunks to answer from (`GIVEN`), best first
    # what the caller's principal may match in a chunk's `readers` (None: no filter)
    readers: tuple[str, ...] | None = None
    where: Where | None = None  # the request's metadata filter, checked (`core.filters`)
    recency: Recency | None = None  # the request's preference for recent documents
    ran: list[str] = field(default_factory=list)  # the names of the stages run so far
    timings: dict[str, float] = field(default_factory=dict)
    ranked: list[Reranked] = field(default_factory=list)
    leads: dict[str, float] = field(default_factory=dict)  # each leg's lead (rank stage)
    evidence: list[str] = field(default_factory=list)  # sentences read as answering
    read: list[Evidence] = field(default_factory=list)  # every sentence the judge read
    sources: list[SourceChunk] = field(default_factory=list)  # what the generator was shown
    checked: Verified | None = None
    history: Bounded | None = None  # a conversation's history (None: a single question)
    legs: ChatPlan | None = None  # a conversation's plan: what each retrieval leg searches
    # query vectors the conversation's standalone probe encoded, by (embedder slug, text):
    # the dense leg reuses the one for its own text instead of encoding it again
    probed: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # the terms a follow-up adds that no sentence read as answering holds (the refusal says so)
    unmatched: list[str] = field(default_factory=list)

    def rerank_failed(self, why: str) -> None:
        """A remote reranker failed: the answer names it with the fused order kept."""
        self.answer.reranker = f"{self.answer.reranker} (failed, fused order kept: {why})"


class EngineParts(Protocol):
    """What the stages read of the engine that runs them."""

    settings: Settings
    retriever: Retriever
    reranker: Reranker | None
    support_judge: SupportJudge | None
    answer_judge: AnswerJudge | None
    decision: Decision | None
    generator: Generator
    transformer: QueryTransformer | None
    rewriter: Rewriter
    scales: CosineScales

    @property
    def sentence_embedder(self) -> Embedder: ...

    def side(self) -> LiveSide: ...


# runs `fn(*args)` off the event loop (a server's bounded thread pool) and awaits the result
Offload = Callable[..., Awaitable[Any]]

# what a stage does: it computes into the run, then returns its rules' refusal or None
StageFn = Callable[[EngineParts, AnswerRun], Refusal | None]
AwaitedFn = Callable[[EngineParts, AnswerRun, Offload], Awaitable[Refusal | None]]


@dataclass(frozen=True)
class Stage:
    """One named stage of a pipeline: its blocking form, and, for a stage that waits on an
    LLM, its awaitable form (the CPU work on `offload`, the completion awaited)."""

    name: str
    run: StageFn
    awaited: AwaitedFn | None = None


def converse(parts: EngineParts, run: AnswerRun) -> None:
    """A conversation's question and history → the effective question and each leg's text
    (query/conversation.py): the offline plan, or the endpoint's rewrite when the question
    does not stand alone. Every later stage reads the effective question."""
    plan, rewriter = _offline(parts, run), parts.rewriter
    if rewriter.llm is not None and rewriter.wants_llm(plan):
        prompt = rewriter.prompt(run.answer.query, _history(run))
        try:
            with timed(run.timings, "converse.llm"):
                reply: str | None = rewriter.llm.generate("", prompt)
        except GenerationError:
            reply = None
        plan = rewriter.with_llm(plan, run.answer.query, _history(run), reply)
    _planned(run, plan)


async def converse_awaited(parts: EngineParts, run: AnswerRun, offload: Offload) -> None:
    """`converse` with the endpoint's rewrite awaited (the offline plan on `offload`)."""
    plan: ChatPlan = await offload(_offline, parts, run)
    rewriter = parts.rewriter
    agenerate = getattr(rewriter.llm, "agenerate", None)
    if agenerate is not None and rewriter.wants_llm(plan):
        prompt = rewriter.prompt(run.answer.query, _history(run))
        start = time.perf_counter()
        try:
            reply: str | None = await agenerate("", prompt)
        except GenerationError:
            reply = None
        run.timings["converse.llm"] = round((time.perf_counter() - start) * 1000, 3)
        plan = rewriter.with_llm(plan, run.answer.query, _history(run), reply)
    _planned(run, plan)


def _history(run: AnswerRun) -> Bounded:
    return run.history if run.history is not None else Bounded()


def _offline(parts: EngineParts, run: AnswerRun) -> ChatPlan:
    flt = shapes.search_filter(run.request.filters, run.tenants, run.readers, run.where)
    side = parts.side()
    retriever = Retriever(FixedSide(side), parts.retriever.lexical, memo=parts.retriever.memo)

    def best_bm25(text: str) -> float:
        hits = retriever.lexical_search(text, 1, flt)
        return hits[0].score if hits else 0.0

    def best_dense(text: str) -> float:
        key = (side.embedder.version.slug, text)
        if key not in run.probed:
            run.probed[key] = retriever.query_encoder(side).encode_query(text)
        vector = run.probed[key]
        hits = side.vectors.search(vector, 1, flt)
        return hits[0].score if hits else 0.0

    with timed(run.timings, "converse"):
        doc_freqs = parts.retriever.lexical.doc_freqs
        question, history = run.answer.query, _history(run)
        return parts.rewriter.offline(question, history, doc_freqs, best_bm25, best_dense)


def _planned(run: AnswerRun, plan: ChatPlan) -> None:
    run.question, run.legs = plan.question, plan
    run.answer.effective_query, run.answer.conversation = plan.effective, plan.record
    run.root.set_attribute("conversation.rewrite", plan.record.rewrite)
    run.root.set_attribute("conversation.standalone", plan.record.standalone)


def rank(parts: EngineParts, run: AnswerRun) -> Refusal | None:
    """retrieve → fuse → rerank under the caller's filters and tenants; also how far each
    leg's best candidate leads its pool (an answerability signal)."""
    q, request, plan, side = parts.settings.query, run.request, run.legs, parts.side()
    result = retrieve_transformed(
        Retriever(FixedSide(side), parts.retriever.lexical, memo=parts.retriever.memo),
        run.question,
        parts.transformer,
        n=request.n,
        flt=shapes.search_filter(request.filters, run.tenants, run.readers, run.where),
        fusion=request.fusion,
        k=request.rrf_k,
        dense_text=plan.dense if plan is not None else None,
        lexical_query=plan.sparse if plan is not None else None,
        dense_vector=(
            run.probed.get((side.embedder.version.slug, plan.dense)) if plan is not None else None
        ),
    )
    run.timings.update({f"retrieve.{k}": v for k, v in result.timings_ms.items()})
    depth = rerank_depth(parts.reranker, q.rerank_depth, request.k)
    head = list(result.candidates[:depth])  # at least k; all of them without a reranker
    with timed(run.timings, "rerank"):
        ranked = rerank(run.question, head, parts.reranker, request.k, run.rerank_failed)
    if run.recency is not None:  # a preference for recent documents (query/recency.py)
        ranked = recency.reordered(ranked, run.recency, dt.datetime.now(dt.UTC))
    record_ranked(parts, run, ranked)
    run.leads = leg_leads([c.scores for c in result.candidates[: LEAD_TAIL[1]]])
    dense_floor = q.dense_floor if q.dense_floor is not None else DEFAULT_DENSE_FLOOR
    return refusal.wordless(run.question) or refusal.gate(
        ranked,
        rerank_floor=q.rerank_floor,
        dense_floor=dense_floor,
        read_cosine=parts.scales.of(side).read,
    )


def record_ranked(parts: EngineParts, run: AnswerRun, ranked: list[Reranked]) -> None:
    """Record the ranked candidates, and the slug of the embedder whose collection ranked
    them: read from the candidates, not the live side, so a promote or rollback meanwhile
    never labels an answer with the model that did not rank it."""
    run.ranked = ranked
    run.answer.candidates = [shapes.candidate_view(r) for r in ranked]
    slugs = (r.candidate.chunk.embedder for r in ranked if r.candidate.chunk.embedder)
    run.answer.embedder = next(slugs, parts.side().embedder.version.slug)


def answerable(parts: EngineParts, run: AnswerRun) -> Refusal | None:
    """The answer judge reads the best sentences of the chunks that passed the gate, and the
    decision combines its reading with the index's signals (query/answerable.py)."""
    with timed(run.timings, "answerable"):
        verdict, read, dense = _judged(parts, run)
    run.answer.answerability, run.answer.answered = verdict, verdict.score
    limits, calibrated = Limits.from_settings(parts.settings.query), parts.decision is not None
    return refusal.not_answerable(verdict, limits, dense=dense, read=read, calibrated=calibrated)


def given(parts: EngineParts, run: AnswerRun) -> None:
    """The chunks given (`run.given`, best first) as the ranked candidates, in place of
    retrieval, rerank and the gate: no refusal rule applies."""
    gold = [
        Candidate(chunk=c, score=1 / i, ranks={}, scores={}) for i, c in enumerate(run.given, 1)
    ]
    record_ranked(parts, run, [Reranked(candidate=c) for c in gold])


def read(parts: EngineParts, run: AnswerRun) -> None:
    """The answer judge's reading of the chunks, for the generator; no verdict applied."""
    _judged(parts, run)


def _judged(parts: EngineParts, run: AnswerRun) -> tuple[Answerability, int, float]:
    """The answerability verdict on the ranked chunks (query/answerable.py `judge`), how many
    sentences the answer judge read, and the best dense cosine; `run.evidence` becomes the
    sentences it read as answering (`answering`)."""
    q, chunks = parts.settings.query, [r.candidate.chunk for r in run.ranked]
    cosines = [r.candidate.scores["dense"] for r in run.ranked if "dense" in r.candidate.scores]
    # on the scale the decision's floors were fitted on (query/scales.py)
    dense = parts.scales.of(parts.side()).read(max(cosines)) if cosines else 0.0
    signals = {**ranking(run.ranked), **run.leads, **asked_after(_history(run).messages)}
    languages = {s.name: s.language for s in parts.settings.sources if s.language}
    language = reading_language(run.question, chunks, languages)
    asked = Asked(run.question, chunks, parts.retriever.lexical.doc_freqs, dense, signals, language)
    verdict, evidence = judge(asked, Limits.from_settings(q), parts.answer_judge, parts.decision)
    run.read = evidence
    rule, turn = AnswerRule.from_settings(q), _turn_terms(parts, run)
    messages = _history(run).messages
    given = said_before(messages, run.answer.query) if q.conversation.fresh_lead else frozenset()
    run.evidence = answering(chunks, evidence, rule, turn, given)
    if turn and not run.evidence and answering(chunks, evidence, rule):
        # what the turn adds is in no sentence read as answering: its words, as asked
        run.unmatched = said_as(turn, run.answer.query)
    return verdict, len(evidence), dense


def _turn_terms(parts: EngineParts, run: AnswerRun) -> list[str]:
    """The terms a rewritten follow-up adds to its conversation, which its extractive
    answer's lead must share (`conversation.lead_shares_turn`); none for a question
    answered as asked."""
    q, asked = parts.settings.query, run.answer.query
    if not q.conversation.lead_shares_turn or run.question == asked:
        return []
    return new_terms(asked, [m.content for m in _history(run).messages])


def generate(parts: EngineParts, run: AnswerRun) -> Refusal | None:
    """assemble → generate → verify; the generator is handed the sentences the answer judge
    read as answering."""
    context = assembled(parts, run)
    with timed(run.timings, "generate"):
        text = _text(parts.generator, run.question, context, run.on_text)
    return checked(parts, run, context, text)


async def generate_awaited(parts: EngineParts, run: AnswerRun, offload: Offload) -> Refusal | None:
    """`generate` with an endpoint generator's completion awaited (`agenerate`), so a slow
    LLM costs waiting, not a thread; assembly and verification run through `offload`."""
    agenerate = parts.generator.agenerate  # type: ignore[attr-defined]
    context = await offload(assembled, parts, run)
    with timed(run.timings, "generate"):
        text = await agenerate(run.question, context, run.on_text)
    return cast(Refusal | None, await offload(checked, parts, run, context, text))


def _text(
    generator: Generator, question: str, context: Context, on_text: Callable[[str], None] | None
) -> str:
    if on_text is None:
        return generator.generate(question, context)
    pieces = []
    for piece in generator.stream(question, context):
        pieces.append(piece)
        on_text(piece)
    return "".join(pieces)


def assembled(parts: EngineParts, run: AnswerRun) -> Context:
    """The sources in the prompt (token budget, stable ids, delimiters), with the sentences
    the answer judge read as answering."""
    q, side = parts.settings.query, parts.side()
    # an endpoint writes a conversation's answer from the question as asked, with the
    # history; the extractive generator reads the effective question
    history = run.history.messages if run.history is not None else ()
    with_history = bool(history) and getattr(parts.generator, "reads_history", False)
    with timed(run.timings, "assemble"):
        context = assemble(
            run.ranked,
            budget_tokens=q.budget_tokens,
            count_tokens=side.embedder.count_tokens,
            order=q.order,
            expand_parent=q.expand_parent,
            parent_lookup=side.vectors.live_chunks,
            query=run.answer.query if with_history else run.question,
        )
    context.evidence, run.sources = list(run.evidence), context.sources
    context.history = list(history) if with_history else []
    return context


def checked(parts: EngineParts, run: AnswerRun, context: Context, text: str) -> Refusal | None:
    """The text verified against the sources it was written from; declined, the answer shows
    no text and the sources the generator was shown, as any answer does."""
    q = parts.settings.query
    with timed(run.timings, "verify"):
        run.checked = verify(
            text,
            context.sources,
            parts.sentence_embedder,
            cross_encoder=getattr(parts.reranker, "model", None),
            judge=parts.support_judge,
            contradiction_floor=q.contradiction_floor,
            ocr_min_confidence=q.ocr_min_confidence,
        )
    refused = refusal.declined_answer(text)
    if refused is not None:
        run.answer.sources = run.sources
        withhold(run.answer, "generator_declined", 1.0)
    return refused


def cite(parts: EngineParts, run: AnswerRun) -> Refusal | None:
    """The verified text and claims, the sources stamped with their file versions, and the
    citations of the sources the claims cite."""
    answer, result, q = run.answer, run.checked, parts.settings.query
    assert result is not None  # the generate stage ran
    for name in ("text", "claims", "grounding", "invented_cids", "injection_flags"):
        setattr(answer, name, getattr(result, name))
    stored = parts.side().vectors.get([s.point_id for s in run.sources]) if run.sources else []
    answer.sources = with_versions(run.sources, stored, configured(parts.settings, recorded=True))
    answer.citations = shapes.citations(result.claims, answer.sources)
    judged = answer.answerability is not None and parts.answer_judge is not None
    scores = [s.score for s in answer.sources]
    no_claim = refusal.no_answer(
        result.claims, judged=judged, scores=scores, unmatched=run.unmatched
    )
    return no_claim or (
        refusal.low_grounding(
            result.grounding, min_grounding=q.min_grounding, on_low=q.on_low_grounding
        )
    )


def names(parts: EngineParts, run: AnswerRun) -> Refusal | None:
    """The question's proper names in the documents the answer cites. Refused, the answer's
    text, claims and citations are withheld (the sources stay, as shown)."""
    answer, q = run.answer, parts.settings.query
    dense = answer.answerability.signals.get("dense_best", 0.0) if answer.answerability else 0.0
    asked = refusal.names_to_check(
        run.question,
        named_floor=q.answerable.named_floor,
        dense_best=dense,
        answerable_dense=q.answerable.dense,
    )
    documents = parts.side().vectors.live_chunks
    missing = unmentioned_in(asked, shapes.cited(answer), documents) if asked else []
    refused = refusal.unnamed(
        asked, missing, named_floor=q.answerable.named_floor, answered=answer.answered
    )
    if refused is not None:
        withhold(answer, "names_unmentioned", float(len(missing)))
    return refused


def withhold(answer: Answer, signal: str, value: float) -> None:
    """Withhold a refused answer's text, claims and citations, and record in its verdict
    (when it has one) the signal that refused it."""
    if answer.answerability is not None:
        answer.answerability.signals[signal] = value
        answer.answerability.answerable = False
    answer.text, answer.claims, answer.citations = "", [], []


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Record how long the block took, in ms, as `timings[name]` (not when it raises)."""
    start = time.perf_counter()
    yield
    timings[name] = round((time.perf_counter() - start) * 1000, 3)


# the stages by name; query/pipelines.py puts them in order
CONVERSE = Stage("converse", converse, awaited=converse_awaited)
RANK = Stage("rank", rank)
ANSWERABLE = Stage("answerable", answerable)
GIVEN = Stage("given", given)
READ = Stage("read", read)
GENERATE = Stage("generate", generate, awaited=generate_awaited)
CITE = Stage("cite", cite)
NAMES = Stage("names", names)
