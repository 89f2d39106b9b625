"""Calibrate the answerability signals on a BEIR split (train only: their floors are a choice).

For each judged question, the judge (`query/answerable.py`) scores the top-k chunks twice:
as retrieved (the gold documents are in the index), and with the question's gold documents
taken out of the fused candidates before the cut to k (what `eval --mode abstain` does by
re-indexing without them; same ranking here, far faster): `ragstream.train.decision.collect`,
the readings the calibrated decision is fitted on. On the train split only the claims the
judge did *not* train on are used (`train.judge_data.is_holdout`), so the figures are not
flattered by its training set.

On train it searches the engine's rule, "the judge scores a sentence >= j, or the best
dense cosine reaches d" (`query.answerable.judge_floor` / `.judge_dense`), prints its Pareto
frontier and picks the pair that refuses the most gold-removed questions while keeping
>= 90 % of the answerable ones answered; then one row per signal, and the calibrated
decision the engine uses by default (query/decision.py). On a test split it only reports
the pair it is given (chosen on train).

On train, with SciFact's claim labels beside the dataset (`scifact-claims/claims_train.jsonl`),
it also splits the questions by what their gold text holds: evidence, or not enough
information (BEIR's qrels count both as answerable). For each kind it prints how well each
score tells it from the gold-removed questions (AUC), and the most refusals a floor on
that score can reach while 90 % of the answerable questions are answered
(`train.decision.ceiling`): why an 80 % / 90 % pair is out of reach here.

    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split train
    .venv/bin/python bench/answerability.py ../shared/data/scifact --data-dir D --split test \\
        --judge-floor J --judge-dense D
(D: a data dir the dataset is indexed into, e.g. by `ragstream eval DATASET --data-dir D`.)
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from ragstream.operators.answer_judge import load_answer_judge
from ragstream.query.decision import FEATURES, Decision, load_decision
from ragstream.train.decision import Reading, auc, ceiling, collect
from ragstream.train.decision import rates as decision_rates
from ragstream.train.judge_data import load_claims

KEEP = 0.90  # answerable questions the rule must keep answered (the target on test)
# (best-chunk coverage, best dense cosine, judge best, answer type matched)
Point = tuple[float, float, float, float]
# (coverage floor, its dense alternative, judge floor, judge's dense override, need type)
Rule = tuple[float, float, float, float, bool]


def answers(p: Point, rule: Rule) -> bool:
    """The engine's rule (query/answerable.py `judge`) on recorded signals."""
    coverage, dense, judged, override, typed = rule
    lexical_ok = (p[0] >= coverage or p[1] >= dense) if coverage > 0 else True
    judge_ok = p[2] >= judged or p[1] >= override
    return lexical_ok and judge_ok and (p[3] > 0 or not typed)


def rates(pairs: list[tuple[Point, Point]], rule: Rule) -> tuple[float, float]:
    """(answerable kept, gold-removed refused) under this rule."""
    kept = sum(answers(present, rule) for present, _ in pairs) / len(pairs)
    refused = sum(not answers(absent, rule) for _, absent in pairs) / len(pairs)
    return kept, refused


