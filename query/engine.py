"""The query pipeline: retrieve → fuse → rerank → gate → assemble → generate → verify.

One `QueryEngine` owns the stores of one data dir (read-only use) and the models; the
HTTP server and the embedded `Client` both call `answer`, so they return identical
`Answer`s. Every query is one root span `ragstream.query` whose trace id the answer carries.
Query transforms (`query/transforms.py`: keywords, HyDE, decomposition), when switched on,
rewrite what each retrieval leg searches with; rerank, assembly and generation still see
the question as asked. `answer_from` skips retrieval for the gold-context evaluation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.retrieval_log import RetrievalLog
from ragstream.core.answers import (
    Answer,
    Answerability,
    CandidateView,
    Citation,
    QueryRequest,
    Refusal,
    Retrieval,
    RetrievedChunk,
    SourceChunk,
    Verification,
)
from ragstream.core.errors import ModelUnavailableError
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.telemetry import configure, span
from ragstream.operators.answer_judge import AnswerJudge, load_answer_judge
from ragstream.operators.embed import Embedder, with_vector_memo
from ragstream.operators.judge import load_judge
from ragstream.query.answerable import judge, named_terms, unmentioned
from ragstream.query.assemble import Context, assemble
from ragstream.query.decision import LEAD_TAIL, Decision, leg_leads, load_decision
from ragstream.query.freshness import with_versions
from ragstream.query.gate import DEFAULT_DENSE_FLOOR, gate, wordless
from ragstream.query.generate import ExtractiveGenerator, Generator, declined
from ragstream.query.rerank import NO_RERANKER, Reranked, load_reranker, rerank, rerank_depth
from ragstream.query.retrieve import (
    Candidate,
    FixedSide,
    LiveSide,
    RetrievalResult,
    Retriever,
)
from ragstream.query.transforms import QueryTransformer, endpoint_generator, retrieve_transformed
from ragstream.query.verify import verify

T = TypeVar("T")
# the side the current answer pinned (per thread / task: concurrent answers pin their own)
_PINNED: ContextVar[LiveSide | None] = ContextVar("ragstream_query_side", default=None)


class QueryEngine:
    def __init__(self, settings: Settings, retriever: Retriever) -> None:
        self.settings = settings
        self.retriever = retriever
        self.reranker = load_reranker(settings.query.reranker)
        q = settings.query
        self.support_judge = load_judge(q.judge)
        self.answer_judge = load_answer_judge(q.answer_judge)
        self.decision = _fitted_decision(self.answer_judge, q.decision)
        self.log = (
            RetrievalLog(settings.retrieval_log_path, q.log_max_bytes, q.log_keep)
            if q.log_queries
            else None
        )
        self.generator: Generator = endpoint_generator(settings.generator) or ExtractiveGenerator(
            lambda: self.sentence_embedder, judged=self.answer_judge is not None
        )
        # query transforms (keywords / HyDE / decompose): None unless switched on in settings
        self.transformer = QueryTransformer.from_settings(settings)

    @classmethod
    @contextmanager
    def open(cls, settings: Settings) -> Iterator[QueryEngine]:
        configure(settings.telemetry_exporter, settings.otlp_endpoint)
        with Retriever.open(settings) as retriever:
            yield cls(settings, retriever)

    @property
    def sentence_embedder(self) -> Embedder:
        """The answer's embedder behind the vector memo that the extractive generator and
        the verifier share (they encode mostly the same sentences): the side the answer
        pinned, so a promote or rollback landing mid-answer swaps neither model."""
        return with_vector_memo(self._side().embedder, self.settings.query.vector_memo)

    def _rerank_head(self, result: RetrievalResult, k: int) -> list[Candidate]:
        """What the reranker re-scores: the best `query.rerank_depth` fused candidates (at
        least k); without a reranker every candidate (the fused order is cut to k)."""
        depth = rerank_depth(self.reranker, self.settings.query.rerank_depth, k)
        return list(result.candidates[:depth])

    def _side(self) -> LiveSide:
        """The side this answer pinned (`_pinned`), else the live one now."""
        return _PINNED.get() or self.retriever.side

    @contextmanager
    def _pinned(self) -> Iterator[LiveSide]:
        """One side for every stage of one answer: retrieval, assembly (token counts, parent
        chunks), generation, verification and file versions all read the side the answer
        started on, however many promotes land meanwhile (the live pointer is read once)."""
        side = self._side()
        token = _PINNED.set(side)
        try:
            yield side
        finally:
            _PINNED.reset(token)

    @property
    def reranker_name(self) -> str:
        return self.reranker.name if self.reranker is not None else NO_RERANKER

    def answer(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Answer:
        """Answer one question; `tenants` comes from the caller's API key, never the body.

        `on_text` receives the generator's text as it is produced (streaming); the returned
        `Answer` is the verified one either way, so a streamed answer ends equal to an
        unstreamed one."""
        with self._pinned():
            answer = self._answer(request, tenants, on_text)
        if self.log is not None:
            self.log.append(_log_entry(request, tenants, answer))
        return answer

    def retrieve(self, request: QueryRequest, tenants: tuple[str, ...] | None = None) -> Retrieval:
        """Ranked candidates with their text and the gate's verdict; nothing is generated."""
        with (
            self._pinned(),
            span("query", query_chars=len(request.query), k=request.k, n=request.n) as root,
        ):
            trace_id = format(root.get_span_context().trace_id, "032x")
            timings: dict[str, float] = {}
            ranked, refusal, _ = self._rank(request, tenants, timings)
            root.set_attribute("refused", refusal is not None)
            return Retrieval(
                query=request.query,
                results=[_retrieved(i, r) for i, r in enumerate(ranked, 1)],
                refusal=refusal,
                embedder=self._ranked_by(ranked),
                reranker=self.reranker_name,
                timings_ms=timings,
                trace_id=trace_id,
            )

    def _rank(
        self, request: QueryRequest, tenants: tuple[str, ...] | None, timings: dict[str, float]
    ) -> tuple[list[Reranked], Refusal | None, dict[str, float]]:
        """retrieve → fuse → rerank → gate, under the caller's filters and tenants; also how
        far each leg's best candidate leads its pool (an answerability signal)."""
        q = self.settings.query
        f = request.filters
        flt = SearchFilter(
            doc_ids=tuple(f.doc_ids) if f.doc_ids is not None else None,
            tenants=tenants,
            path_prefix=f.path_prefix,
            file_types=tuple(f.file_types) if f.file_types is not None else None,
        )
        result = retrieve_transformed(
            Retriever(FixedSide(self._side()), self.retriever.lexical),
            request.query,
            self.transformer,
            n=request.n,
            flt=flt,
            fusion=request.fusion,
            k=request.rrf_k,
        )
        timings.update({f"retrieve.{k}": v for k, v in result.timings_ms.items()})
        ranked = _timed(
            timings,
            "rerank",
            lambda: rerank(
                request.query, self._rerank_head(result, request.k), self.reranker, request.k
            ),
        )
        floor = q.dense_floor if q.dense_floor is not None else DEFAULT_DENSE_FLOOR
        leads = leg_leads([c.scores for c in result.candidates[: LEAD_TAIL[1]]])
        refusal = wordless(request.query) or gate(
            ranked, rerank_floor=q.rerank_floor, dense_floor=floor
        )
        return ranked, refusal, leads

    def _answer(
        self,
        request: QueryRequest,
        tenants: tuple[str, ...] | None,
        on_text: Callable[[str], None] | None,
    ) -> Answer:
        with span("query", query_chars=len(request.query), k=request.k, n=request.n) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            timings: dict[str, float] = {}
            ranked, refusal, leads = self._rank(request, tenants, timings)
            answer = self._empty(request, ranked, trace_id, refusal)
            evidence: list[str] = []
            if refusal is None:
                answer.answerability, refusal, evidence = _timed(
                    timings, "answerable", lambda: self._answerable(request.query, ranked, leads)
                )
                answer.refusal = refusal
                answer.answered = answer.answerability.score
            if refusal is not None or not request.generate:
                answer.timings_ms = timings
                root.set_attribute("refused", refusal is not None)
                return answer
            answer = self._generate(request.query, ranked, answer, timings, on_text, evidence)
            root.set_attribute("refused", answer.refusal is not None)
            root.set_attribute("grounding", answer.grounding)
            return answer

    def answer_from(self, request: QueryRequest, chunks: Sequence[IndexedChunk]) -> Answer:
        """Generate and verify from exactly these chunks (best first), skipping retrieval,
        rerank and the gate: the gold-context evaluation asks whether the generator and the
        verifier accept an answer when the evidence is certainly in the context. Not logged:
        it is not a query anyone asked the index."""
        with (
            self._pinned(),
            span("query", query_chars=len(request.query), gold_context=len(chunks)) as root,
        ):
            trace_id = format(root.get_span_context().trace_id, "032x")
            ranked = [
                Reranked(candidate=Candidate(chunk=c, score=1.0 / i, ranks={}, scores={}))
                for i, c in enumerate(chunks, 1)
            ]
            # the answer judge's reading of the gold chunks (its verdict is not applied)
            _, _, evidence = self._answerable(request.query, ranked)
            answer = self._generate(
                request.query,
                ranked,
                self._empty(request, ranked, trace_id, None),
                {},
                evidence=evidence,
            )
            root.set_attribute("refused", answer.refusal is not None)
            root.set_attribute("grounding", answer.grounding)
            return answer

    def _generate(
        self,
        question: str,
        ranked: list[Reranked],
        answer: Answer,
        timings: dict[str, float],
        on_text: Callable[[str], None] | None = None,
        evidence: Sequence[str] = (),
    ) -> Answer:
        """assemble → generate → verify, then the refusal rules of `_complete`. `evidence`:
        the sentences the answerability judge read as answering, handed to the generator."""
        q = self.settings.query
        context = _timed(
            timings,
            "assemble",
            lambda: assemble(
                ranked,
                budget_tokens=q.budget_tokens,
                count_tokens=self._side().embedder.count_tokens,
                order=q.order,
                expand_parent=q.expand_parent,
                parent_lookup=self._side().vectors.live_chunks,
                query=question,
            ),
        )
        context.evidence = list(evidence)
        text = _timed(timings, "generate", lambda: self._text(question, context, on_text))
        checked = _timed(
            timings,
            "verify",
            lambda: verify(
                text,
                context.sources,
                self.sentence_embedder,
                cross_encoder=getattr(self.reranker, "model", None),
                judge=self.support_judge,
                contradiction_floor=q.contradiction_floor,
            ),
        )
        if declined(text):
            return self._declined(answer, text, timings, context.sources)
        answer = self._complete(answer, context.sources, checked)
        if answer.refusal is None and (unnamed := self._unnamed(answer)):
            answer = self._unnamed_refusal(answer, unnamed)
        answer.timings_ms = timings
        return answer

    def _answerable(
        self, question: str, ranked: list[Reranked], leads: dict[str, float] | None = None
    ) -> tuple[Answerability, Refusal | None, list[str]]:
        """The answerability judge (query/answerable.py) over the chunks that passed the
        gate: the answer judge reads the best sentences, and the decision combines its
        reading with the index's signals; when it says no, the answer is a
        `not_answerable` refusal. Also returns the sentences the answer judge read as
        holding the answer (at least `query.sentence_floor`), best first: what the
        extractive answer is made of."""
        q = self.settings.query
        floor = q.answerable_floor
        chunks = [r.candidate.chunk for r in ranked]
        dense = max((r.candidate.scores.get("dense", 0.0) for r in ranked), default=0.0)
        with span("query.answerable", floor=floor, chunks=len(chunks)) as sp:
            verdict, evidence = judge(
                question,
                chunks,
                self.retriever.lexical.doc_freqs,
                floor,
                dense,
                q.answerable_dense,
                scorer=self.answer_judge,
                judge_floor=q.judge_floor,
                judge_dense=q.judge_dense,
                sentences=q.judge_sentences,
                extra={**_ranking_signals(ranked), **(leads or {})},
                decision=self.decision,
                decision_floor=q.decision_floor,
            )
            sp.set_attribute("score", verdict.score)
            sp.set_attribute("answerable", verdict.answerable)
            if self.decision is not None:  # whose cosines the decision was fitted on
                sp.set_attribute("decision_embedder", self.decision.embedder)
            for name, value in verdict.signals.items():
                sp.set_attribute(f"signal.{name}", value)
        answering = [
            chunks[e.chunk].text[e.start : e.end] for e in evidence if e.answers >= q.sentence_floor
        ]
        if verdict.answerable:
            return verdict, None, answering
        coverage = verdict.signals["coverage_best"]
        unknown = not verdict.signals["question_terms"] or verdict.signals["unseen_term_share"] >= 1
        if unknown and dense < q.answerable_dense:
            detail = (
                "none of the question's terms occurs in the documents and no passage is close "
                f"to it in meaning (best cosine {dense:.2f}, enough: {q.answerable_dense:.2f})"
            )
        elif coverage < floor and dense < q.answerable_dense:
            detail = (
                f"the retrieved text covers {coverage:.0%} of what the question asks about "
                f"(minimum {floor:.0%}) and matches it in meaning at {dense:.2f} (enough: "
                f"{q.answerable_dense:.2f}): the documents do not seem to answer it"
            )
        else:
            detail = (
                f"no retrieved sentence answers the question: the best scores "
                f"{verdict.signals.get('judge_best', 0.0):.2f} with the answerability judge "
                f"({len(evidence)} sentences read), and all signals together give "
                f"{verdict.score:.2f} (minimum {verdict.floor:.2f})"
                if self.decision is not None
                else f"no retrieved sentence answers the question: the best scores "
                f"{verdict.score:.2f} with the answerability judge (minimum {q.judge_floor:.2f}; "
                f"{len(evidence)} sentences read)"
            )
        refusal = Refusal(
            reason="not_answerable", detail=detail, best_score=verdict.score, check="decision"
        )
        return verdict, refusal, answering

    def _declined(
        self, answer: Answer, text: str, timings: dict[str, float], sources: list[SourceChunk]
    ) -> Answer:
        """The generator said the sources do not hold the answer: one more answerability
        signal, and it is a `not_answerable` refusal whatever the other signals said."""
        if answer.answerability is not None:
            answer.answerability.signals["generator_declined"] = 1.0
            answer.answerability.answerable = False
            answer.answered = answer.answerability.score
        answer.text = ""
        answer.sources = sources  # what the generator was shown, as for any answer
        answer.refusal = Refusal(
            reason="not_answerable",
            detail=f"the generator found no answer in the sources: {declined(text)}",
            check="generator",
        )
        answer.timings_ms = timings
        return answer

    def _text(self, question: str, context: Context, on_text: Callable[[str], None] | None) -> str:
        if on_text is None:
            return self.generator.generate(question, context)
        pieces = []
        for piece in self.generator.stream(question, context):
            pieces.append(piece)
            on_text(piece)
        return "".join(pieces)

    def _ranked_by(self, ranked: Sequence[Reranked]) -> str:
        """The slug of the embedder whose collection ranked these candidates. Read from the
        candidates, not the live side: a promote or rollback between retrieval and here
        must not label an answer with the model that did not rank it."""
        slugs = (r.candidate.chunk.embedder for r in ranked if r.candidate.chunk.embedder)
        return next(slugs, self._side().embedder.version.slug)

    def _empty(
        self, request: QueryRequest, ranked: list[Reranked], trace_id: str, refusal: Refusal | None
    ) -> Answer:
        return Answer(
            query=request.query,
            text="",
            citations=[],
            claims=[],
            grounding=0.0,
            refusal=refusal,
            candidates=[_view(r) for r in ranked],
            embedder=self._ranked_by(ranked),
            reranker=self.reranker_name,
            generator=self.generator.name,
            trace_id=trace_id,
        )

    def _complete(
        self, answer: Answer, sources: list[SourceChunk], checked: Verification
    ) -> Answer:
        by_cid = {s.cid: s for s in sources}
        cited = sorted(
            {c for claim in checked.claims for c in claim.cids if c in by_cid},
            key=lambda c: int(c[1:]) if c[1:].isdigit() else 0,
        )
        answer.text = checked.text
        answer.claims = checked.claims
        answer.grounding = checked.grounding
        answer.invented_cids = checked.invented_cids
        answer.injection_flags = checked.injection_flags
        stored = self._side().vectors.get([s.point_id for s in sources]) if sources else []
        sources = with_versions(sources, stored)
        by_cid = {s.cid: s for s in sources}
        answer.sources = sources
        answer.citations = [_citation(by_cid[c]) for c in cited]
        q = self.settings.query
        if answer.answerability is not None:
            answer.answered = answer.answerability.score
        if not checked.claims:
            judged = answer.answerability is not None and self.answer_judge is not None
            answer.refusal = Refusal(
                reason="not_answerable" if judged else "insufficient_evidence",
                detail="the generator found no sentence in the sources that answers the question",
                best_score=max((s.score for s in sources), default=None),
                check="generator",
            )
        elif checked.grounding < q.min_grounding and q.on_low_grounding == "refuse":
            answer.refusal = Refusal(
                reason="unsupported_answer",
                detail=(
                    f"only {checked.grounding:.0%} of the answer's claims are supported by "
                    f"the sources it cites (minimum {q.min_grounding:.0%})"
                ),
                best_score=checked.grounding,
                check="grounding",
            )
        return answer

    def _unnamed_refusal(self, answer: Answer, unnamed: list[str]) -> Answer:
        """The answer cites no document that names what the question asks about: a
        `not_answerable` refusal, its text and claims withheld (the sources stay, as shown)."""
        if answer.answerability is not None:
            answer.answerability.signals["names_unmentioned"] = float(len(unnamed))
            answer.answerability.answerable = False
        answer.text, answer.claims, answer.citations = "", [], []
        answer.refusal = Refusal(
            reason="not_answerable",
            detail=(
                f"the question asks about {', '.join(unnamed)}, which the documents the "
                f"answer cites never mention"
            ),
            best_score=answer.answered,
            check="names",
        )
        return answer

    def _unnamed(self, answer: Answer) -> list[str]:
        """The question's proper names the cited documents never mention, when they mention
        less than `query.named_floor` of them (else []): an answer about Switzerland must
        cite a document that names it. A name missing from the cited chunks is looked up in
        the rest of their documents (a title, another section) before it counts as missing.
        Text as close in meaning as `query.answerable_dense` is exempt: it is about what was
        asked, and its name for it is likely another form of the same one ("Galliformes":
        "chicken", "Escherichia coli": "E. coli")."""
        q, question = self.settings.query, answer.query
        cited_ids = {c.cid for c in answer.citations}
        cited = [s for s in answer.sources if s.cid in cited_ids]
        signals = answer.answerability.signals if answer.answerability else {}
        names = named_terms(question)
        near = signals.get("dense_best", 0.0) >= q.answerable_dense
        missing = unmentioned(question, cited) if names and q.named_floor > 0 and not near else []
        if missing:
            lookup = self._side().vectors.live_chunks
            docs = [c for d in dict.fromkeys(s.doc_id for s in cited) for c in lookup(d)]
            missing = unmentioned(question, docs)
        return missing if missing and 1.0 - len(missing) / len(names) < q.named_floor else []


