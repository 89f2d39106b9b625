"""The models the query path reads, loaded once and shared by any number of engines.

`QueryModels.load(settings)` loads what `query.*` settings name: the reranker
(`query.reranker`), the support judge the verifier reads (`query.judge`), the answer judge
(`query.answerable.judge`) and the calibrated decision fitted with it
(`query.answerable.decision`).
Nothing is loaded on import, and the support judge's model opens on the first answer it
verifies (a retrieval or a `generate=False` answer never reads it). The generator is not
among them: the extractive one reads the embedder of the collection an answer pinned, and
an endpoint one is an HTTP client, so each engine makes its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragstream.core.errors import ModelUnavailableError
from ragstream.core.settings import Settings
from ragstream.operators.answer_judge import AnswerJudge, load_answer_judge
from ragstream.operators.judge import SupportJudge, load_judge
from ragstream.query.decision import Decision, load_decision
from ragstream.query.rerank import Reranker, load_reranker


@dataclass(frozen=True)
class QueryModels:
    """The query path's models; None where a setting switches one off."""

    reranker: Reranker | None
    support_judge: SupportJudge | None
    answer_judge: AnswerJudge | None
    decision: Decision | None

    @classmethod
    def load(cls, settings: Settings) -> QueryModels:
        """Load the models `settings.query` names. Raises `ModelUnavailableError` for one
        that is configured but cannot be loaded, or a decision fitted with another judge."""
        q = settings.query
        reranker = load_reranker(q.reranker, endpoint=settings.rerank_endpoint)
        support_judge = load_judge(q.judge)
        answer_judge = load_answer_judge(q.answerable.judge)
        return cls(
            reranker,
            support_judge,
            answer_judge,
            fitted_decision(answer_judge, q.answerable.decision),
        )


def fitted_decision(answer_judge: AnswerJudge | None, mode: str) -> Decision | None:
    """The calibrated decision fitted with this answer judge (None: no judge, no fitted
    decision beside it, or `query.answerable.decision=rule`); one fitted with another judge
    is an error."""
    if answer_judge is None or mode != "calibrated":
        return None
    decision = load_decision(answer_judge.model_dir)
    if decision is not None and decision.judge != answer_judge.version:
        raise ModelUnavailableError(
            f"the answerability decision in {answer_judge.model_dir} was fitted with "
            f"{decision.judge}, not {answer_judge.version}: refit it (make decision) or set "
            "query.answerable.decision=rule"
        )
    return decision