def point(signals: dict[str, float]) -> Point:
    return (
        signals["coverage_best"],
        signals["dense_best"],
        signals["judge_best"],
        signals["answer_type_match"],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--judge", default="bundled", help="answer judge: bundled or a directory")
    ap.add_argument("--judge-floor", type=float, default=None, help="report this judge floor")
    ap.add_argument("--judge-dense", type=float, default=1.01, help="and this dense override")
    ap.add_argument(
        "--claims",
        type=Path,
        default=None,
        help="SciFact claims with evidence labels (train split; default: "
        "DATASET/../scifact-claims/claims_train.jsonl when it exists): the breakdown by kind",
    )
    args = ap.parse_args()
    if args.split == "test" and args.judge_floor is None:
        sys.exit("choose the floor on a train split; on test, report it with --judge-floor")
    scorer = load_answer_judge(args.judge)
    assert scorer is not None, "this bench measures the trained judge"
    start = time.perf_counter()
    readings = collect(args.dataset, args.data_dir, args.split, k=args.k, judge=str(args.judge))
    pairs = [(point(r.present), point(r.absent)) for r in readings]
    seconds = time.perf_counter() - start
    print(
        f"{args.dataset.name} {args.split}: {len(readings)} questions, k={args.k}, {seconds:.0f} s"
    )
    if args.judge_floor is not None:
        floor, override = args.judge_floor, args.judge_dense
    else:
        grid = [
            (j / 100, d / 100, *rates(pairs, (0.0, 1.01, j / 100, d / 100, False)))
            for j in range(5, 100, 5)
            for d in (*range(40, 100, 2), 101)
        ]
        print("judge >= j OR dense >= d, the Pareto frontier (answered, refused):")
        best = -1.0
        for j, d, kept, refused in sorted(grid, key=lambda g: (-g[2], -g[3])):
            if refused > best:
                best = refused
                print(f"  j {j:.2f} d {d:.2f}: {kept:.1%}, {refused:.1%}")
        good = sorted((g for g in grid if g[2] >= KEEP), key=lambda g: (-g[3], -g[0], g[1]))
        floor, override = good[0][:2] if good else (0.5, 1.01)
        print(f"chosen: judge floor {floor:.2f}, dense override {override:.2f} "
              f"(the most refused with >= {KEEP:.0%} answered on this split)")  # fmt: skip
    print("| signal | answerable answered | gold-removed refused |")
    print("|---|---|---|")
    for name, rule in (
        ("coverage/dense 0.5/0.5", (0.5, 0.5, 0.0, 1.01, False)),
        (f"trained judge >= {floor:.2f}", (0.0, 1.01, floor, 1.01, False)),
        (
            f"judge, or dense >= {override:.2f} (the floor rule)",
            (0.0, 1.01, floor, override, False),
        ),
        ("floor rule + coverage/dense 0.5/0.5", (0.5, 0.5, floor, override, False)),
        ("floor rule + answer type", (0.0, 1.01, floor, override, True)),
    ):
        kept, refused = rates(pairs, rule)
        print(f"| {name} | {kept:.1%} | {refused:.1%} |")
    decision = load_decision(scorer.model_dir)
    if decision is not None:  # the default: fitted on the train split by `make decision`
        kept, refused = decision_rates(readings, decision)
        print(f"| calibrated decision (default; floor {decision.floor:.3f}, judge override "
              f"{decision.judge_override:.2f}, dense override {decision.dense_override:.2f}) "
              f"| {kept:.1%} | {refused:.1%} |")  # fmt: skip
    claims = args.claims or args.dataset.parent / "scifact-claims" / "claims_train.jsonl"
    if args.split == "train" and claims.exists() and decision is not None:
        by_kind(readings, {str(c.id): bool(c.evidence) for c in load_claims(claims)}, decision)


def _signal(name: str, signals: Mapping[str, float]) -> float:
    return signals.get(name, 0.0)


def by_kind(readings: list[Reading], has_evidence: dict[str, bool], decision: Decision) -> None:
    """The readings split by what the gold text holds: evidence (SUPPORT / CONTRADICT) or
    not enough information (a cited abstract that does not answer the claim, which BEIR's
    qrels count as answerable). How well each score tells each kind from the gold-removed
    questions (AUC), and the ceiling on refusals that keeping 90 % answered leaves."""
    kinds = {
        "evidence": [r for r in readings if has_evidence.get(r.qid)],
        "not enough info": [r for r in readings if not has_evidence.get(r.qid, True)],
    }
    scores: dict[str, Callable[[Mapping[str, float]], float]] = {
        name: functools.partial(_signal, name) for name in FEATURES
    }
    scores["decision P"] = decision.probability
    absent = {name: [f(r.absent) for r in readings] for name, f in scores.items()}
    print("\nBy what the gold text holds (SciFact's claim labels; AUC: the answerable "
          "reading against every gold-removed one):")  # fmt: skip
    print(f"| kind | questions | gold in top k | answered | its gold-removed refused | "
          f"{' | '.join(f'AUC {n}' for n in scores)} |")  # fmt: skip
    print("|---|---|---|---|---|" + "---|" * len(scores))
    for kind, group in kinds.items():
        if not group:
            continue
        aucs = " | ".join(
            f"{auc([f(r.present) for r in group], absent[n]):.3f}" for n, f in scores.items()
        )
        print(
            f"| {kind} | {len(group)} | {sum(r.gold_in_top for r in group) / len(group):.1%} | "
            f"{sum(decision.answers(r.present) for r in group) / len(group):.1%} | "
            f"{sum(not decision.answers(r.absent) for r in group) / len(group):.1%} | {aucs} |"
        )
    evidence, unsupported = kinds["evidence"], kinds["not enough info"]
    if not evidence or not unsupported:
        return
    print(f"\nCeiling with every evidence question answered, a floor on one score, "
          f">= {KEEP:.0%} of all answerable answered:")  # fmt: skip
    for name, f in scores.items():
        answerable = [f(r.present) for r in evidence]
        share, refused = ceiling(answerable, [f(r.present) for r in unsupported], absent[name])
        _, alone = ceiling([], answerable, absent[name])
        print(f"  {name}: {share:.1%} of the not-enough-info questions answered, "
              f"gold-removed refused at most {refused:.1%} (counting only the evidence "
              f"questions as answerable: {alone:.1%})")  # fmt: skip


if __name__ == "__main__":
    main()
