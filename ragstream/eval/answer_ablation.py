"""Assembly ablation measured on answers (`ragstream eval --mode answers`).

Parent-section expansion ("retrieve small, serve large") and document order both claim to
make *answers* better, so they are judged on what the whole answer path returns, not on
retrieval metrics (neither changes the ranking). Every judged question is asked once per
row through the real `QueryEngine.answer` (retrieve → rerank → gate → assemble → generate →
verify), all rows on one open index in one run, interleaved per question so that machine
load hits every row alike. A row differs from the others only in the real settings
`query.order` and `query.expand_parent`, validated as `QuerySettings`; both are set on every
row, so the baseline stays "score order, no expansion" whatever the defaults become.

Metrics, per row, over the judged questions (R = the question's documents with qrels > 0):

- `answered`: share not refused (by the gate, the generator or the grounding rule).
- `gold_in_context`: share whose assembled sources include a document of R: the evidence
  reached the generator (expansion can lose it: whole sections fill the budget sooner).
- `gold_cited`: share answered *and* citing a document of R. With the offline extractive
  generator every claim is a verbatim source sentence, so this reads "the answer was taken
  from a relevant abstract"; whether it is the *right* sentence, or says SUPPORT/CONTRADICT,
  is not judged (BEIR qrels carry no rationale sentences), hence the name, not "correct".
- `citation_precision`: over answers citing anything, the mean share of distinct cited
  documents that are in R (documents, not sources: an expanded source is a whole section).
- `grounding`: over answers with claims (including ones refused as unsupported), the mean
  verifier grounding (supported ÷ claims); ~1.0 by construction for the extractive generator,
  informative only with an LLM endpoint.
- `sources`, `context_docs`, `context_tokens`: means over questions that reached assembly;
  tokens are the rendered source blocks counted with the embedder's tokenizer, exactly what
  `query.budget_tokens` bounds (the prompt-size cost of expansion).
- `changed`: share of answers whose text differs from the first row's (what a row changes at
  all; document order can only reorder the extractive generator's sentences, since their
  scores do not depend on position — its claimed benefit, an LLM losing the middle of a long
  context, cannot be measured offline).
- `p50_ms` / `p95_ms`: wall time of `QueryEngine.answer`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragstream.core.answers import Answer, QueryRequest
from ragstream.core.settings import NAMED_FLOOR, QuerySettings, Settings, switched_off
from ragstream.eval.answer_eval import latency
from ragstream.eval.beir import Qrels, Queries, doc_key
from ragstream.eval.negate import negate
from ragstream.query.assemble import render
from ragstream.query.engine import QueryEngine
from ragstream.query.verify import verify

log = logging.getLogger(__name__)

# row name -> the query settings it runs with; the first row is the baseline of `changed`
ASSEMBLY_ROWS: dict[str, dict[str, Any]] = {
    "score order": {"order": "score", "expand_parent": False},
    "+document order": {"order": "document", "expand_parent": False},
    "+parent expansion": {"order": "score", "expand_parent": True},
    "+both": {"order": "document", "expand_parent": True},
}
# one row per answerability check: what each costs in answered / gold-cited questions (the
# support judge verifies claims in every row: the negation probe)
ANSWERABILITY_ROWS: dict[str, dict[str, Any]] = {
    "no answerability check": {
        "answerable.judge": "none",
        "answerable.floor": 0.0,
        "answerable.named_floor": 0.0,
    },
    "+coverage/dense 0.5/0.5": {
        "answerable.judge": "none",
        "answerable.floor": 0.5,
        "answerable.dense": 0.5,
        "answerable.named_floor": 0.0,
    },
    "+judge, floor rule": {
        "answerable.judge": "bundled",
        "answerable.decision": "rule",
        "answerable.floor": 0.0,
        "answerable.named_floor": 0.0,
    },
    "+judge, calibrated decision": {
        "answerable.judge": "bundled",
        "answerable.decision": "calibrated",
        "answerable.floor": 0.0,
        "answerable.named_floor": 0.0,
    },
    "+calibrated +names cited (default)": {
        "answerable.judge": "bundled",
        "answerable.decision": "calibrated",
        "answerable.floor": 0.0,
        "answerable.named_floor": NAMED_FLOOR,
    },
    "+calibrated +names +coverage/dense": {
        "answerable.judge": "bundled",
        "answerable.decision": "calibrated",
        "answerable.floor": 0.5,
        "answerable.dense": 0.5,
        "answerable.named_floor": NAMED_FLOOR,
    },
}
JUDGE = "answerable.judge"  # a row's answer judge (`query.answerable.judge`)
ROW_SETS: dict[str, dict[str, dict[str, Any]]] = {
    "assembly": ASSEMBLY_ROWS,
    "answerability": ANSWERABILITY_ROWS,
    "all": ASSEMBLY_ROWS | ANSWERABILITY_ROWS,
}


class AnswerRow(BaseModel):
    """One assembly configuration's answer-quality figures (see the module docstring)."""

    name: str
    settings: dict[str, Any]  # the `query.*` values this row sets
    answered: float
    gold_in_context: float
    gold_cited: float
    citation_precision: float
    grounding: float
    sources: float
    context_docs: float
    context_tokens: float
    changed: float
    # negation probe: every claim of every answer, negated (`eval.negate`) and verified
    # against the same sources; the share marked unsupported. `faithful_kept`: the share of
    # the answers' own claims marked supported (the same claims, as written)
    contradictions_caught: float
    faithful_kept: float
    p50_ms: float
    p95_ms: float
    # the answerable questions each check refused (`Refusal.check`; the reason when none)
    refused_by_check: dict[str, int] = {}


