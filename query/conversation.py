"""Conversations: the standalone test of a follow-up question and the rewrites that make it
mean what the user meant.

A chat request is answered as a question with an effective question and a history (the
engine's `converse` stage, query/stages.py, runs what is here):

- `bounded`: the history a rewrite reads: the newest `max_turns` messages within
  `max_chars` characters; the oldest are dropped first and counted.
- `standalone_reasons`: why a question does not stand alone, of the tests switched on in
  `not_standalone`: it retrieves weakly on its own (`weak`: its best dense cosine over the
  index is below `strong_dense`; the default, the only one on), a pronoun or a deictic opener
  (`deictic`), fewer than `short_words` words (`short`), or no term the index scores as a
  topic (`no_topic`: no term whose BM25 idf reaches `topic_idf` of the rarest a known term
  can be). A question with no reason, or with no history, is retrieved exactly as asked.
- `offline_rewrite` (HQE-style, Lin et al. 2020): the topic terms of every earlier user turn,
  and, when the question alone retrieves weakly (best BM25 score below `weak_bm25`), any
  known term of the last `subtopic_turns` user turns, are carried into the **BM25 leg**
  only: the dense leg embeds the question as asked unless `dense = "rewrite"`.
- the LLM rewrite (`condense_prompt`, `parse_rewrite`, `smuggled`): an endpoint condenses
  the history and the question into one standalone question for retrieval; a rewrite that
  adds a term found in no earlier turn is rejected for the offline one (an LLM must not
  smuggle in its own knowledge). The answer is still written from the question as asked,
  with the history (query/stages.py `assembled`).

`Rewriter` holds the settings and the endpoint and turns a question and its history into a
`ChatPlan`: the effective question, each leg's text and the answer's `Conversation` record.
Everything but the endpoint call is a pure function of its arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragstream.connectors.lexical import tokenize
from ragstream.core.answers import ChatMessage, Conversation, EffectiveQuery
from ragstream.core.settings import ConversationSettings, Settings
from ragstream.query.answerable import QUESTION_WORDS, DocFreqs, idf, question_terms
from ragstream.query.generate import Generator
from ragstream.query.transforms import Prompt, endpoint_generator

# words that point back at something said earlier: a question holding one needs its history
PRONOUNS = frozenset(
    re.findall(
        r"\w+",
        "it its itself they them their theirs themselves he him his she her hers these those "
        "this that such same former latter there one ones other another else",
    )
)
# openers that continue the previous turn ("and without downtime?", "what about Linux?")
OPENERS = (
    "and",
    "but",
    "or",
    "so",
    "also",
    "then",
    "what about",
    "how about",
    "what if",
    "why not",
    "same",
    "ok",
    "okay",
)
_WORD = re.compile(r"[^\W_][\w'’-]*")

CONDENSE_SYSTEM = (
    "You rewrite the last question of a conversation as one standalone question for a "
    "search engine. Replace every pronoun and reference with what it refers to in the "
    "conversation, and keep the question's own words. Use only words of the conversation: "
    "add no fact, name or term of your own. Reply with the rewritten question only."
)


@dataclass(frozen=True)
class Term:
    """An analyzed term of a turn that the index holds: its stem, a word of the turn that
    analyzes to it, and its BM25 idf over the index."""

    stem: str
    word: str
    idf: float


@dataclass(frozen=True)
class Bounded:
    """The history a rewrite reads (oldest first) and how many older messages were dropped."""

    messages: tuple[ChatMessage, ...] = ()
    dropped: int = 0


@dataclass(frozen=True)
class ChatPlan:
    """What one conversational question retrieves with: the effective question (what the
    decision, the judge and the refusal rules read), each leg's text, and the record."""

    question: str
    dense: str
    sparse: str
    record: Conversation

    @property
    def effective(self) -> EffectiveQuery:
        return EffectiveQuery(question=self.question, dense=self.dense, sparse=self.sparse)


def bounded(history: Sequence[ChatMessage], max_turns: int, max_chars: int) -> Bounded:
    """The newest messages of `history` within `max_turns` messages and `max_chars`
    characters, oldest first; the older ones are dropped and counted.

    >>> m = [ChatMessage(role="user", content="x" * 10)] * 5
    >>> b = bounded(m, 3, 25)
    >>> len(b.messages), b.dropped
    (2, 3)
    """
    kept: list[ChatMessage] = []
    chars = 0
    for message in reversed(history[len(history) - max_turns :] if max_turns else []):
        if chars + len(message.content) > max_chars:
            break
        kept.append(message)
        chars += len(message.content)
    return Bounded(tuple(reversed(kept)), len(history) - len(kept))


