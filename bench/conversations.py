"""Follow-up questions with and without their history, on mtrag-un (cloud, fiqa, govt).

Indexes mtrag-un's 840 passages as files (once, under `--out`; reruns embed nothing), then
asks every last turn of the `--split` conversations through `QueryEngine.chat` once per
rewrite mode (`none`: the last turn alone; `offline`: topic terms of earlier user turns in
the BM25 leg; `llm`: the endpoint's condensed question, with `generator.base_url` set) and
prints one row per domain and mode (`ragstream.eval.conversations`): recall@5 and nDCG@10 of
the gold passages on the answerable follow-up turns, the answered and gold-cited shares of
the answerable turns and the refused share of the unanswerable ones (`--answers`), and the
turns that need no rewrite: how many the rewrite changed and their recall@5.

    .venv/bin/python bench/conversations.py --split test --answers
        [--modes none,offline] [--set topic_idf=0.5 --set dense=rewrite] [--out DIR]
        [--judge DIR]

`--set NAME=VALUE` overrides a `query.conversation` setting (tune on `--split train` only:
mtrag-un's split rules). `--judge DIR` reads with a candidate answer judge and the decision
beside it. The rows are also written to `OUT/conversations-SPLIT.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragstream.core.settings import Settings  # noqa: E402
from ragstream.eval.beir import index_corpus  # noqa: E402
from ragstream.eval.conversations import (  # noqa: E402
    Outcome,
    ask,
    load_turns,
    markdown,
    summary,
)
from ragstream.eval.opened import quiet_settings  # noqa: E402
from ragstream.query.engine import QueryEngine  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "mtrag-un"


def overrides(pairs: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` pairs as settings values (JSON where it parses, else the string)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def with_mode(
    settings: Settings, mode: str, extra: dict[str, Any], judge: Path | None = None
) -> Settings:
    """`settings` with `query.conversation.rewrite = mode` and the `--set` overrides, the
    retrieval log off (these are not queries anyone asked), reading with the answer judge
    (and the decision beside it) in `judge` where one is given."""
    q = quiet_settings(settings, judge).query
    conversation = q.conversation.model_validate(
        {**q.conversation.model_dump(), **extra, "rewrite": mode}
    )
    query = q.model_copy(update={"conversation": conversation})
    return settings.model_copy(update={"query": query})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--modes", default="none,offline", help="comma-separated rewrite modes")
    parser.add_argument("--answers", action="store_true", help="also run the whole answer path")
    parser.add_argument("--set", action="append", default=[], help="query.conversation NAME=VALUE")
    parser.add_argument("--limit", type=int, default=None, help="only the first N turns")
    parser.add_argument(
        "--judge", type=Path, help="read with this answer judge's directory (default: shipped)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "conversations")
    args = parser.parse_args()
    corpus, turns = load_turns(DATA, args.split)
    turns = turns[: args.limit] if args.limit else turns
    settings = index_corpus(corpus, args.out / "mtrag-data")
    modes = ["none", *(m for m in args.modes.split(",") if m and m != "none")]
    extra = overrides(args.set)
    results: dict[str, dict[str, Outcome]] = {}
    started = time.perf_counter()
    with QueryEngine.open(with_mode(settings, "none", extra, args.judge)) as base:
        for mode in modes:
            moded = with_mode(settings, mode, extra, args.judge)
            engine = QueryEngine(moded, base.retriever, base.models)
            results[mode] = {t.id: ask(engine, t, answers=args.answers) for t in turns}
            print(f"{mode}: {len(turns)} turns", file=sys.stderr)
    rows = summary(turns, results)
    report = {
        "split": args.split,
        "turns": len(turns),
        "settings": settings.query.conversation.model_dump() | extra,
        "judge": str(args.judge or "shipped"),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"conversations-{args.split}.json").write_text(json.dumps(report, indent=1))
    print(f"mtrag-un {args.split}: {len(turns)} turns, {report['seconds']} s\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