class AnswerAblation(BaseModel):
    """The `answers` mode's report: one row per assembly configuration, same questions."""

    questions: int
    generator: str
    k: int  # chunks after rerank, what assembly chooses from
    n: int  # candidates per retrieval leg (the query default, not the eval's depth)
    budget_tokens: int
    rows: list[AnswerRow]


class Scored(BaseModel):
    """One answer judged against its question's relevant documents."""

    answered: bool
    gold_in_context: bool
    gold_cited: bool
    precision: float | None  # None: nothing cited
    grounding: float | None  # None: no claims
    sources: int | None  # None: refused before assembly (the gate)
    context_docs: int | None
    tokens: int | None
    text: str
    cited: list[str]
    refused_by: str | None = None  # the check that refused (`Refusal.check`), or the reason
    negated: int = 0  # claims negated by the probe
    negated_caught: int = 0  # of which the verifier marked unsupported
    claims: int = 0
    supported: int = 0
    ms: float


def with_configured_judge(overrides: Mapping[str, Any], judge: str) -> dict[str, Any]:
    """A row's settings with the answer judge this index is configured with
    (`query.answerable.judge`) in place of the bundled one, so a row that reads a judge
    measures the judge (and the decision beside it) the engine serves with: a judge
    directory refitted for a tuned embedder, say. A row without a judge, or an index
    configured with none, is unchanged.

    >>> with_configured_judge(
    ...     {"answerable.judge": "bundled", "answerable.decision": "rule"}, "/m/judge"
    ... )
    {'answerable.judge': '/m/judge', 'answerable.decision': 'rule'}
    >>> with_configured_judge({"answerable.judge": "bundled"}, "none")
    {'answerable.judge': 'bundled'}
    """
    if overrides.get(JUDGE) == "bundled" and not switched_off(judge):
        return {**overrides, JUDGE: judge}
    return dict(overrides)