def words(text: str) -> list[str]:
    """The words of `text`, lower-cased.

    >>> words("And without Downtime?")
    ['and', 'without', 'downtime']
    """
    return [w.lower() for w in _WORD.findall(text)]


def known_terms(texts: Sequence[str], doc_freqs: DocFreqs) -> tuple[int, list[list[Term]]]:
    """The chunks of the index, and per text its analyzed terms (question words left out)
    that the index holds, each with a word that analyzes to it and its idf; one
    document-frequency lookup for all."""
    stems: list[dict[str, str]] = []
    for text in texts:
        found: dict[str, str] = {}
        for word in _WORD.findall(text):
            for stem in tokenize(word):
                if stem not in QUESTION_WORDS:
                    found.setdefault(stem, word)
        stems.append(found)
    documents, df = doc_freqs(sorted({s for found in stems for s in found}))
    return documents, [
        [Term(s, w, idf(documents, df[s])) for s, w in found.items() if df.get(s, 0) > 0]
        for found in stems
    ]


def rarest_idf(documents: int) -> float:
    """The idf of a term only one chunk holds: the most a known term can weigh."""
    return idf(documents, 1)


def is_topic(term: Term, top: float, share: float) -> bool:
    return term.idf >= share * top


def standalone_reasons(
    question: str,
    terms: Sequence[Term],
    s: ConversationSettings,
    top: float,
    best_dense: float | None = None,
) -> list[str]:
    """Why `question` does not stand alone (empty: it does), of the tests switched on in
    `s.not_standalone`. `terms`: its known terms; `top`: the idf of the rarest known term;
    `best_dense`: its best dense cosine over the index (None: not measured, so `weak`
    cannot hold).

    >>> every = ConversationSettings(not_standalone=("weak", "deictic", "short", "no_topic"))
    >>> standalone_reasons("and without downtime?", [], every, 5.0, best_dense=0.3)
    ['weak', 'deictic', 'short', 'no_topic']
    >>> standalone_reasons("and it?", [], ConversationSettings(), 5.0, best_dense=0.9)
    []
    """
    said = words(question)
    lead = " ".join(said[:2])
    tests = {
        "weak": best_dense is not None and best_dense < s.strong_dense,
        "deictic": bool(PRONOUNS.intersection(said))
        or any(lead == o or lead.startswith(o + " ") for o in OPENERS),
        "short": len(said) < s.short_words,
        "no_topic": not any(is_topic(t, top, s.topic_idf) for t in terms),
    }
    return [name for name in tests if name in s.not_standalone and tests[name]]


def carried_terms(
    question: Sequence[Term],
    earlier: Sequence[Sequence[Term]],
    s: ConversationSettings,
    top: float,
    *,
    weak: bool,
) -> list[Term]:
    """The terms the BM25 leg gains: the topic terms of every earlier user turn (`earlier`,
    oldest first), and, when the question retrieves weakly, every known term of the last
    `s.subtopic_turns` of them; none the question already holds, rarest first, at most
    `s.topic_terms`."""
    own = {t.stem for t in question}
    recent = earlier[len(earlier) - s.subtopic_turns :] if s.subtopic_turns else []
    chosen: dict[str, Term] = {}
    for turn in earlier:
        for t in turn:
            if t.stem not in own and is_topic(t, top, s.topic_idf):
                chosen.setdefault(t.stem, t)
    if weak:
        for turn in recent:
            for t in turn:
                if t.stem not in own:
                    chosen.setdefault(t.stem, t)
    return sorted(chosen.values(), key=lambda t: -t.idf)[: s.topic_terms]


def condense_prompt(history: Sequence[ChatMessage], question: str) -> Prompt:
    """The LLM rewrite's prompt: the conversation, then the question to make standalone."""
    lines = [f"{'User' if m.role == 'user' else 'Assistant'}: {m.content}" for m in history]
    conversation = "\n".join(lines)
    return Prompt(CONDENSE_SYSTEM, f"Conversation:\n{conversation}\n\nLast question: {question}")


def parse_rewrite(reply: str) -> str:
    """The rewritten question: the reply's first non-empty line, a label and quotes removed.

    >>> parse_rewrite('Rewritten question: "How do I resize a volume without downtime?"')
    'How do I resize a volume without downtime?'
    """
    for line in reply.splitlines():
        line = re.sub(r"^\s*(?:rewritten|standalone)?\s*question\s*:\s*", "", line, flags=re.I)
        line = line.strip().strip("\"'`“”‘’").strip()
        if line:
            return " ".join(line.split())[:4000]
    return ""


