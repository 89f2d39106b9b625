"""Conversational retrieval and answers, measured on mtrag-un's multi-turn conversations.

Each task is a conversation's last user turn with the turns before it as history
(`load_turns`), asked of the index of mtrag-un's passages through `QueryEngine.chat` under one
rewrite mode (`query.conversation.rewrite`: `none`, `offline` or `llm`), so every rule of the
answer path applies. Per task (`Outcome`): the documents of its top ranked chunks (recall@5
and nDCG@10 of the gold passages), whether the rewrite changed what retrieval ran, and, with
answers, whether it was answered and whether a gold passage was cited.

`summary` turns the outcomes of each mode into one row per domain and mode:

- retrieval on the ANSWERABLE turns that have history (follow-ups): recall@5, nDCG@10;
- answers: answered share and gold-cited share of the ANSWERABLE turns, refused share of the
  UNANSWERABLE ones;
- the turns that need no rewrite: the ANSWERABLE turns whose last turn alone already finds
  every gold passage in its top 5 (and the first turns, which have no history): how many the
  rewrite changed, and their recall@5 under the rewrite (1.0 is undamaged).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstream.core.answers import Answer, ChatMessage, ChatRequest
from ragstream.eval.beir import Corpus, doc_key
from ragstream.eval.kinds import load_mtrag
from ragstream.query import pipelines
from ragstream.query.conversation import bounded
from ragstream.query.engine import QueryEngine

DOMAINS = ("cloud", "fiqa", "govt")
RANKED = 10  # chunks ranked per task for the retrieval figures (nDCG@10)


@dataclass(frozen=True)
class Turn:
    """One mtrag-un task: the conversation up to its last user turn, and its labels."""

    id: str
    conversation: str
    domain: str
    messages: tuple[ChatMessage, ...]
    answerability: str
    gold: tuple[str, ...]  # gold passages as `mtrag_key`s

    @property
    def question(self) -> str:
        return self.messages[-1].content

    @property
    def has_history(self) -> bool:
        return len(self.messages) > 1


@dataclass(frozen=True)
class Outcome:
    """One turn asked under one rewrite mode."""

    turn: str
    ranked: tuple[str, ...]  # the documents of the top chunks, best first, distinct
    changed: bool  # the rewrite changed what a retrieval leg searched
    sparse: str  # what the BM25 leg searched
    answered: bool | None = None  # None: answers were not run
    gold_cited: bool | None = None


def load_turns(folder: Path, split: str) -> tuple[Corpus, list[Turn]]:
    """mtrag-un's passages and the turns of `split`'s conversations (`split.json`)."""
    corpus, tasks = load_mtrag(folder, split)
    turns = [
        Turn(
            t.id,
            t.conversation,
            t.domain,
            (*t.history, ChatMessage(role="user", content=t.question)),
            t.answerability,
            t.gold,
        )
        for t in tasks
    ]
    return corpus, turns


def ranked_documents(answer: Answer) -> tuple[str, ...]:
    """The documents of an answer's ranked candidates, best first, each once."""
    return tuple(dict.fromkeys(doc_key(c.doc_id) for c in answer.candidates))


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Share of the gold documents among the top `k`.

    >>> recall_at(["a", "b", "c"], ["b", "d"], 2)
    0.5
    """
    wanted = set(gold)
    return len(wanted.intersection(ranked[:k])) / len(wanted) if wanted else 0.0


def ndcg_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG@k.

    >>> ndcg_at(["a", "b"], ["a"], 10), round(ndcg_at(["x", "a"], ["a"], 10), 3)
    (1.0, 0.631)
    """
    wanted = set(gold)
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in wanted)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), k)))
    return dcg / ideal if ideal else 0.0


