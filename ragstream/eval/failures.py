"""The eval failure report: for each failing query, the first pipeline stage that broke.

`not_retrieved@N` (no relevant document among the N chunks per leg), `below_k` (retrieved,
but not in the top k chunks that go to the answer), and, when answers are generated,
`refused_wrongly` (refused though a relevant document was in the context) and
`unsupported_answer` (answered, but verification found the citations do not support it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel

from ragstream.core.answers import Answer, QueryRequest
from ragstream.eval.beir import Qrels, Queries, doc_key
from ragstream.query.engine import QueryEngine

if TYPE_CHECKING:
    from ragstream.eval.evaluation import EvalConfig


class FailureDetail(BaseModel):
    """One failing query: the first stage that broke, and the evidence for that verdict."""

    qid: str
    query: str
    failure: str  # not_retrieved@N | below_k | refused_wrongly | unsupported_answer
    relevant: list[str]
    first_relevant_rank: int | None  # 1-based chunk rank in the pipeline config's ranking
    refusal: str | None = None
    grounding: float | None = None
    answer: str | None = None


def failure_classes(depth: int, answers: bool) -> list[str]:
    """The classes a run can report, in pipeline order (answer classes only with answers)."""
    names = [f"not_retrieved@{depth}", "below_k"]
    return names + (["refused_wrongly", "unsupported_answer"] if answers else [])


def classify_retrieval(
    ranked_docs: Sequence[str], relevant: Collection[str], k: int, depth: int
) -> tuple[str | None, int | None]:
    """(failure or None, 1-based chunk rank of the first relevant chunk or None)."""
    rank = next((i for i, d in enumerate(ranked_docs, 1) if d in relevant), None)
    if rank is None:
        return f"not_retrieved@{depth}", None
    return ("below_k" if rank > k else None), rank


def classify_answer(answer: Answer, relevant: Collection[str], min_grounding: float) -> str | None:
    """The answer-level failure of an answer whose retrieval passed, or None.

    A refusal by the verifier, or an answer kept but flagged below `min_grounding`
    (`on_low_grounding=flag`), is `unsupported_answer`. Any other refusal is
    `refused_wrongly` when a relevant document was in what the generator saw (its sources;
    the top-k candidates when the gate refused before assembly), else `below_k`: the
    token budget left every relevant chunk out of the context."""
    if answer.refusal is not None and answer.refusal.reason == "unsupported_answer":
        return "unsupported_answer"
    if answer.refusal is None:
        return "unsupported_answer" if answer.grounding < min_grounding else None
    seen = [s.doc_id for s in answer.sources] or [c.doc_id for c in answer.candidates]
    return "refused_wrongly" if {doc_key(d) for d in seen} & set(relevant) else "below_k"


def classify_failures(
    queries: Queries,
    qrels: Qrels,
    ranked: Mapping[str, Sequence[str]],
    *,
    k: int,
    depth: int,
    engine: QueryEngine | None = None,
    config: EvalConfig,
) -> list[FailureDetail]:
    """The first failing stage of every query in `ranked` (chunk rankings as BEIR doc ids);
    with an `engine`, queries whose retrieval passed are answered (with `config`'s fusion)
    and their answer classified. Passing queries are left out."""
    out: list[FailureDetail] = []
    for qid, docs in ranked.items():
        relevant = [d for d, rel in qrels[qid].items() if rel > 0]
        failure, rank = classify_retrieval(docs, relevant, k, depth)
        detail = FailureDetail(
            qid=qid,
            query=queries[qid],
            failure=failure or "",
            relevant=relevant,
            first_relevant_rank=rank,
        )
        if failure is None and engine is not None:
            c = config
            request = QueryRequest(query=queries[qid], k=k, n=depth, fusion=c.fusion, rrf_k=c.rrf_k)
            answer = engine.answer(request)
            failure = classify_answer(answer, relevant, engine.settings.query.min_grounding)
            detail = detail.model_copy(
                update={
                    "failure": failure or "",
                    "refusal": answer.refusal.reason if answer.refusal else None,
                    "grounding": answer.grounding,
                    "answer": answer.text,
                }
            )
        if failure is not None:
            out.append(detail)
    return out


def count_failures(details: Sequence[FailureDetail], depth: int, answers: bool) -> dict[str, int]:
    counts = dict.fromkeys(failure_classes(depth, answers), 0)
    for d in details:
        counts[d.failure] = counts.get(d.failure, 0) + 1
    return counts


def markdown_failures(
    counts: Mapping[str, int], queries: int, config: str, k: int, depth: int, answers: bool
) -> str:
    """The "which stage broke?" table: each query counted at its first failing stage."""
    lines = [
        f"which stage broke? ({config}: top {k} chunks of {depth} per leg, {queries} queries)",
        "",
        "| first failure | queries |",
        "|---|---|",
    ]
    lines += [f"| {name} | {n} |" for name, n in counts.items()]
    if not answers:
        lines.append("| refused_wrongly, unsupported_answer | not measured (run with --answers) |")
    lines.append(f"| passed | {queries - sum(counts.values())} |")
    return "\n".join(lines)
