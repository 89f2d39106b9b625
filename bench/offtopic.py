"""Off-topic refusal: general-knowledge questions the shared documents do not answer.

Indexes folders of the shared real documents (default: their `html` and `md` folders — the
Python tutorial, docling's docs, a wiki page) into a temp data dir through the real sync, then
asks every question of `tests/data/offtopic_questions.txt` through the offline answer path and
prints how many were refused, by reason, and each one that was answered with its best dense
score (issue 16's target: all of them refused).

    .venv/bin/python bench/offtopic.py [--folders html md] [--data-dir DIR] [--floor F]

`--floor` sets `query.answerable_floor` (default: the settings' own).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragstream import api  # noqa: E402
from ragstream.core.answers import QueryRequest  # noqa: E402
from ragstream.core.settings import Settings  # noqa: E402

DOCS = REPO.parent / "shared" / "data" / "docs"
QUESTIONS = REPO / "tests" / "data" / "offtopic_questions.txt"


def questions(path: Path = QUESTIONS) -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--folders", nargs="+", default=["html", "md"], help="under the shared docs")
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a temp dir")
    ap.add_argument("--floor", type=float, default=None, help="query.answerable_floor")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="offtopic-"))
    try:
        root = scratch / "docs"
        for folder in args.folders:
            shutil.copytree(DOCS / folder, root / folder)
        settings = Settings(data_dir=args.data_dir or scratch / "data")
        if args.floor is not None:
            query = settings.query.model_copy(update={"answerable_floor": args.floor})
            settings = settings.model_copy(update={"query": query})
        report = api.sync([root], settings=settings)
        print(f"indexed {args.folders}: {report.docs_seen} docs, {report.chunks_live} chunks")
        asked = questions()
        reasons: Counter[str] = Counter()
        answered = []
        with api.open_engine(settings) as (engine, _):
            for q in asked:
                answer = engine.answer(QueryRequest(query=q))
                if answer.refusal is not None:
                    reasons[answer.refusal.reason] += 1
                    continue
                dense = max((c.scores.get("dense", 0.0) for c in answer.candidates), default=0)
                judged = answer.answerability
                answered.append((q, dense, judged.score if judged else -1.0, answer.text))
        refused = len(asked) - len(answered)
        print(f"refused {refused} / {len(asked)} ({refused / len(asked):.1%}): {dict(reasons)}")
        for q, dense, covered, text in answered:
            print(f"  ANSWERED (dense {dense:.3f}, coverage {covered:.3f}) {q!r}: {text[:80]!r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