def smuggled(rewrite: str, question: str, history: Sequence[ChatMessage]) -> list[str]:
    """The terms of `rewrite` that neither the question nor any earlier turn holds.

    >>> h = [ChatMessage(role="user", content="How do I resize a volume?")]
    >>> smuggled("How do I resize a volume without downtime?", "and without downtime?", h)
    []
    >>> smuggled("Can I resize an EBS volume on AWS?", "and on the cloud?", h)
    ['aw', 'eb']
    """
    said = set(question_terms(question))
    for message in history:
        said.update(tokenize(message.content))
    return [t for t in question_terms(rewrite) if t not in said]


class Rewriter:
    """Turns a conversation's question and bounded history into a `ChatPlan` under
    `query.conversation`; `llm`: the endpoint of the LLM rewrite (None: offline only)."""

    def __init__(self, settings: ConversationSettings, llm: Generator | None = None) -> None:
        self.settings, self.llm = settings, llm

    @classmethod
    def from_settings(cls, settings: Settings) -> Rewriter:
        s = settings.query.conversation
        llm = endpoint_generator(settings.generator) if s.rewrite in ("auto", "llm") else None
        return cls(s, llm)

    def offline(
        self,
        question: str,
        history: Bounded,
        doc_freqs: DocFreqs,
        best_bm25: Callable[[str], float],
        best_dense: Callable[[str], float],
    ) -> ChatPlan:
        """The offline plan: the question as asked when it stands alone (or there is no
        history, or rewriting is off), else the carried terms added to its BM25 leg.
        `best_bm25(text)` / `best_dense(text)`: the best BM25 score / dense cosine of `text`
        over the index (each read only when a test or the sub-topic terms need it)."""
        s = self.settings
        record = Conversation(
            history_messages=len(history.messages),
            dropped_messages=history.dropped,
            standalone=True,
        )
        users = [m.content for m in history.messages if m.role == "user"]
        if not users or s.rewrite == "none":
            return ChatPlan(question, question, question, record)
        documents, (own, *earlier) = known_terms([question, *users], doc_freqs)
        top = rarest_idf(documents)
        dense = best_dense(question) if "weak" in s.not_standalone else None
        reasons = standalone_reasons(question, own, s, top, dense)
        record.reasons, record.standalone = reasons, not reasons
        if not reasons:
            return ChatPlan(question, question, question, record)
        weak = bool(s.subtopic_turns) and best_bm25(question) < s.weak_bm25
        added = carried_terms(own, earlier, s, top, weak=weak)
        if not added:
            return ChatPlan(question, question, question, record)
        record.rewrite, record.added_terms = "offline", [t.word for t in added]
        effective = f"{question} {' '.join(record.added_terms)}"
        # the question's own words weigh `turn_weight` times in the BM25 leg
        sparse = " ".join([question] * (s.turn_weight - 1) + [effective])
        return ChatPlan(effective, effective if s.dense == "rewrite" else question, sparse, record)

    def wants_llm(self, plan: ChatPlan) -> bool:
        """Whether to ask the endpoint: there is one, some history, and the question does
        not stand alone."""
        record = plan.record
        return self.llm is not None and record.history_messages > 0 and not record.standalone

    def with_llm(
        self, plan: ChatPlan, question: str, history: Bounded, reply: str | None
    ) -> ChatPlan:
        """The LLM's rewrite as the plan of both legs, unless it failed (`reply` None or
        empty) or adds terms no earlier turn holds: then the offline `plan`, the rejected
        terms on its record."""
        rewrite = parse_rewrite(reply or "")
        if not rewrite:
            return plan
        extra = smuggled(rewrite, question, history.messages)
        if extra:
            record = plan.record.model_copy(update={"llm_rejected": extra})
            return ChatPlan(plan.question, plan.dense, plan.sparse, record)
        record = plan.record.model_copy(update={"rewrite": "llm", "added_terms": []})
        return ChatPlan(rewrite, rewrite, rewrite, record)

    def prompt(self, question: str, history: Bounded) -> Prompt:
        return condense_prompt(history.messages, question)


__all__ = [
    "Bounded",
    "ChatPlan",
    "Rewriter",
    "Term",
    "bounded",
    "carried_terms",
    "condense_prompt",
    "known_terms",
    "parse_rewrite",
    "smuggled",
    "standalone_reasons",
]
