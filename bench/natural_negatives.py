"""Refusal on every kind of "not answerable", against the plain top dense cosine, per kind.

Reads every kind of question of a split (`ragstream.eval.kind_sets`: SQuAD 2.0's articles,
SciFact's claims and mtrag-un's conversations, each on its own index under `--out`, indexed on
first use) through the engine, then replays each score on the recorded signals: for every cell
(a data set and a kind of unanswerable question, against that data set's answerable questions)
the ROC AUC and the share refused at 90 % (and `--shares`) answered, for the decision's
probability, the top dense cosine and the judge's best reading side by side; then what the
decision at its shipped floor answers and refuses (the verdict the engine reaches from the
same signals: coverage rule, overrides, unknown terms, gate).

    .venv/bin/python bench/natural_negatives.py --out bench/out [--split test]
        [--decision DIR] [--judge DIR] [--off-topic bench/data/offtopic_general.tsv]
        [--end-to-end]

On the test split the off-topic cells hold each index's own off-topic questions (SciFact's
16, the docs' 60) and the general questions of `--off-topic`, asked of the SQuAD, SciFact
and docs indexes. `--decision DIR` replays the `decision.json` of DIR (default: the one
shipped beside the answer judge); `--judge DIR` reads the questions with the answer judge in
DIR instead of the shipped one (a candidate, before `make decision` refits on it; its
readings are kept beside the shipped judge's). `--end-to-end` then asks the off-topic
questions and the answerable ones of the docs and SciFact indexes through the whole answer
path (generation, verification, every refusal rule) and counts the refusals by check.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragstream.core.settings import QuerySettings  # noqa: E402
from ragstream.eval.kind_sets import Sets, read_kinds  # noqa: E402
from ragstream.eval.kinds import CHAT, NATURAL  # noqa: E402
from ragstream.eval.opened import opened  # noqa: E402
from ragstream.operators.answer_judge import BUNDLED_ANSWER_JUDGE  # noqa: E402
from ragstream.query.answerable import Limits, answers_from  # noqa: E402
from ragstream.query.decision import load_decision  # noqa: E402
from ragstream.train.kinds_fit import (  # noqa: E402
    cell_auc,
    cell_refused,
    cells,
    scores,
    split_cell,
)

SHARED = REPO.parent / "shared" / "data"
OFF_TOPIC = REPO / "bench" / "data" / "offtopic_general.tsv"


def general_questions(path: Path) -> tuple[tuple[str, str], ...]:
    """(id, question) of the off-topic TSV (`subject`, `shares`, `question`)."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return tuple((f"general-{r['subject']}-{i}", r["question"]) for i, r in enumerate(rows, 1))


def end_to_end(out: Path, off: tuple[tuple[str, str], ...], judge: Path | None) -> None:
    """Every off-topic question (the data set's own and the general ones) and every
    answerable docs question asked through the whole answer path (generation, verification
    and every refusal rule) of the docs and SciFact indexes `read_kinds` made under `out`."""
    from collections import Counter

    from ragstream.core.answers import QueryRequest
    from ragstream.core.settings import load_settings
    from ragstream.eval.answer_eval import OFF_TOPIC as SCIFACT_OFF_TOPIC

    docs_off = [q.strip() for q in (REPO / "tests" / "data" / "offtopic_questions.txt")
                .read_text().splitlines() if q.strip() and not q.startswith("#")]  # fmt: skip
    general = [q for _, q in off]
    rows = (("docs-data", docs_off), ("scifact-data", list(SCIFACT_OFF_TOPIC)))
    print("\n| index | questions | refused | by check | answered |")
    print("|---|---|---|---|---|")
    for name, own in rows:
        with opened(load_settings(out / name), judge) as engine:
            for label, questions in ((f"its {len(own)} off-topic", own), ("general", general)):
                answers = [engine.answer(QueryRequest(query=q)) for q in questions]
                checks = Counter(a.refusal.check for a in answers if a.refusal)
                missed = [a.query for a in answers if a.refusal is None]
                print(f"| {name} | {label} | {sum(checks.values())} / {len(answers)} | "
                      f"{dict(checks)} | {missed} |")  # fmt: skip
            asked = [engine.answer(QueryRequest(query=q)) for q in answerable_of(name)]
            checks = Counter(a.refusal.check for a in asked if a.refusal)
            refused = [a.query for a in asked if a.refusal is not None]
            print(f"| {name} | its {len(asked)} answerable | {len(refused)} / {len(asked)} | "
                  f"{dict(checks)} | refused: {refused[:12]} |")  # fmt: skip


