"""What a preference for recent documents (`--prefer-recent`, off by default) does to
quality, on a set where recency matters and on one where it does not.

From the SQuAD 2.0 half's test articles (../shared/data/squad2-half, measured only), every
paragraph becomes a Markdown note with an `updated` date in its front matter. A paragraph
with an answerable question whose answer holds a digit is **versioned**: the note as written
is the current version (updated in the last year), and an archived copy, older by two to
five years, says every such answer with its digits changed (`1,281` -> `2,392`): the kind of
stale copy an index of a changing folder holds. Every other paragraph is one note, dated
at random over five years.

Each answerable question is asked twice (the default embedded index: MiniLM, both legs,
the reranker), without and with `prefer_recent` (each `--half-life`, on `updated`):

- versioned questions: how often the current version ranks first, how often the archived one
  does, and how often the answer quotes the current answer or the stale one;
- other questions: how often the question's own paragraph ranks first, and is among the 8
  kept: what the preference costs where dates say nothing about relevance.

    .venv/bin/python bench/recency.py [--half-life 90d,365d,1825d] [--limit 0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream import api
from ragstream.client import Client
from ragstream.core.answers import RecencyPreference
from ragstream.core.settings import Settings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad2-half"
NOW = dt.datetime.now(dt.UTC)


def shifted(answer: str) -> str:
    """The answer with each digit moved on by one (mod 10): a plausible stale value."""
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), answer)


def corpus(limit: int, seed: int) -> tuple[dict[str, str], list[dict[str, object]]]:
    """(file name -> note text, questions with their paragraph's file and kind)."""
    rng = random.Random(seed)
    split = json.loads((DATA / "split.json").read_text())
    data = json.loads((DATA / "dev-v2.0-half.json").read_text())["data"]
    notes: dict[str, str] = {}
    questions: list[dict[str, object]] = []
    for article in (a for a in data if a["title"] in set(split["test"])):
        for i, para in enumerate(article["paragraphs"]):
            name = f"{article['title'][:40]}-{i:03d}"
            answered = [q for q in para["qas"] if not q["is_impossible"]]
            numeric = {
                a["text"] for q in answered for a in q["answers"] if re.search(r"\d", a["text"])
            }
            if numeric:
                fresh = NOW - dt.timedelta(days=rng.randrange(365))
                stale = fresh - dt.timedelta(days=rng.randrange(730, 1826))
                old = para["context"]
                for text in sorted(numeric, key=len, reverse=True):
                    old = old.replace(text, shifted(text))
                notes[f"{name}.md"] = note(para["context"], fresh)
                notes[f"{name}-archived.md"] = note(old, stale)
            else:
                notes[f"{name}.md"] = note(
                    para["context"], NOW - dt.timedelta(days=rng.randrange(1826))
                )
            for q in answered:
                gold = q["answers"][0]["text"]
                versioned = bool(numeric) and bool(re.search(r"\d", gold))
                questions.append(
                    {"q": q["question"], "file": f"{name}.md", "gold": gold, "versioned": versioned}
                )
    rng.shuffle(questions)
    return notes, questions[:limit] if limit else questions


def note(text: str, updated: dt.datetime) -> str:
    return f"---\nupdated: {updated.date().isoformat()}\n---\n{text}\n"


def run(
    client: Client, questions: list[dict[str, object]], pref: RecencyPreference | None
) -> dict[str, float]:
    counts = {k: 0 for k in ("v", "v_current", "v_archived", "v_says_current", "v_says_stale")}
    counts |= {"o": 0, "o_first": 0, "o_kept": 0}
    for item in questions:
        q, file, gold = str(item["q"]), str(item["file"]), str(item["gold"])
        found = client.retrieve(q, k=8, prefer_recent=pref).results
        names = [r.doc_id.rpartition(":")[2] for r in found]
        if item["versioned"]:
            counts["v"] += 1
            counts["v_current"] += bool(names) and names[0] == file
            counts["v_archived"] += bool(names) and names[0] == file.replace(".md", "-archived.md")
            text = client.query(q, k=8, prefer_recent=pref).text
            counts["v_says_current"] += gold in text
            counts["v_says_stale"] += shifted(gold) in text and gold not in text
        else:
            counts["o"] += 1
            counts["o_first"] += bool(names) and names[0] == file
            counts["o_kept"] += file in names
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half-life", default="90d,365d,1825d", help="comma-separated")
    ap.add_argument("--limit", type=int, default=0, help="questions asked (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    notes, questions = corpus(args.limit, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        for name, text in notes.items():
            (docs / name).write_text(text, encoding="utf-8")
        settings = Settings(data_dir=Path(tmp) / "data")
        settings.query.log_queries = False
        report = api.sync([docs], settings=settings)
        print(f"{len(notes)} notes ({report.chunks_live} chunks), {len(questions)} questions")
        with Client(settings=settings) as client:
            rows = {"off": run(client, questions, None)}
            for half_life in args.half_life.split(","):
                pref = RecencyPreference(half_life=half_life, field="updated")
                rows[f"half-life {half_life}"] = run(client, questions, pref)
    for name, c in rows.items():
        v, o = max(c["v"], 1), max(c["o"], 1)
        print(
            f"{name:16s} versioned ({c['v']}): current first {c['v_current'] / v:.1%}, "
            f"archived first {c['v_archived'] / v:.1%}, answer quotes the current value "
            f"{c['v_says_current'] / v:.1%}, only the stale one {c['v_says_stale'] / v:.1%} | "
            f"other ({c['o']}): own paragraph first {c['o_first'] / o:.1%}, in the 8 kept "
            f"{c['o_kept'] / o:.1%}"
        )


if __name__ == "__main__":
    main()
