"""Answer-level evaluation of a SQuAD 2.0-format question set (`ragstream eval FILE
--mode answers|abstain`).

The split's paragraphs are indexed as files (`eval.squad`) and every question is asked
through the whole engine (retrieve, rerank, answerability, generate, verify), as a user
asks. `answers` asks every question; `abstain` only those written to look answerable
without being so. The report gives, per kind of question, how many were answered and which
check refused the rest (`Refusal.check`: the gate, the decision, the generator, the
grounding check, the names check). For answered answerable questions: a gold answer string
in the answer, in its first sentence, and the gold paragraph among its citations. For
every answerability signal and the decision's probability: its ROC AUC between the two
kinds, and the share of unanswerable questions a floor on it refuses at 80 / 85 / 90 / 95 %
of answerable ones answered (the curves to compare, e.g. the decision against the plain
top dense cosine).
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ragstream.core.answers import Answer, QueryRequest
from ragstream.eval.answer_eval import latency
from ragstream.eval.beir import doc_key
from ragstream.eval.squad import SquadQuestion, contains_answer
from ragstream.query.decision import SIGNALS
from ragstream.query.engine import QueryEngine
from ragstream.query.verify import sentence_spans

ANSWERED_SHARES = (0.8, 0.85, 0.9, 0.95)
CHECKS = ("gate", "decision", "generator", "grounding", "names")


class KindReport(BaseModel):
    """One kind of question (answerable / unanswerable): asked, answered, refused by check."""

    asked: int
    answered: int
    refused_by_check: dict[str, int]


class SignalReport(BaseModel):
    """One score's separation of answerable from unanswerable questions."""

    auc: float
    # answered share of answerable questions -> refused share of unanswerable ones, for the
    # lowest floor on this score that answers that share (gate refusals stay refused)
    refused_at: dict[str, float]
    # answered share -> that floor on this score (what `query.answerable.decision_floor` is
    # set to for the decision's row)
    floor_at: dict[str, float] = {}


class SquadReport(BaseModel):
    answerable: KindReport | None = None
    unanswerable: KindReport
    # shares of the answered answerable questions
    gold_in_answer: float | None = None
    gold_in_first_sentence: float | None = None
    gold_paragraph_cited: float | None = None
    signals: dict[str, SignalReport] = {}
    generator: str
    p50_ms: float
    p95_ms: float


def first_sentence(text: str) -> str:
    """The answer's first sentence (its citation marker included).

    >>> first_sentence("Steam is the fluid [S1]. Mercury is another [S2].")
    'Steam is the fluid [S1].'
    """
    spans = sentence_spans(text)
    return text[spans[0][0] : spans[0][1]] if spans else ""


def _kind(answers: Sequence[Answer]) -> KindReport:
    refused: Counter[str] = Counter(
        a.refusal.check or a.refusal.reason for a in answers if a.refusal
    )
    other = sorted(set(refused) - set(CHECKS))
    return KindReport(
        asked=len(answers),
        answered=sum(a.refusal is None for a in answers),
        refused_by_check={c: refused.get(c, 0) for c in (*CHECKS, *other)},
    )


def floor_at(positives: Sequence[float], share: float) -> float:
    """The highest floor on a score that still answers `share` of `positives`.

    >>> floor_at([0.9, 0.8, 0.7, 0.6], 0.75)
    0.7
    """
    ranked = sorted(positives, reverse=True)
    need = max(1, round(share * len(ranked) + 1e-9))
    return ranked[min(need, len(ranked)) - 1]


def refused_at(positives: Sequence[float], negatives: Sequence[float], share: float) -> float:
    """The share of `negatives` refused by the highest floor that still answers `share` of
    `positives` (a score of -inf is refused by any floor).

    >>> refused_at([0.9, 0.8, 0.7, 0.6], [0.75, 0.5, 0.1, float("-inf")], 0.75)
    0.75
    """
    floor = floor_at(positives, share)
    return sum(n < floor for n in negatives) / max(1, len(negatives))


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """ROC AUC by ranks (ties half): P(a random positive scores above a random negative).

    >>> auc([0.9, 0.8], [0.1, 0.2]), auc([0.5], [0.5])
    (1.0, 0.5)
    """
    pooled = sorted([(s, 1) for s in positives] + [(s, 0) for s in negatives])
    rank_sum, i = 0.0, 0
    while i < len(pooled):
        j = i
        while j < len(pooled) and pooled[j][0] == pooled[i][0]:
            j += 1
        mid = (i + j + 1) / 2  # 1-based mean rank of the tie group
        rank_sum += mid * sum(label for _, label in pooled[i:j])
        i = j
    n_pos, n_neg = len(positives), len(negatives)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def signal_reports(
    answers: Mapping[str, Answer], answerable: Mapping[str, bool]
) -> dict[str, SignalReport]:
    """AUC and refusal curve of every recorded signal and of the decision's probability
    (`answerability.score`); a question the gate refused scores -inf on all of them."""

    def score_of(read: Callable[[Answer], float | None]) -> SignalReport | None:
        pos: list[float] = []
        neg: list[float] = []
        for qid, a in answers.items():
            value = read(a) if a.answerability is not None else None
            (pos if answerable[qid] else neg).append(float("-inf") if value is None else value)
        if not pos or not neg:
            return None
        return SignalReport(
            auc=round(auc(pos, neg), 4),
            refused_at={f"{s:.2f}": round(refused_at(pos, neg, s), 4) for s in ANSWERED_SHARES},
            floor_at={f"{s:.2f}": _rounded(floor_at(pos, s)) for s in ANSWERED_SHARES},
        )

    readers: dict[str, Callable[[Answer], float | None]] = {"decision": _probability}
    readers |= {name: functools.partial(_signal, name) for name in SIGNALS}
    out = {}
    for name, read in readers.items():
        report = score_of(read)
        if report is not None:
            out[name] = report
    return out


