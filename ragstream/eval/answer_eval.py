"""Answer-level evaluation (`ragstream eval --mode gold|abstain`).

Retrieval metrics say whether the evidence is found; these two checks say what the answer
path does with it, each isolating one side of the generator + verifier:

- **gold context**: each question's judged-relevant documents (qrels) go straight to
  generate + verify (`QueryEngine.answer_from`, no retrieval, no gate). An answer is
  *accepted* when it is not refused and its grounding reaches `query.min_grounding`. A low
  rate means the generator or verifier fails even with perfect retrieval.
- **abstention**: questions whose answer is not in the index must be refused. Two sets:
  the dataset's own questions asked of an index from which their relevant documents were
  removed (`heldout`, the hard, near-domain case), and general questions from far outside
  the corpus (`offtopic`). The abstention rate is refused ÷ asked.

Both run the real engine (real assembly, generator, verifier, refusal rules), opened as
`eval.opened` opens it: the retrieval log switched off, evaluation questions are not queries
anyone asked the index.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragstream.core.answers import Answer, QueryRequest
from ragstream.eval.beir import beir_doc_id
from ragstream.query.decision import Decision
from ragstream.query.engine import QueryEngine

# Far outside any scientific corpus; the gate's floor was calibrated on questions like these.
OFF_TOPIC = (
    "Who won the 1998 FIFA World Cup?",
    "What is a good recipe for banana bread?",
    "How do I change a flat tire on a bicycle?",
    "What is the capital city of Australia?",
    "How do I install numpy on Windows?",
    "Which chess opening starts with 1.e4 c5?",
    "What time does the Louvre open on Sundays?",
    "How many players are on a rugby union team?",
    "What is the plot of the novel Moby-Dick?",
    "How do I reset a forgotten Wi-Fi router password?",
    "Who painted the ceiling of the Sistine Chapel?",
    "What is the best way to learn to play the guitar?",
    "How tall is the Eiffel Tower?",
    "What is the exchange rate between euros and dollars?",
    "How do I bake sourdough bread at home?",
    "Which planet has the most moons?",
)


def latency(ms: Sequence[float]) -> tuple[float, float]:
    """(p50, p95) of per-query milliseconds; (0, 0) for none."""
    if not ms:
        return 0.0, 0.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def accepted(answer: Answer, min_grounding: float) -> bool:
    """Answered, and grounded enough (a flagged answer below the minimum is not accepted)."""
    return answer.refusal is None and bool(answer.claims) and answer.grounding >= min_grounding


class GoldReport(BaseModel):
    """Gold-context mode: how often generate + verify accept an answer from the gold docs."""

    queries: int  # questions with at least one gold document in the index
    missing_gold: int  # questions skipped: none of their gold documents is indexed
    accepted: int
    accept_rate: float
    mean_grounding: float
    refused: dict[str, int]  # refusal reason -> count
    generator: str
    p50_ms: float
    p95_ms: float


class AbstainGroup(BaseModel):
    questions: int
    refused: int
    rate: float  # refused / questions: the abstention rate
    by_reason: dict[str, int]
    by_check: dict[str, int] = {}  # refusals per check that made them (`Refusal.check`)
    p50_ms: float
    # the abstention rate each answerability signal alone (after the retrieval gate) would
    # give, decided from the signals every answer records (`signal_refusals`)
    by_signal: dict[str, float] = {}


def signal_refusals(
    answer: Answer, judge_floor: float, judge_dense: float, decision: Decision | None = None
) -> dict[str, bool]:
    """Would each signal alone have refused this answer? The retrieval gate refuses before
    any signal is computed; every other rule reads `answer.answerability.signals`, which the
    engine records whatever it decides, so one run yields a row per signal."""
    gate = answer.refusal is not None and answer.answerability is None
    signals = answer.answerability.signals if answer.answerability else {}

    def below(name: str, floor: float) -> bool:
        return name in signals and signals[name] < floor

    coverage = below("coverage_best", 0.5) and below("dense_best", 0.5)
    judged = below("judge_best", judge_floor) and below("dense_best", judge_dense)
    rows = {
        "retrieval gate only": gate,
        "+coverage/dense 0.5/0.5": gate or coverage,
        "+trained judge alone": gate or below("judge_best", judge_floor),
        "+judge or dense override (the floor rule)": gate or judged,
        "+floor rule +coverage/dense": gate or judged or coverage,
    }
    if decision is not None:
        calibrated = "judge_best" in signals and not decision.answers(signals)
        rows["+calibrated decision (the default)"] = gate or calibrated
        rows["+calibrated +coverage/dense"] = gate or calibrated or coverage
    rows["engine as configured (+generator)"] = answer.refusal is not None
    return rows


class AbstainReport(BaseModel):
    """Abstention mode: questions whose answer is not in the index must be refused."""

    heldout_docs: int  # relevant documents removed from the index for this check
    heldout_leaks: int  # answers whose candidates still held a removed document (must be 0)
    heldout: AbstainGroup
    offtopic: AbstainGroup
    generator: str


def gold_eval(
    engine: QueryEngine, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]]
) -> tuple[GoldReport, list[dict[str, Any]]]:
    """Every judged question answered from its gold documents' live chunks (document order);
    returns the report and one detail per question that was not accepted."""
    settings, vectors = engine.settings, engine.retriever.vectors
    min_grounding = settings.query.min_grounding
    answers: list[Answer] = []
    details: list[dict[str, Any]] = []
    ms: list[float] = []
    missing = 0
    for qid, text in queries.items():
        gold = [d for d, rel in qrels.get(qid, {}).items() if rel > 0]
        chunks = [
            c
            for d in gold
            for c in sorted(vectors.live_chunks(beir_doc_id(settings, d)), key=lambda c: c.ordinal)
        ]
        if not chunks:
            missing += 1
            continue
        start = time.perf_counter()
        answer = engine.answer_from(QueryRequest(query=text), chunks)
        ms.append((time.perf_counter() - start) * 1000.0)
        answers.append(answer)
        if not accepted(answer, min_grounding):
            details.append(_detail(qid, answer, gold=gold))
    n = len(answers)
    ok = sum(accepted(a, min_grounding) for a in answers)
    p50, p95 = latency(ms)
    report = GoldReport(
        queries=n,
        missing_gold=missing,
        accepted=ok,
        accept_rate=ok / n if n else 0.0,
        mean_grounding=sum(a.grounding for a in answers) / n if n else 0.0,
        refused=dict(Counter(a.refusal.reason for a in answers if a.refusal)),
        generator=engine.generator.name,
        p50_ms=p50,
        p95_ms=p95,
    )
    return report, details


def abstain_group(
    engine: QueryEngine, questions: Mapping[str, str], must_not_see: Iterable[str] = ()
) -> tuple[AbstainGroup, int, list[dict[str, Any]]]:
    """Ask each question through the whole engine; (group, leaks, details of the answered).

    A leak is an answer whose candidates include a doc id in `must_not_see`: it would mean
    the removal did not reach the index, and the rate would measure nothing."""
    hidden = set(must_not_see)
    answers: dict[str, Answer] = {}
    ms: list[float] = []
    for qid, text in questions.items():
        start = time.perf_counter()
        answers[qid] = engine.answer(QueryRequest(query=text))
        ms.append((time.perf_counter() - start) * 1000.0)
    leaks = sum(any(c.doc_id in hidden for c in a.candidates) for a in answers.values())
    refused = [a for a in answers.values() if a.refusal is not None]
    q = engine.settings.query
    decisions = [
        signal_refusals(a, q.answerable.judge_floor, q.answerable.judge_dense, engine.decision)
        for a in answers.values()
    ]
    group = AbstainGroup(
        questions=len(answers),
        refused=len(refused),
        rate=len(refused) / len(answers) if answers else 0.0,
        by_reason=dict(Counter(a.refusal.reason for a in refused if a.refusal)),
        by_check=dict(Counter(a.refusal.check or "" for a in refused if a.refusal)),
        p50_ms=latency(ms)[0],
        by_signal={name: sum(d[name] for d in decisions) / len(decisions) for name in decisions[0]}
        if decisions
        else {},
    )
    details = [_detail(q, a) for q, a in answers.items() if a.refusal is None]
    return group, leaks, details


def _detail(qid: str, answer: Answer, **extra: Any) -> dict[str, Any]:
    return {
        "qid": qid,
        "query": answer.query,
        **extra,
        "refusal": answer.refusal.reason if answer.refusal else None,
        "detail": answer.refusal.detail if answer.refusal else None,
        "grounding": answer.grounding,
        "text": answer.text,
        "cited": sorted({c.doc_id for c in answer.citations}),
    }


def markdown_gold(report: GoldReport) -> str:
    refused = ", ".join(f"{r} {n}" for r, n in sorted(report.refused.items())) or "none"
    return "\n".join(
        [
            "| gold context | value |",
            "|---|---|",
            f"| questions | {report.queries} (skipped, gold not indexed: {report.missing_gold}) |",
            f"| accepted (answered, grounding ≥ min) | {report.accepted} "
            f"({report.accept_rate:.1%}) |",
            f"| mean grounding | {report.mean_grounding:.3f} |",
            f"| refused | {refused} |",
            f"| generator | {report.generator} |",
            f"| p50 / p95 ms | {report.p50_ms:.1f} / {report.p95_ms:.1f} |",
        ]
    )


def markdown_abstain(report: AbstainReport) -> str:
    lines = [
        "| questions without an answer in the index | asked | refused | abstention rate "
        "| by reason | p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, g in (
        (f"dataset questions, {report.heldout_docs} relevant docs removed", report.heldout),
        ("off-topic questions", report.offtopic),
    ):
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(g.by_reason.items())) or "–"
        lines.append(
            f"| {name} | {g.questions} | {g.refused} | {g.rate:.1%} | {reasons} | {g.p50_ms:.1f} |"
        )
    signals = list(report.heldout.by_signal)
    if signals:
        lines += [
            "",
            "| abstention rate by signal | dataset questions, docs removed | off-topic |",
            "|---|---|---|",
        ]
        for name in signals:
            lines.append(
                f"| {name} | {report.heldout.by_signal[name]:.1%} | "
                f"{report.offtopic.by_signal.get(name, 0.0):.1%} |"
            )
    return "\n".join(lines)
