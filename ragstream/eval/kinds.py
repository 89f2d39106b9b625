"""Every kind of question a user asks, answerable or not, read through the engine.

A decision that refuses what the documents do not answer is fitted and measured on each kind
of "not answerable" a user meets, side by side with the answerable questions of the same
index (`KINDS`):

- `answerable`: the question, its gold text in the index;
- `gold_removed`: the same question with its gold documents taken out of the fused
  candidates before the cut to k (the natural RAG failure: the index holds the subject, not
  the answer). A SQuAD question whose answer string still appears in what is left is not
  counted: another paragraph answers it too;
- `adversarial`: SQuAD 2.0's questions written to look answerable from their paragraph;
- `off_topic`: questions about subjects the index never treats (some share a name with it);
- `conversational`: the last turns of conversations the documents do not answer
  (mtrag-un's UNANSWERABLE and UNDERSPECIFIED tasks). The set `mtrag` reads every last turn
  alone, as `/v1/query` receives it; the set `mtrag-chat` (`CHAT`) reads it with its
  history, as a chat asks it: through the conversation's rewrite
  (`QueryEngine.chat_retrieve`), so the judge and the decision read the effective question,
  and the readings record how many turns came before (`in_conversation`).

Each question becomes a `Reading`: its kind, data set, group (the unit of the
leave-one-group-out folds: an article, a conversation, a tenth of the claims) and the
signals the engine's answerability stage records for it (`None`: the retrieval gate refused).
The question is retrieved once; with and without its gold documents are two readings of the
same ranked pool, so a question costs one retrieval and two judge readings. Every reader
here takes an engine already open; the data sets' indexes, opened through the served
index, are `eval.kind_sets`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from ragstream.core.answers import ChatMessage, ChatRequest, QueryRequest, RetrievedChunk
from ragstream.eval.beir import Corpus, doc_key, load_beir
from ragstream.eval.squad import SquadQuestion, contains_answer
from ragstream.eval.squad_eval import floor_at, refused_at
from ragstream.query import answerable
from ragstream.query.decision import asked_after, leg_leads
from ragstream.query.decision import in_conversation as asked_in_conversation
from ragstream.query.engine import QueryEngine
from ragstream.query.gate import DEFAULT_DENSE_FLOOR

KINDS = ("answerable", "gold_removed", "adversarial", "off_topic", "conversational")
# the kinds whose "no" is natural: the answer is simply not in the index
NATURAL = ("gold_removed", "off_topic", "conversational")
POOL = 50  # fused candidates per question: the pool gold documents are taken out of
K = 8  # chunks the answerability stage reads (the engine's default k)
CHAT = "mtrag-chat"  # mtrag-un's last turns read with their history (the set and its data set)
FOLDS = 10  # BEIR claims are grouped by id modulo this for the leave-one-group-out folds


@dataclass(frozen=True)
class Reading:
    """One question asked through the engine, and the signals its answer recorded."""

    qid: str
    kind: str  # one of KINDS
    dataset: str
    group: str  # leave-one-group-out unit
    signals: dict[str, float] | None  # None: the retrieval gate refused

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


Hidden = Callable[[RetrievedChunk], bool]  # a candidate taken out (a gold document)
Signals = dict[str, float] | None  # None: the retrieval gate refused


@dataclass(frozen=True)
class Pair:
    """A question's signals as retrieved, and once its hidden candidates are taken out (with
    the text of the top k left, to tell whether something else still answers it)."""

    present: Signals
    absent: Signals = None
    left: tuple[str, ...] = ()
    hidden_in_top: bool = False  # a hidden candidate was among the top k as retrieved


class Read(Protocol):
    """Read a question (with its conversation's earlier messages, if any) as the engine
    would, with and without the candidates `hidden` names."""

    def __call__(
        self, question: str, hidden: Hidden | None = None, history: Sequence[ChatMessage] = ()
    ) -> Pair: ...


def engine_reader(engine: QueryEngine, k: int = K, pool: int = POOL, *, gate: bool = True) -> Read:
    """`read(question, hidden, history)`: the answerability signals of the question's top
    `k` candidates, as the engine records them, and (when `hidden` is given) of the top `k`
    left once the candidates `hidden` names are taken out; None where the dense gate refuses
    (no reranker: the best cosine of the top k is below the gate's floor), unless `gate` is
    off. With a `history`, the question is a conversation's last message: retrieved through
    the conversation's rewrite and judged as its effective question."""
    lexical, scorer = engine.retriever.lexical, engine.answer_judge
    limits = answerable.Limits.from_settings(engine.settings.query)
    floor = engine.settings.query.dense_floor
    floor = DEFAULT_DENSE_FLOOR if floor is None else floor

    def signals(
        question: str, ranked: Sequence[RetrievedChunk], history: Sequence[ChatMessage]
    ) -> Signals:
        top = ranked[:k]
        dense = max((r.scores.get("dense", 0.0) for r in top), default=0.0)
        if gate and (not top or dense < floor):
            return None
        found = {c.point_id: c for c in engine.side().vectors.get([r.point_id for r in top])}
        chunks = [found[r.point_id] for r in top if r.point_id in found]
        extra = {**leg_leads([r.scores for r in ranked]), **asked_after(history)}
        asked = answerable.Asked(question, chunks, lexical.doc_freqs, dense, extra)
        verdict, _ = answerable.judge(asked, limits, scorer)
        return dict(verdict.signals)

    def read(
        question: str, hidden: Hidden | None = None, history: Sequence[ChatMessage] = ()
    ) -> Pair:
        if history:
            messages = [*history, ChatMessage(role="user", content=question)]
            got = engine.chat_retrieve(ChatRequest(messages=messages, k=pool, generate=False))
            question = got.effective_query.question if got.effective_query else question
        else:
            got = engine.retrieve(QueryRequest(query=question, k=pool, generate=False))
        ranked = got.results
        if hidden is None:
            return Pair(signals(question, ranked, history))
        rest = [r for r in ranked if not hidden(r)]
        left = tuple(r.text for r in rest[:k])
        in_top = any(hidden(r) for r in ranked[:k])
        both = signals(question, ranked, history), signals(question, rest, history)
        return Pair(*both, left, in_top)

    return read


def squad_readings(
    read: Read,
    questions: Iterable[SquadQuestion],
    dataset: str,
) -> list[Reading]:
    """The SQuAD questions: an answerable one read with and without its paragraph (the
    gold-removed reading is dropped when a gold answer string is still in the top `K` of what
    is left), an unanswerable one as `adversarial`."""
    out = []
    for q in questions:
        if not q.answerable:
            out.append(Reading(q.id, "adversarial", dataset, q.article, read(q.text, None).present))
            continue
        gold = q.paragraph
        pair = read(q.text, hiding({gold}))
        out.append(Reading(q.id, "answerable", dataset, q.article, pair.present))
        if not answered_elsewhere(q, pair.left):
            out.append(Reading(q.id, "gold_removed", dataset, q.article, pair.absent))
    return out


def hiding(gold: set[str], key: Callable[[str], str] = doc_key) -> Hidden:
    """Takes out the candidates of the documents `gold` names (by `key` of their doc id: the
    file stem by default)."""

    def hidden(r: RetrievedChunk) -> bool:
        return key(r.doc_id) in gold

    return hidden


def answered_elsewhere(q: SquadQuestion, texts: Sequence[str]) -> bool:
    """Whether one of `texts` holds a gold answer string of `q` (SQuAD's normalization)."""
    return any(contains_answer(t, q.answers) for t in texts)


def beir_readings(
    read: Read, dataset_dir: Path, split: str, dataset: str, *, keep: Callable[[str], bool]
) -> list[Reading]:
    """A BEIR set's judged queries of `split` that `keep` accepts, each read with its gold
    documents and without them (grouped by id modulo `FOLDS`)."""
    _, queries, qrels = load_beir(dataset_dir, split)
    out = []
    for qid in sorted(q for q in queries if q in qrels and keep(q)):
        gold = {d for d, rel in qrels[qid].items() if rel > 0}
        pair = read(queries[qid], hiding(gold))
        group = f"{dataset}-{_fold(qid)}"
        out.append(Reading(qid, "answerable", dataset, group, pair.present))
        out.append(Reading(qid, "gold_removed", dataset, group, pair.absent))
    return out


def off_topic_readings(
    read: Read, questions: Sequence[tuple[str, str]], dataset: str
) -> list[Reading]:
    """Questions (id, text) about subjects the index never treats, grouped by their id's
    prefix (the part before the last `-`)."""
    return [
        Reading(qid, "off_topic", dataset, qid.rsplit("-", 1)[0], read(text, None).present)
        for qid, text in questions
    ]


@dataclass(frozen=True)
class Task:
    """One mtrag-un task: the last user turn of a conversation and its label."""

    id: str
    conversation: str
    question: str
    answerability: str
    gold: tuple[str, ...]
    domain: str = ""
    history: tuple[ChatMessage, ...] = ()  # the messages before the question, oldest first


def load_mtrag(folder: Path, split: str) -> tuple[Corpus, list[Task]]:
    """mtrag-un's passages (all of them: the corpus is shared by both splits) and the tasks
    of the conversations of `split` (`split.json`, by conversation)."""
    corpus: Corpus = {}
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        corpus[mtrag_key(doc["doc_id"])] = {"title": doc["title"], "text": doc["text"].strip()}
    chosen = set(json.loads((folder / "split.json").read_text())[split])
    tasks = []
    for line in (folder / "conversations.jsonl").read_text(encoding="utf-8").splitlines():
        t = json.loads(line)
        if t["conversation_id"] in chosen:
            tasks.append(
                Task(
                    t["task_id"],
                    t["conversation_id"],
                    t["question"],
                    t["answerability"],
                    tuple(mtrag_key(d) for d in t["gold_doc_ids"]),
                    t["domain"],
                    tuple(
                        ChatMessage(
                            role="user" if m["speaker"] == "user" else "assistant",
                            content=m["text"],
                        )
                        for m in t["turns"][:-1]
                        if m["text"].strip()
                    ),
                )
            )
    return corpus, tasks


def mtrag_key(doc_id: str) -> str:
    """A passage id as a file stem (`index_corpus` writes `<key>.md`).

    >>> mtrag_key("ibmcld_00089-0-1590"), mtrag_key("a/b:c")
    ('ibmcld_00089-0-1590', 'a_b_c')
    """
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in doc_id).lstrip(".")


def mtrag_readings(
    read: Read, tasks: Sequence[Task], dataset: str = "mtrag", *, chat: bool = False
) -> list[Reading]:
    """ANSWERABLE tasks read with and without their reference passages; UNANSWERABLE and
    UNDERSPECIFIED ones as `conversational`; PARTIAL ones are left out (half an answer is
    neither). Each last turn is read alone, as `/v1/query` receives it, or with `chat` with
    its history, as a chat asks it."""
    out = []
    for t in tasks:
        history = t.history if chat else ()
        if t.answerability == "ANSWERABLE":
            pair = read(t.question, hiding(set(t.gold)), history)
            out.append(Reading(t.id, "answerable", dataset, t.conversation, pair.present))
            out.append(Reading(t.id, "gold_removed", dataset, t.conversation, pair.absent))
        elif t.answerability in ("UNANSWERABLE", "UNDERSPECIFIED"):
            signals = read(t.question, None, history).present
            out.append(Reading(t.id, "conversational", dataset, t.conversation, signals))
    return out


class FrontierPoint(BaseModel):
    """One point of the decision's frontier: keep `answered` of the answerable questions
    answered with `decision_floor`, and `refused` of the unanswerable ones are refused."""

    answered: float
    refused: float
    decision_floor: float


ANSWERED_SHARES = (0.80, 0.85, 0.90, 0.95)


def frontier(
    readings: Sequence[Reading],
    score: Callable[[dict[str, float]], float],
    shares: Sequence[float] = ANSWERED_SHARES,
) -> list[FrontierPoint]:
    """For each answered share, the highest floor on `score` that keeps that share of the
    answerable readings answered and the share of the others it refuses (a gate refusal is
    refused by any floor).

    >>> rs = [Reading(str(i), k, "d", "g", {"p": p}) for i, (k, p) in enumerate(
    ...     [("answerable", 0.9), ("answerable", 0.6), ("gold_removed", 0.7),
    ...      ("gold_removed", 0.1)])]
    >>> [(f.refused, f.decision_floor) for f in frontier(rs, lambda s: s["p"], [0.5, 1.0])]
    [(1.0, 0.9), (0.5, 0.6)]
    """
    values = [score(r.signals) if r.signals is not None else float("-inf") for r in readings]
    pos = [v for r, v in zip(readings, values, strict=True) if r.answerable]
    neg = [v for r, v in zip(readings, values, strict=True) if not r.answerable]
    if not pos or not neg:
        return []
    out = []
    for share in shares:
        floor = floor_at(pos, share)
        out.append(
            FrontierPoint(
                answered=share,
                refused=round(refused_at(pos, neg, share), 4),
                decision_floor=round(floor, 4) if floor > float("-inf") else 0.0,
            )
        )
    return out


def save(readings: Sequence[Reading], path: Path, key: str) -> None:
    path.write_text(json.dumps({"key": key, "readings": [r.__dict__ for r in readings]}))


def load(path: Path, key: str) -> list[Reading] | None:
    """The readings saved under `key`, or None (none saved, or under another key)."""
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return [Reading(**r) for r in saved["readings"]] if saved.get("key") == key else None


def _fold(qid: str) -> int:
    return int(qid) % FOLDS if qid.isdigit() else sum(map(ord, qid)) % FOLDS


def in_conversation(reading: Reading) -> bool:
    """Whether `reading` is of a question asked after earlier turns (what the decision's
    conversation member reads)."""
    return reading.signals is not None and asked_in_conversation(reading.signals)