def ask(engine: QueryEngine, turn: Turn, *, answers: bool) -> Outcome:
    """One turn through the engine: its retrieval (`converse` and `rank`, `RANKED` chunks),
    and with `answers` the whole chat answer."""
    request = ChatRequest(messages=list(turn.messages), k=RANKED, generate=False)
    c = engine.settings.query.conversation
    history = bounded(request.history, c.max_turns, c.max_chars)
    got = engine.run(pipelines.CHAT_RETRIEVE, request.as_query(), history=history).answer
    effective = got.effective_query
    changed = effective is not None and (
        effective.dense != turn.question or effective.sparse != turn.question
    )
    outcome = Outcome(
        turn.id, ranked_documents(got), changed, effective.sparse if effective else turn.question
    )
    if not answers:
        return outcome
    answer = engine.chat(ChatRequest(messages=list(turn.messages)))
    cited = {doc_key(c.doc_id) for c in answer.citations}
    return Outcome(
        outcome.turn,
        outcome.ranked,
        outcome.changed,
        outcome.sparse,
        answered=answer.refusal is None,
        gold_cited=bool(cited.intersection(turn.gold)),
    )


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def needs_no_rewrite(turns: Sequence[Turn], alone: dict[str, Outcome]) -> list[Turn]:
    """The ANSWERABLE turns whose last turn alone already ranks every gold passage in its
    top 5, and the first turns (no history): a rewrite can only damage them."""
    return [
        t
        for t in turns
        if t.answerability == "ANSWERABLE"
        and (not t.has_history or recall_at(alone[t.id].ranked, t.gold, 5) == 1.0)
    ]


def row(
    turns: Sequence[Turn], got: dict[str, Outcome], alone: dict[str, Outcome]
) -> dict[str, Any]:
    """The figures of one mode over `turns` (see the module docstring); `alone`: the same
    turns with no rewrite."""
    follow = [t for t in turns if t.answerability == "ANSWERABLE" and t.has_history]
    answerable = [t for t in turns if t.answerability == "ANSWERABLE"]
    unanswerable = [t for t in turns if t.answerability == "UNANSWERABLE"]
    kept = needs_no_rewrite(turns, alone)
    answered = [got[t.id] for t in answerable if got[t.id].answered is not None]
    refused = [got[t.id] for t in unanswerable if got[t.id].answered is not None]
    return {
        "followups": len(follow),
        "recall@5": _mean([recall_at(got[t.id].ranked, t.gold, 5) for t in follow]),
        "ndcg@10": _mean([ndcg_at(got[t.id].ranked, t.gold, 10) for t in follow]),
        "changed": sum(got[t.id].changed for t in follow),
        "answerable": len(answered),
        "answered": _mean([float(bool(o.answered)) for o in answered]),
        "gold_cited": _mean([float(bool(o.gold_cited)) for o in answered]),
        "unanswerable": len(refused),
        "refused": _mean([float(not o.answered) for o in refused]),
        "standalone": len(kept),
        "standalone_changed": sum(got[t.id].changed for t in kept),
        "standalone_recall@5": _mean([recall_at(got[t.id].ranked, t.gold, 5) for t in kept]),
    }


def summary(turns: Sequence[Turn], modes: dict[str, dict[str, Outcome]]) -> list[dict[str, Any]]:
    """One row per domain (and `all`) and mode; `modes["none"]` is the last turn alone."""
    alone = modes["none"]
    rows = []
    for domain in (*DOMAINS, "all"):
        mine = [t for t in turns if domain in ("all", t.domain)]
        for mode, got in modes.items():
            rows.append({"domain": domain, "mode": mode, **row(mine, got, alone)})
    return rows


COLUMNS = (
    "domain",
    "mode",
    "followups",
    "recall@5",
    "ndcg@10",
    "changed",
    "answered",
    "gold_cited",
    "refused",
    "standalone",
    "standalone_changed",
    "standalone_recall@5",
)


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (`COLUMNS`; `-` where a figure was not run)."""

    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


__all__ = [
    "Outcome",
    "Turn",
    "ask",
    "load_turns",
    "markdown",
    "ndcg_at",
    "ranked_documents",
    "recall_at",
    "summary",
]