def _fitted_decision(answer_judge: AnswerJudge | None, mode: str) -> Decision | None:
    """The calibrated decision fitted with this answer judge (None: no judge, no fitted
    decision beside it, or `query.decision=rule`); one fitted with another judge is an
    error."""
    if answer_judge is None or mode != "calibrated":
        return None
    decision = load_decision(answer_judge.model_dir)
    if decision is not None and decision.judge != answer_judge.version:
        raise ModelUnavailableError(
            f"the answerability decision in {answer_judge.model_dir} was fitted with "
            f"{decision.judge}, not {answer_judge.version}: refit it (make decision) or set "
            "query.decision=rule"
        )
    return decision


def _ranking_signals(ranked: Sequence[Reranked]) -> dict[str, float]:
    """How decided the ranking is: do both retrieval legs put the top chunk in their own
    top 3 (`legs_agree`), and by how much does it lead the second (`top_margin`, relative)."""
    if not ranked:
        return {}
    ranks = ranked[0].candidate.ranks
    agree = all(ranks.get(leg, 10**6) <= 3 for leg in ("dense", "lexical"))
    first = ranked[0].score
    second = ranked[1].score if len(ranked) > 1 else 0.0
    margin = (first - second) / abs(first) if first else 0.0
    return {"legs_agree": float(agree), "top_margin": round(margin, 4)}