def answerable_of(name: str) -> list[str]:
    """The answerable test questions of an index: the docs questions, SciFact's test claims."""
    if name == "docs-data":
        lines = (REPO / "tests" / "data" / "docs_questions.tsv").read_text().splitlines()
        rows = csv.DictReader([ln for ln in lines if not ln.startswith("#")], delimiter="\t")
        return [r["question"] for r in rows]
    from ragstream.eval.beir import load_beir

    _, queries, qrels = load_beir(SHARED / "scifact", "test")
    return [queries[q] for q in sorted(qrels)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--decision", type=Path, default=BUNDLED_ANSWER_JUDGE)
    ap.add_argument(
        "--judge", type=Path, help="read with this answer judge's directory (default: shipped)"
    )
    ap.add_argument("--off-topic", type=Path, default=OFF_TOPIC)
    ap.add_argument("--sets", nargs="+", default=["squad", "scifact", "mtrag", CHAT, "docs"])
    ap.add_argument("--shares", nargs="+", type=float, default=[0.85, 0.90, 0.95])
    ap.add_argument(
        "--end-to-end",
        action="store_true",
        help="also ask the off-topic and the answerable docs questions through the whole "
        "answer path (test split; the docs and SciFact indexes)",
    )
    args = ap.parse_args()
    off = general_questions(args.off_topic) if args.split == "test" else ()
    sets = Sets(args.shared, args.out, off, judge=args.judge)
    readings = read_kinds(sets, args.split, only=args.sets)
    decision = load_decision(args.decision)
    if decision is None:
        raise SystemExit(f"no decision.json in {args.decision}")
    rows = {
        "decision": scores(readings, decision.probability),
        "dense cosine": scores(readings, lambda s: s.get("dense_best", 0.0)),
        "judge best": scores(readings, lambda s: s.get("judge_best", 0.0)),
    }
    print(f"{len(readings)} readings; decision {args.decision / 'decision.json'} "
          f"reads {list(decision.features)}, floor {decision.floor}\n")  # fmt: skip
    shares = " | ".join(f"refused at {s:.0%}" for s in args.shares)
    print(f"| cell | answerable / not | score | ROC AUC | {shares} |")
    print("|---|---|---|---|" + "---|" * len(args.shares))
    gains = []
    for cell in cells(readings):
        pos, neg = split_cell(readings, rows["decision"], cell)
        for name, values in rows.items():
            refused = [cell_refused(readings, values, s)[cell] for s in args.shares]
            curve = " | ".join(f"{r:.3f}" for r in refused)
            print(f"| {cell[0]} {cell[1]} | {len(pos)} / {len(neg)} | {name} | "
                  f"{cell_auc(readings, values)[cell]:.3f} | {curve} |")  # fmt: skip
        if cell[1] in NATURAL:
            at90 = {n: cell_refused(readings, v, 0.90)[cell] for n, v in rows.items()}
            gains.append((cell, at90["decision"] - at90["dense cosine"]))
    for cell, gain in gains:
        print(f"natural cell {cell[0]} {cell[1]}: decision - dense cosine at 90 % = {gain:+.3f}")
    if gains:
        mean = sum(g for _, g in gains) / len(gains)
        print(f"mean over natural cells: {mean:+.3f}")
    limits = Limits.from_settings(QuerySettings())
    print("\n| cell | shipped floor: answerable answered | unanswerable refused |")
    print("|---|---|---|")
    verdicts = [r.signals is not None and answers_from(r.signals, limits, decision)
                for r in readings]  # fmt: skip
    for cell in cells(readings):
        yes = [float(v) for v in verdicts]
        pos, neg = split_cell(readings, yes, cell)
        print(f"| {cell[0]} {cell[1]} | {sum(pos) / len(pos):.3f} | "
              f"{1 - sum(neg) / len(neg):.3f} |")  # fmt: skip
    if args.end_to_end:
        end_to_end(args.out, off, args.judge)


if __name__ == "__main__":
    main()
