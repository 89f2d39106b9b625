"""Every rule by which the query path refuses to answer, as pure functions.

Each rule reads the values its stage of `QueryEngine` computed and returns a `Refusal`
(core/answers.py) or None; none of them reads the engine, a store or a model. In the
order the engine applies them (the first refusal ends the answer):

1. `wordless` (check "gate"): the question has no letters at all.
2. `gate` (check "gate"): the best rerank score or dense cosine is below its floor.
3. `not_answerable` (check "decision"): the answerability verdict says no.
4. `declined_answer` (check "generator"): the generator said the sources hold no answer.
5. `no_answer` (check "generator"): the generator wrote no sentence the verifier read.
6. `low_grounding` (check "grounding"): too few claims are supported by their sources.
7. `unnamed` (check "names"): the cited documents never name what the question asks
   about (`names_to_check` says which names the rule looks for).

`wordless` and `gate` live in query/gate.py beside the gate's floors and are re-exported
here so this module names every rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from ragstream.core.answers import Answerability, Claim, Refusal
from ragstream.query.answerable import Limits, named_terms
from ragstream.query.gate import gate, wordless
from ragstream.query.generate import declined


def not_answerable(
    verdict: Answerability, limits: Limits, *, dense: float, read: int, calibrated: bool
) -> Refusal | None:
    """A `not_answerable` refusal when the answerability `verdict` says no, its detail
    naming the signal that failed: no term known and nothing close in meaning, too little
    coverage and nothing close, or no sentence the answer judge (with the calibrated
    decision when `calibrated`) reads as answering. `dense`: the best dense cosine;
    `read`: how many sentences the answer judge read."""
    if verdict.answerable:
        return None
    coverage = verdict.signals["coverage_best"]
    unknown = not verdict.signals["question_terms"] or verdict.signals["unseen_term_share"] >= 1
    enough = limits.dense_floor
    if unknown and dense < enough:
        detail = (
            "none of the question's terms occurs in the documents and no passage is close "
            f"to it in meaning (best cosine {dense:.2f}, enough: {enough:.2f})"
        )
    elif verdict.decided_by == "other_language":
        detail = (
            f"the retrieved text covers {coverage:.0%} of what the question asks about "
            f"(minimum {limits.other_coverage:.0%} for text in {verdict.language!r}, which the "
            f"trained answer judge does not read) and matches it in meaning at {dense:.2f} "
            f"(enough, where both retrieval legs agree: {limits.other_dense:.2f})"
        )
    elif coverage < limits.floor and dense < enough:
        detail = (
            f"the retrieved text covers {coverage:.0%} of what the question asks about "
            f"(minimum {limits.floor:.0%}) and matches it in meaning at {dense:.2f} (enough: "
            f"{enough:.2f}): the documents do not seem to answer it"
        )
    elif calibrated:
        detail = (
            f"no retrieved sentence answers the question: the best scores "
            f"{verdict.signals.get('judge_best', 0.0):.2f} with the answerability judge "
            f"({read} sentences read), and all signals together give "
            f"{verdict.score:.2f} (minimum {verdict.floor:.2f})"
        )
    else:
        detail = (
            f"no retrieved sentence answers the question: the best scores "
            f"{verdict.score:.2f} with the answerability judge (minimum "
            f"{limits.judge_floor:.2f}; {read} sentences read)"
        )
    return Refusal(
        reason="not_answerable", detail=detail, best_score=verdict.score, check="decision"
    )


def declined_answer(text: str) -> Refusal | None:
    """A `not_answerable` refusal when the generator's `text` says the sources do not hold
    the answer (and cites nothing): that is so whatever the other signals said.

    >>> declined_answer("NOT_ANSWERABLE: nothing about it.").detail
    'the generator found no answer in the sources: nothing about it.'
    >>> declined_answer("It is 42 [S1].") is None
    True
    """
    reason = declined(text)
    if not reason:
        return None
    return Refusal(
        reason="not_answerable",
        detail=f"the generator found no answer in the sources: {reason}",
        check="generator",
    )


def no_answer(
    claims: Sequence[Claim],
    *,
    judged: bool,
    scores: Iterable[float],
    unmatched: Sequence[str] = (),
) -> Refusal | None:
    """A refusal when the verified answer has no claim: the generator found no sentence in
    the sources that answers the question. `not_answerable` when the answer judge read the
    sources (`judged`), else `insufficient_evidence`; `scores`: the sources' scores, the
    best of which is reported; `unmatched`: the terms a follow-up adds to its conversation,
    where no sentence read as answering holds one (said in the detail)."""
    if claims:
        return None
    detail = "the generator found no sentence in the sources that answers the question"
    if unmatched:
        detail += f": none of those read as answering mentions {', '.join(unmatched)}"
    return Refusal(
        reason="not_answerable" if judged else "insufficient_evidence",
        detail=detail,
        best_score=max(scores, default=None),
        check="generator",
    )


def low_grounding(
    grounding: float, *, min_grounding: float, on_low: Literal["refuse", "flag"]
) -> Refusal | None:
    """An `unsupported_answer` refusal when less than `min_grounding` of the answer's claims
    are supported by the sources they cite, and `on_low` (`query.on_low_grounding`) says
    to refuse rather than flag.

    >>> low_grounding(0.4, min_grounding=0.5, on_low="refuse").check
    'grounding'
    >>> low_grounding(0.5, min_grounding=0.5, on_low="refuse") is None
    True
    """
    if not (grounding < min_grounding and on_low == "refuse"):
        return None
    return Refusal(
        reason="unsupported_answer",
        detail=(
            f"only {grounding:.0%} of the answer's claims are supported by "
            f"the sources it cites (minimum {min_grounding:.0%})"
        ),
        best_score=grounding,
        check="grounding",
    )


def names_to_check(
    question: str, *, named_floor: float, dense_best: float, answerable_dense: float
) -> list[str]:
    """The question's proper names (`named_terms`) the names rule looks for in the cited
    documents; none when the rule is off (`named_floor` 0) or the best chunk is as close in
    meaning as `answerable_dense`: text that close is about what was asked, and its name
    for it is likely another form of the same one ("Galliformes": "chicken",
    "Escherichia coli": "E. coli").

    >>> names_to_check("Is Bern in Switzerland?", named_floor=0.5, dense_best=0.2,
    ...                answerable_dense=0.5)
    ['bern', 'switzerland']
    >>> names_to_check("Is Bern in Switzerland?", named_floor=0.5, dense_best=0.6,
    ...                answerable_dense=0.5)
    []
    """
    if named_floor <= 0 or dense_best >= answerable_dense:
        return []
    return named_terms(question)


def unnamed(
    names: Sequence[str], missing: Sequence[str], *, named_floor: float, answered: float | None
) -> Refusal | None:
    """A `not_answerable` refusal when the documents the answer cites mention less than
    `named_floor` of the question's `names` (`missing`: those they never mention): an
    answer about Switzerland must cite a document that names it. `answered`: the
    answerability score, reported as the best score.

    >>> unnamed(["bern", "switzerland"], ["switzerland"], named_floor=0.5,
    ...         answered=0.7) is None
    True
    >>> unnamed(["switzerland"], ["switzerland"], named_floor=0.5, answered=0.7).check
    'names'
    """
    if not (missing and 1.0 - len(missing) / len(names) < named_floor):
        return None
    return Refusal(
        reason="not_answerable",
        detail=(
            f"the question asks about {', '.join(missing)}, which the documents the "
            f"answer cites never mention"
        ),
        best_score=answered,
        check="names",
    )


__all__ = [
    "declined_answer",
    "gate",
    "low_grounding",
    "names_to_check",
    "no_answer",
    "not_answerable",
    "unnamed",
    "wordless",
]