def _timed(timings: dict[str, float], name: str, fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    out = fn()
    timings[name] = round((time.perf_counter() - start) * 1000, 3)
    return out


def _view(r: Reranked) -> CandidateView:
    c = r.candidate
    return CandidateView(
        point_id=c.chunk.point_id,
        doc_id=c.chunk.doc_id,
        score=c.score,
        ranks=c.ranks,
        scores=c.scores,
        rerank_score=r.rerank_score,
        embedder=c.chunk.embedder,
    )


def _retrieved(rank: int, r: Reranked) -> RetrievedChunk:
    c = r.candidate
    return RetrievedChunk(
        **RetrievedChunk.fields_of(c.chunk),
        rank=rank,
        score=r.score,
        ranks=c.ranks,
        scores=c.scores,
        rerank_score=r.rerank_score,
        embedder=c.chunk.embedder,
    )


def _citation(s: SourceChunk) -> Citation:
    return Citation.model_validate(s.model_dump(include=set(Citation.model_fields)))


def _log_entry(
    request: QueryRequest, tenants: tuple[str, ...] | None, answer: Answer
) -> dict[str, Any]:
    return {
        "time": time.time(),
        "tenants": list(tenants) if tenants is not None else None,
        "query": request.query,
        "filters": request.filters.model_dump(exclude_none=True),
        "embedder": answer.embedder,
        "reranker": answer.reranker,
        "retrieved": [
            {
                "point_id": c.point_id,
                "doc_id": c.doc_id,
                "score": c.score,
                "rerank_score": c.rerank_score,
            }
            for c in answer.candidates
        ],
        "cited": [c.point_id for c in answer.citations],
        "grounding": answer.grounding,
        "answered": answer.answered,
        "refusal": answer.refusal.reason if answer.refusal else None,
        "answerability": answer.answerability.model_dump() if answer.answerability else None,
        "trace_id": answer.trace_id,
    }