def row_settings(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """`settings` with these `query.*` fields (named below `query`, dotted into its groups:
    `answerable.floor`), validated like any configured value."""
    values = settings.query.model_dump()
    for name, value in overrides.items():
        *groups, leaf = name.split(".")
        table = values
        for group in groups:
            table = table.setdefault(group, {})
        table[leaf] = value
    query = QuerySettings.model_validate(values)
    return settings.model_copy(update={"query": query})


def score_answer(
    answer: Answer,
    relevant: set[str],
    count_tokens: Callable[[Sequence[str]], list[int]],
    ms: float,
) -> Scored:
    """Judge one answer; context tokens are counted as `assemble` counts its budget (each
    rendered source block, with the embedder's `count_tokens`)."""
    context = {doc_key(s.doc_id) for s in answer.sources}
    cited = sorted({doc_key(c.doc_id) for c in answer.citations})
    answered = answer.refusal is None
    assembled = "assemble" in answer.timings_ms  # not refused by the gate before it
    tokens = count_tokens([render(s) for s in answer.sources])
    return Scored(
        answered=answered,
        gold_in_context=bool(context & relevant),
        gold_cited=answered and bool(set(cited) & relevant),
        precision=len(set(cited) & relevant) / len(cited) if cited else None,
        grounding=answer.grounding if answer.claims else None,
        sources=len(answer.sources) if assembled else None,
        context_docs=len(context) if assembled else None,
        tokens=sum(tokens) if assembled else None,
        text=answer.text,
        cited=cited,
        refused_by=(answer.refusal.check or answer.refusal.reason) if answer.refusal else None,
        ms=ms,
    )


def _mean(values: Sequence[float | int | bool | None]) -> float:
    """Mean over the defined values (None = not applicable to that question); 0 for none."""
    kept = [float(v) for v in values if v is not None]
    return float(np.mean(kept)) if kept else 0.0


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def summarize(
    name: str, overrides: Mapping[str, Any], scored: Sequence[Scored], baseline: Sequence[Scored]
) -> AnswerRow:
    """A row from its questions' scores (`baseline`: the first row's, same question order)."""
    p50, p95 = latency([s.ms for s in scored])
    return AnswerRow(
        name=name,
        settings=dict(overrides),
        answered=_mean([s.answered for s in scored]),
        gold_in_context=_mean([s.gold_in_context for s in scored]),
        gold_cited=_mean([s.gold_cited for s in scored]),
        citation_precision=_mean([s.precision for s in scored]),
        grounding=_mean([s.grounding for s in scored]),
        sources=_mean([s.sources for s in scored]),
        context_docs=_mean([s.context_docs for s in scored]),
        context_tokens=_mean([s.tokens for s in scored]),
        changed=_mean([s.text != b.text for s, b in zip(scored, baseline, strict=True)]),
        contradictions_caught=_share(
            sum(s.negated_caught for s in scored), sum(s.negated for s in scored)
        ),
        faithful_kept=_share(sum(s.supported for s in scored), sum(s.claims for s in scored)),
        p50_ms=p50,
        p95_ms=p95,
        refused_by_check=dict(Counter(s.refused_by for s in scored if s.refused_by)),
    )


def answer_ablation(
    engine: QueryEngine,
    queries: Queries,
    qrels: Qrels,
    k: int,
    rows: str = "all",
) -> tuple[AnswerAblation, list[dict[str, Any]]]:
    """Every question through every row's engine (`engine`'s stores, the row's settings);
    the report, and one detail per question on which the rows disagree about `answered` or
    `gold_cited` (where a row made a difference worth reading)."""
    settings = engine.settings
    chosen = {
        name: with_configured_judge(overrides, settings.query.answerable.judge)
        for name, overrides in ROW_SETS[rows].items()
    }
    engines = {
        name: engine.configured(row_settings(settings, overrides))
        for name, overrides in chosen.items()
    }
    # one-off model / store costs stay out of the latencies (the engines share the retriever)
    next(iter(engines.values())).answer(QueryRequest(query=next(iter(queries.values())), k=k))
    scored: dict[str, list[Scored]] = {name: [] for name in engines}
    details: list[dict[str, Any]] = []
    for i, (qid, text) in enumerate(queries.items(), 1):
        relevant = {d for d, rel in qrels[qid].items() if rel > 0}
        mine = {name: _ask(row, text, k, relevant) for name, row in engines.items()}
        for name, s in mine.items():
            scored[name].append(s)
        if len({(s.answered, s.gold_cited) for s in mine.values()}) > 1:
            details.append(_detail(qid, text, relevant, mine))
        if i % 25 == 0:
            log.info("answers: %d/%d questions", i, len(queries))
    baseline = scored[next(iter(scored))]
    report = AnswerAblation(
        questions=len(queries),
        generator=next(iter(engines.values())).generator.name,
        k=k,
        n=QueryRequest.model_fields["n"].default,
        budget_tokens=settings.query.budget_tokens,
        rows=[summarize(name, chosen[name], s, baseline) for name, s in scored.items()],
    )
    return report, details


def _ask(engine: QueryEngine, text: str, k: int, relevant: set[str]) -> Scored:
    start = time.perf_counter()
    answer = engine.answer(QueryRequest(query=text, k=k))
    ms = (time.perf_counter() - start) * 1000.0
    scored = score_answer(answer, relevant, engine.retriever.embedder.count_tokens, ms)
    return scored.model_copy(update=negation_probe(engine, answer))


def negation_probe(engine: QueryEngine, answer: Answer) -> dict[str, int]:
    """Negate each claim of the answer and verify the negations against the same sources
    with the engine's verifier: how many it catches (marks unsupported), and how many of the
    answer's own claims it kept."""
    claims = [c for c in answer.claims if c.support_cid is not None]
    if not claims:
        return {}
    text = " ".join(f"{negate(c.text).rstrip('.')} [{c.support_cid}]." for c in claims)
    probe = verify(
        text,
        answer.sources,
        engine.sentence_embedder,
        judge=engine.support_judge,
        contradiction_floor=engine.settings.query.contradiction_floor,
    )
    return {
        "negated": len(probe.claims),
        "negated_caught": sum(not c.supported for c in probe.claims),
        "claims": len(answer.claims),
        "supported": sum(c.supported for c in answer.claims),
    }


def _detail(qid: str, text: str, relevant: set[str], rows: Mapping[str, Scored]) -> dict[str, Any]:
    keep = {"answered", "gold_cited", "cited", "tokens", "text"}
    return {
        "qid": qid,
        "query": text,
        "relevant": sorted(relevant),
        "rows": {name: s.model_dump(include=keep) for name, s in rows.items()},
    }


def markdown_answers(report: AnswerAblation) -> str:
    """The ablation as GitHub Markdown: rates as percentages, sizes as means."""
    lines = [
        f"answer-quality ablation: {report.questions} questions, generator {report.generator}, "
        f"k={report.k} of n={report.n} per leg, budget {report.budget_tokens} tokens",
        "",
        "| row | answered | gold in context | gold cited | citation precision | "
        "grounding | negations caught | faithful kept | sources | docs | context tokens | "
        "answer changed | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        lines.append(
            f"| {r.name} | {r.answered:.1%} | {r.gold_in_context:.1%} | {r.gold_cited:.1%} | "
            f"{r.citation_precision:.3f} | {r.grounding:.3f} | {r.contradictions_caught:.1%} | "
            f"{r.faithful_kept:.1%} | {r.sources:.2f} | {r.context_docs:.2f} | "
            f"{r.context_tokens:.0f} | {r.changed:.1%} | {r.p50_ms:.0f} | {r.p95_ms:.0f} |"
        )
    return "\n".join(lines)
