"""What a user reads: the offline answer's sentences, today's rule and the answer that stops,
side by side in one run.

Three question sets, each on its own index under `--out` (reruns embed nothing):

- **squad**: squad2-half's `--split` articles, every answerable question. Per configuration:
  sentences per answer, the share of answer sentences that cite the gold paragraph
  (precision), the gold answer string in the first sentence and anywhere in the answer,
  and the answerable questions refused.
- **docs**: the shared real documents (`html`, `md`) and `tests/data/docs_questions.tsv`:
  sentences per answer, the share of answer sentences citing the file that holds the
  answer, the right file cited first, and refusals.
- **mtrag**: mtrag-un's `--split` conversations replayed turn by turn with the engine's own
  answers as the assistant turns (as the console does): sentences per answer, the share of
  answered follow-ups whose lead repeats a sentence of an earlier answer, and the
  answerable turns refused.

`--choose` (train only) reads each squad question once and replays the answer rule
(`query.answerable.follow_ratio`, `alone_floor`) over a grid on what the answer judge read,
the way the defaults were chosen.

    .venv/bin/python bench/answer_sentences.py --split test [--sets squad docs mtrag]
    .venv/bin/python bench/answer_sentences.py --split train --choose
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragstream import api  # noqa: E402
from ragstream.core.answers import Answer, ChatMessage, ChatRequest, QueryRequest  # noqa: E402
from ragstream.core.settings import Settings  # noqa: E402
from ragstream.eval.beir import doc_key, index_corpus  # noqa: E402
from ragstream.eval.conversations import load_turns  # noqa: E402
from ragstream.eval.squad import contains_answer, holds_out, load_squad  # noqa: E402
from ragstream.eval.squad_eval import first_sentence  # noqa: E402
from ragstream.query import pipelines  # noqa: E402
from ragstream.query.answerable import AnswerRule, answering, said_before, said_key  # noqa: E402
from ragstream.query.engine import QueryEngine  # noqa: E402
from ragstream.query.verify import parse_citations, sentence_spans  # noqa: E402

DATA = REPO.parent / "shared" / "data"
DOCS_QUESTIONS = REPO / "tests" / "data" / "docs_questions.tsv"
# today's answer (every sentence over the floor, up to three; headings read; earlier answers
# repeated) against the answer that stops (the shipped defaults)
CONFIGS: dict[str, dict[str, Any]] = {
    "today": {
        "answerable": {"follow_ratio": 0.0, "alone_floor": 0.0, "prose_only": False},
        "conversation": {"fresh_lead": False},
    },
    "stops (default)": {},
}
MAX_SENTENCES = 3  # the extractive generator's cap


@dataclass
class Tally:
    """Per configuration: answers, their sentences, and the figures counted over them."""

    asked: int = 0
    answered: int = 0
    sentences: int = 0
    on_gold: int = 0  # answer sentences citing the gold document
    first: int = 0  # gold in the first sentence (squad) / the right file cited first (docs)
    anywhere: int = 0  # gold anywhere in the answer
    follow_ups: int = 0  # answered follow-ups (mtrag)
    repeated: int = 0  # ... whose lead repeats an earlier answer's sentence

    def row(self, name: str) -> str:
        n = max(self.answered, 1)
        refused = self.asked - self.answered
        cells = [
            name,
            f"{self.sentences / n:.2f}",
            f"{self.on_gold / max(self.sentences, 1):.3f}",
            f"{self.first / n:.3f}",
            f"{self.anywhere / n:.3f}",
            f"{refused} / {self.asked} ({refused / max(self.asked, 1):.1%})",
        ]
        if self.follow_ups:
            cells.append(
                f"{self.repeated} / {self.follow_ups} ({self.repeated / self.follow_ups:.1%})"
            )
        return "| " + " | ".join(cells) + " |"


HEADER = (
    "| configuration | sentences / answer | sentences citing gold | gold first | gold anywhere "
    "| answerable refused |"
)


def cited_docs(answer: Answer) -> list[str]:
    """The document each answer sentence cites (its first marker), in order."""
    by_cid = {c.cid: doc_key(c.doc_id) for c in answer.citations}
    firsts = ([*parse_citations(answer.text[a:b]), ""][0] for a, b in sentence_spans(answer.text))
    return [by_cid.get(cid, "") for cid in firsts]


def engine_for(base: QueryEngine, overrides: dict[str, Any]) -> QueryEngine:
    q = base.settings.query
    answerable = q.answerable.model_copy(update=overrides.get("answerable", {}))
    conversation = q.conversation.model_copy(update=overrides.get("conversation", {}))
    query = q.model_copy(
        update={"answerable": answerable, "conversation": conversation, "log_queries": False}
    )
    return QueryEngine(
        base.settings.model_copy(update={"query": query}), base.retriever, base.models
    )


def tally_answer(t: Tally, answer: Answer, gold_doc: str, gold: Sequence[str] | None) -> None:
    t.asked += 1
    if answer.refusal is not None:
        return
    t.answered += 1
    docs = cited_docs(answer)
    t.sentences += len(docs)
    t.on_gold += sum(d == gold_doc for d in docs)
    if gold is None:  # docs: the right file first, and anywhere
        t.first += bool(docs) and docs[0] == gold_doc
        t.anywhere += gold_doc in docs
    else:
        t.first += contains_answer(first_sentence(answer.text), gold)
        t.anywhere += contains_answer(answer.text, gold)


def squad(args: argparse.Namespace) -> None:
    data = load_squad(DATA / "squad2-half", args.split)
    asked = [q for q in data.questions if q.answerable]
    if args.split == "train":  # the articles the answer judge never trained on
        asked = [q for q in asked if holds_out(q.article)]
    asked = asked[: args.limit] if args.limit else asked
    settings = index_corpus(data.corpus, args.out / f"squad-{args.split}")
    with QueryEngine.open(settings) as base:
        if args.choose:
            choose(base, asked)
            return
        print(f"\n### squad2-half {args.split}: {len(asked)} answerable questions\n")
        print(HEADER + "\n|---|---|---|---|---|---|")
        for name, overrides in CONFIGS.items():
            engine, t = engine_for(base, overrides), Tally()
            for q in asked:
                answer = engine.answer(QueryRequest(query=q.text))
                tally_answer(t, answer, q.paragraph, q.answers)
            print(t.row(name))


def choose(base: QueryEngine, asked: Sequence[Any]) -> None:
    """Read each question once (up to the decision), then replay over grids on what the
    judge read: the lead's order (`RANK_WEIGHT`, `COVERAGE_WEIGHT` of `evidence_order`),
    then the answer rule: the figures the defaults were chosen by."""
    engine = engine_for(base, {})
    reads = []
    for q in asked:
        run = engine.run(pipelines.DECIDE, QueryRequest(query=q.text))
        if run.answer.refusal is None:
            reads.append((q, [r.candidate.chunk for r in run.ranked], run.read))
    floor = engine.settings.query.answerable.sentence_floor
    n = max(len(reads), 1)
    print(f"\n### choosing on squad2-half train (held-out articles): {len(reads)} answered\n")
    print("| rank weight | coverage weight | lead cites gold | gold in the lead |")
    print("|---|---|---|---|")
    for rank, cover in itertools.product((0.0, 0.3, 0.6, 1.0, 2.0), (0.0, 1.5, 3.0, 5.0)):
        precise = first = 0
        for q, chunks, read in reads:
            held = [e for e in read if e.answers >= floor]
            if not held:
                continue
            lead = max(
                held, key=lambda e: math.log(e.answers + 1e-4) - rank * e.chunk + cover * e.covered
            )
            precise += doc_key(chunks[lead.chunk].doc_id) == q.paragraph
            first += contains_answer(chunks[lead.chunk].text[lead.start : lead.end], q.answers)
        print(f"| {rank} | {cover} | {precise / n:.3f} | {first / n:.3f} |")
    print("\n| follow_ratio | alone_floor | sentences / answer | citing gold | gold anywhere |")
    print("|---|---|---|---|---|")
    for follow, alone in itertools.product((0.0, 0.2, 0.35, 0.5, 0.7, 1.01), (0.0, 0.3, 0.5, 0.8)):
        rule = AnswerRule(floor=floor, follow=follow, alone=alone)
        sentences = on_gold = anywhere = 0
        for q, chunks, read in reads:
            said = answering(chunks, read, rule)[:MAX_SENTENCES]
            docs = [doc_key(chunks[_chunk_of(chunks, read, s)].doc_id) for s in said]
            sentences += len(said)
            on_gold += sum(d == q.paragraph for d in docs)
            anywhere += contains_answer(" ".join(said), q.answers)
        print(
            f"| {follow} | {alone} | {sentences / n:.2f} | {on_gold / max(sentences, 1):.3f} "
            f"| {anywhere / n:.3f} |"
        )


def _chunk_of(chunks: Sequence[Any], read: Sequence[Any], sentence: str) -> int:
    """The chunk index of a said sentence (the evidence that said it, else the first chunk
    holding it)."""
    for e in read:
        if chunks[e.chunk].text[e.start : e.end] == sentence:
            return int(e.chunk)
    return next((i for i, c in enumerate(chunks) if sentence in c.text), 0)


def docs(args: argparse.Namespace) -> None:
    root = args.out / "docs-files"
    for folder in ("html", "md"):
        if not (root / folder).exists():
            shutil.copytree(DATA / "docs" / folder, root / folder)
    settings = Settings(data_dir=args.out / "docs-data")
    api.sync([root], settings=settings)
    rows = csv.DictReader(
        (line for line in DOCS_QUESTIONS.read_text().splitlines() if not line.startswith("#")),
        delimiter="\t",
    )
    asked = [(r["question"], Path(r["file"]).stem) for r in rows]
    print(f"\n### shared docs: {len(asked)} answerable questions (gold: the file)\n")
    print(
        HEADER.replace("gold first", "right file first").replace(
            "gold anywhere", "right file cited"
        )
    )
    print("|---|---|---|---|---|---|")
    with QueryEngine.open(settings) as base:
        for name, overrides in CONFIGS.items():
            engine, t = engine_for(base, overrides), Tally()
            for question, stem in asked:
                tally_answer(t, engine.answer(QueryRequest(query=question)), stem, None)
            print(t.row(name))


def mtrag(args: argparse.Namespace) -> None:
    corpus, turns = load_turns(DATA / "mtrag-un", args.split)
    labels = {(x.conversation, sum(m.role == "user" for m in x.messages)): x for x in turns}
    longest: dict[str, Any] = {}
    for x in turns:  # a conversation's last task holds all of its turns
        if len(x.messages) >= len(longest.get(x.conversation, x).messages):
            longest[x.conversation] = x
    conversations = list(longest.values())[: args.limit] if args.limit else list(longest.values())
    settings = index_corpus(corpus, args.out / "mtrag-data")
    asked = sum(m.role == "user" for x in conversations for m in x.messages)
    print(f"\n### mtrag-un {args.split}: {len(conversations)} conversations, {asked} user turns "
          "replayed with the engine's own answers (gold: a reference passage)\n")  # fmt: skip
    print(HEADER + " follow-up leads repeating an earlier answer |\n|---|---|---|---|---|---|---|")
    with QueryEngine.open(settings) as base:
        for name, overrides in CONFIGS.items():
            engine, t = engine_for(base, overrides), Tally()
            for conversation in conversations:
                replay(engine, conversation, labels, t)
            print(t.row(name))


def replay(engine: QueryEngine, conversation: Any, labels: dict[Any, Any], t: Tally) -> None:
    """Ask a conversation's user turns in order, each after the engine's own earlier answers."""
    history: list[ChatMessage] = []
    user_turn = 0
    for message in conversation.messages:
        if message.role != "user":
            continue
        user_turn += 1
        answer = engine.chat(ChatRequest(messages=[*history, message]))
        label = labels.get((conversation.conversation, user_turn))
        if label is not None and label.answerability == "ANSWERABLE":
            t.asked += 1
            if answer.refusal is None:
                t.answered += 1
                docs = cited_docs(answer)
                t.sentences += len(docs)
                t.on_gold += sum(d in label.gold for d in docs)
                t.first += bool(docs) and docs[0] in label.gold
                t.anywhere += any(d in label.gold for d in docs)
        if answer.refusal is None and history:
            t.follow_ups += 1
            spans = sentence_spans(answer.text)
            lead = answer.text[spans[0][0] : spans[0][1]] if spans else ""
            t.repeated += said_key(lead) in said_before(history)
        history += [message, ChatMessage(role="assistant", content=answer.text or "(refused)")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--sets", nargs="+", default=["squad", "docs", "mtrag"])
    ap.add_argument("--choose", action="store_true", help="train: the grid the defaults come from")
    ap.add_argument(
        "--limit", type=int, default=None, help="only the first N questions / conversations"
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "answer-sentences")
    args = ap.parse_args()
    if args.choose and args.split != "train":
        ap.error("--choose reads the train split only")
    started = time.perf_counter()
    for name in args.sets:
        if name == "squad":
            squad(args)
        elif name == "docs" and not args.choose:
            docs(args)
        elif name == "mtrag" and not args.choose:
            mtrag(args)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