def _rounded(value: float) -> float:
    return round(value, 4) if math.isfinite(value) else -1.0


def _probability(a: Answer) -> float | None:
    return a.answerability.score if a.answerability else None


def _signal(name: str, a: Answer) -> float | None:
    return a.answerability.signals.get(name) if a.answerability else None


def squad_answers(
    engine: QueryEngine, questions: Sequence[SquadQuestion], k: int
) -> tuple[SquadReport, list[dict[str, Any]]]:
    """Ask every question through the engine; the report and one detail per question."""
    answers: dict[str, Answer] = {}
    ms: list[float] = []
    for q in questions:
        start = time.perf_counter()
        answers[q.id] = engine.answer(QueryRequest(query=q.text, k=k))
        ms.append((time.perf_counter() - start) * 1000.0)
    by_id = {q.id: q for q in questions}
    details = [_detail(by_id[qid], a) for qid, a in answers.items()]
    good = [by_id[qid] for qid, a in answers.items() if by_id[qid].answerable and a.refusal is None]

    def share(test: Callable[[SquadQuestion], bool]) -> float | None:
        return round(sum(map(test, good)) / len(good), 4) if good else None

    kinds = {
        kind: [a for qid, a in answers.items() if by_id[qid].answerable == kind]
        for kind in (True, False)
    }
    p50, p95 = latency(ms)
    report = SquadReport(
        answerable=_kind(kinds[True]) if kinds[True] else None,
        unanswerable=_kind(kinds[False]),
        gold_in_answer=share(lambda q: contains_answer(answers[q.id].text, q.answers)),
        gold_in_first_sentence=share(
            lambda q: contains_answer(first_sentence(answers[q.id].text), q.answers)
        ),
        gold_paragraph_cited=share(
            lambda q: any(doc_key(c.doc_id) == q.paragraph for c in answers[q.id].citations)
        ),
        signals=signal_reports(answers, {q.id: q.answerable for q in questions}),
        generator=engine.generator.name,
        p50_ms=p50,
        p95_ms=p95,
    )
    return report, details


def _detail(q: SquadQuestion, a: Answer) -> dict[str, Any]:
    return {
        "qid": q.id,
        "query": q.text,
        "answerable": q.answerable,
        "gold": list(q.answers),
        "paragraph": q.paragraph,
        "refusal": a.refusal.check or a.refusal.reason if a.refusal else None,
        "detail": a.refusal.detail if a.refusal else None,
        "text": a.text,
        "cited": sorted({doc_key(c.doc_id) for c in a.citations}),
        "score": a.answerability.score if a.answerability else None,
        "signals": a.answerability.signals if a.answerability else None,
    }


def markdown_squad(report: SquadReport) -> str:
    lines = [
        "| questions | asked | answered | refused: " + " / ".join(CHECKS) + " |",
        "|---|---|---|---|",
    ]
    for name, kind in (("answerable", report.answerable), ("unanswerable", report.unanswerable)):
        if kind is not None:
            refused = " / ".join(str(n) for n in kind.refused_by_check.values())
            lines.append(f"| {name} | {kind.asked} | {kind.answered} | {refused} |")
    if report.answerable is not None:
        lines += [
            "",
            "| answered answerable questions | share |",
            "|---|---|",
            f"| a gold answer string in the answer | {report.gold_in_answer or 0:.1%} |",
            f"| … in its first sentence | {report.gold_in_first_sentence or 0:.1%} |",
            f"| the gold paragraph cited | {report.gold_paragraph_cited or 0:.1%} |",
        ]
    if report.signals:
        shares = [f"{float(s):.0%}" for s in next(iter(report.signals.values())).refused_at]
        lines += [
            "",
            "| score | ROC AUC | unanswerable refused at " + " / ".join(shares) + " answered |",
            "|---|---|---|",
        ]
        for name, s in report.signals.items():
            curve = " / ".join(f"{v:.1%}" for v in s.refused_at.values())
            lines.append(f"| {name} | {s.auc:.3f} | {curve} |")
        decision = report.signals.get("decision")
        if decision is not None and decision.floor_at:
            lines += [
                "",
                "The frontier: set `query.answerable.decision_floor` to the floor of the share "
                "of answerable questions to keep answered.",
                "",
                "| answerable answered | unanswerable refused | decision_floor |",
                "|---|---|---|",
            ]
            for share, floor in decision.floor_at.items():
                caught = decision.refused_at[share]
                lines.append(f"| {float(share):.0%} | {caught:.1%} | {floor:.4f} |")
    lines.append(
        f"\ngenerator {report.generator}; p50 / p95 {report.p50_ms:.0f} / {report.p95_ms:.0f} ms"
    )
    return "\n".join(lines)
