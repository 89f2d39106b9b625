"""Answerability: do the retrieved chunks hold what the question is about?

The sufficiency gate asks whether anything relevant came back; text can be near a question
and still not answer it ("What is the capital of Mongolia?" retrieves "Liquidity and capital
resources"). The evidence signal here is *coverage*: the share of the question's informative
terms (the lexical analyzer's stemmed, stop-word-free tokens, weighted by their BM25 IDF in
this index) that one retrieved chunk contains. A term the index has never seen weighs most,
so a question about something absent from the documents scores low however close its
embedding lands. It also decides which of the sentences the answer judge read make the
extractive answer (`answering`): prose only, the lead and what adds to it. A question, or
its best chunk, in a language the trained answer judge does not read (`reading_language`)
is decided on coverage and an agreeing dense leg alone, and its sentences are read by
their coverage (`covering_evidence`). Pure functions
(`judge` records its verdict on a span); the engine supplies the chunks and the IDF
statistics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ragstream.connectors.lexical import tokenize
from ragstream.core.answers import Answerability, ChatMessage, ChunkView
from ragstream.core.language import ENGLISH, Language, detect, language_of
from ragstream.core.models import IndexedChunk, NonProse
from ragstream.core.settings import QuerySettings
from ragstream.core.telemetry import span
from ragstream.operators.answer_judge import passage
from ragstream.operators.chunk import BLOCK_SEPARATOR
from ragstream.query.decision import Decision
from ragstream.query.rerank import Reranked
from ragstream.query.verify import CITATION, quotable, sentence_spans

DocFreqs = Callable[[Sequence[str]], tuple[int, dict[str, int]]]

# How a question is asked, not what it is about: the index's stop words keep these (they
# are content in a document), but in a question they carry no topic, and in a small index
# a rare "does" would outweigh the subject.
QUESTION_WORDS = frozenset(
    tokenize(
        "what which who whom whose when where why how do does did doing done can could should "
        "would may might must shall i me my mine you your yours we us our please tell explain "
        "describe give list show find mean means meaning know about here get many much long "
        "often"
    )
)


def question_terms(question: str) -> list[str]:
    """The analyzed terms a question is about (sorted, distinct).

    >>> question_terms("What does the hybrid chunker do?")
    ['chunker', 'hybrid']
    >>> question_terms("扁豆汤是什么？")
    ['扁豆', '汤是', '豆汤']
    """
    return sorted(set(tokenize(question)) - QUESTION_WORDS - detect(question).question_terms)


# A proper name: a word of letters written with a capital and the rest in lower case
# (Switzerland, Docling, Tesseract), not a sentence's first word (its capital is grammar).
# Codes and acronyms (BRCA1, Sirt1, DBP) are left out: documents spell them out or use
# another form too often (held-out SciFact train claims: 1 in 10 gold chunks lacks them),
# and so is what a parenthesis restates ("VgrG (Tssl)": an alias of the word before it)
_WORDS = re.compile(r"[^\W_][\w'’-]*")


def named_terms(question: str) -> list[str]:
    """The analyzed terms of the proper names a question asks about (sorted, distinct):
    places, people, products. A question about a name the retrieved text never mentions is
    not answered by it, however close the rest of the words are.

    >>> named_terms("What currency is used in Switzerland?")
    ['switzerland']
    >>> named_terms("Why do I get PyTorch errors on an Intel Mac? Docling fails.")
    ['intel', 'mac']
    >>> named_terms("ALDH1 expression in Sirt1 mice (Mus Musculus) predicts prognosis.")
    []
    """
    names = []
    plain = re.sub(r"\([^()]*\)", " ", question)
    for sentence in re.split(r"(?<=[.!?])\s+", plain.strip()):
        for word in _WORDS.findall(sentence)[1:]:
            if len(word) > 1 and word[0].isupper() and word[1:].isalpha() and word[1:].islower():
                names.append(word)
    # only terms the question's own analysis has (word boundaries can differ at the edges)
    return sorted(set(tokenize(" ".join(names))) & set(question_terms(question)))


def missing_names(names: Sequence[str], said: Sequence[set[str]]) -> list[str]:
    """The names no chunk's analyzed terms (`chunk_terms`) contain."""
    return [t for t in names if not any(t in terms for terms in said)]


def unmentioned(question: str, chunks: Sequence[IndexedChunk | ChunkView]) -> list[str]:
    """The question's names (`named_terms`) that none of the chunks mentions (title, section
    path or text)."""
    return missing_names(named_terms(question), [chunk_terms(c) for c in chunks])


def idf(documents: int, containing: int) -> float:
    """BM25's IDF (as tantivy and rank-bm25 weigh terms), never negative.

    >>> round(idf(100, 0), 3), round(idf(100, 50), 3), idf(100, 100) < idf(100, 1)
    (5.308, 0.693, True)
    """
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


def chunk_terms(chunk: IndexedChunk | ChunkView) -> set[str]:
    """What a chunk says, in analyzed terms: its title, section path and text."""
    return set(tokenize(" ".join((chunk.title, *chunk.section_path, chunk.text))))


def coverage(weights: Mapping[str, float], terms: set[str]) -> float:
    """The IDF-weighted share of the question's terms found in `terms` (1.0 if the question
    has no informative term at all: nothing to miss).

    >>> coverage({"capit": 1.0, "mongolia": 7.0}, {"capit", "liquid"})
    0.125
    """
    total = sum(weights.values())
    if total <= 0.0:
        return 1.0
    return sum(w for t, w in weights.items() if t in terms) / total


# The kind of answer a question asks for, and what a span of that kind looks like: a
# "how many" question is not answered by a sentence without a number in it.
_ANSWER_TYPES = (
    (
        re.compile(
            r"^\W*(?:how (?:many|much|long|often|old|far|big|large|tall|high|fast)|what "
            r"(?:percentage|proportion|fraction|share|number|amount))\b",
            re.I,
        ),
        re.compile(
            r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
            r"dozens?|hundreds?|thousands?|millions?|billions?|percent|half|twice|once|several|"
            r"few|many|all|none|no)\b",
            re.I,
        ),
    ),
    (
        re.compile(r"^\W*(?:when|what (?:year|date|time|day|month|century))\b", re.I),
        re.compile(
            r"\b(?:1[0-9]\d\d|20\d\d|\d{1,2}:\d\d|january|february|march|april|may|june|"
            r"july|august|september|october|november|december|monday|tuesday|wednesday|"
            r"thursday|friday|saturday|sunday|century|decade|years?|months?|weeks?|days?|"
            r"hours?|minutes?|seconds?|before|after|during|until|since|when|once)\b",
            re.I,
        ),
    ),
    (
        re.compile(r"^\W*(?:who|whom|whose)\b", re.I),
        re.compile(
            r"\b[A-Z][\w.-]+(?:\s+[A-Z][\w.-]+)+|\b(?:he|she|they|people|users?|team|company|"
            r"authors?|developers?|researchers?|members?|group)\b"
        ),
    ),
)


def answer_type_match(question: str, sentences: Sequence[str]) -> float:
    """1.0 when the question asks for no particular kind of answer, or one of `sentences`
    has a span of that kind (a number for "how many", a date for "when", a name for
    "who"); else 0.0.

    >>> answer_type_match("How many moons does Mars have?", ["Mars is red."])
    0.0
    >>> answer_type_match("How many moons does Mars have?", ["Mars has two moons."])
    1.0
    >>> answer_type_match("What does the chunker do?", ["Anything."])
    1.0
    """
    for asks, looks_like in _ANSWER_TYPES:
        if asks.search(question):
            return float(any(looks_like.search(s) for s in sentences))
    return 1.0


class AnswerScorer(Protocol):
    """The trained answer judge's interface (operators/answer_judge.py)."""

    def holds(self, pairs: Sequence[tuple[str, str]]) -> Any: ...


# How the sentences the judge read are ordered for the answer: the judge's log-probability,
# less RANK_WEIGHT per place the sentence's chunk stands below the best-ranked one, plus
# COVERAGE_WEIGHT x the sentence's IDF-weighted coverage of the question's terms. Chosen on
# the questions of the held-out train articles: the first sentence holds a gold answer for
# 60 % of them by the judge alone, 72 % this way (docs/answers.md, "The extractive answer")
# the signal (1.0) of a question read in a language the trained models do not read
OTHER_LANGUAGE = "other_language"
RANK_WEIGHT = 0.3
COVERAGE_WEIGHT = 3.0
# a table row may answer when it holds this share of the question's IDF-weighted terms: the
# row names what the question asks about ("what does the Pro plan cost?" → "Pro | 20 EUR")
TABLE_ROW_COVERAGE = 0.5


@dataclass(frozen=True)
class Evidence:
    """One sentence the answer judge read: which chunk, where in its text, how surely it
    holds the answer (P), its place in the answer (`order`, higher first), and the
    IDF-weighted share of the question's terms it contains (`covered`)."""

    chunk: int  # index into the chunks judged
    start: int
    end: int
    answers: float  # P(the sentence holds the answer to the question)
    order: float = 0.0
    covered: float = 1.0


def evidence_order(answers: float, chunk: int, covered: float) -> float:
    """A read sentence's place in the answer (see `RANK_WEIGHT`): surer, higher-ranked and
    more on the question's terms come first.

    >>> evidence_order(0.5, 0, 1.0) > evidence_order(0.5, 1, 1.0) > evidence_order(0.5, 1, 0.5)
    True
    """
    return math.log(answers + 1e-4) - RANK_WEIGHT * chunk + COVERAGE_WEIGHT * covered


def non_prose(chunk: IndexedChunk) -> tuple[NonProse, ...]:
    """The spans of the chunk's text that are no prose (headings and titles, captions,
    table rows, lone links), as docling labelled them at parse time. A chunk indexed before
    they were recorded has its heading found from its `section_path`: a chunk opens with
    the heading of its section, if with any.

    >>> old = IndexedChunk.model_construct(
    ...     text="Why not" + BLOCK_SEPARATOR + "It waits.", section_path=("Why not",), non_prose=()
    ... )
    >>> non_prose(old)
    ((0, 7, 'heading'),)
    """
    if chunk.non_prose:
        return chunk.non_prose
    heading = chunk.section_path[-1] if chunk.section_path else ""
    if heading and (chunk.text == heading or chunk.text.startswith(heading + BLOCK_SEPARATOR)):
        return ((0, len(heading), "heading"),)
    return ()


def prose_sentences(
    chunk: IndexedChunk, weights: Mapping[str, float] | None = None
) -> list[tuple[int, int]]:
    """(start, end) of the chunk's sentences that may answer: none inside a heading, title,
    caption or lone link (a table-of-contents entry); a table row only when it holds at
    least `TABLE_ROW_COVERAGE` of the question's IDF-weighted terms (`weights`; None:
    never), as a row does that holds what the question names."""
    spans = non_prose(chunk)
    out = []
    for a, b in sentence_spans(chunk.text):
        kinds = {kind for s, e, kind in spans if a < e and s < b}
        row = kinds == {"table_row"} and weights is not None
        if not kinds or (
            row and coverage(weights or {}, set(tokenize(chunk.text[a:b]))) >= TABLE_ROW_COVERAGE
        ):
            out.append((a, b))
    return out


def candidate_sentences(
    weights: Mapping[str, float],
    chunks: Sequence[IndexedChunk],
    limit: int,
    prose_only: bool = True,
) -> list[tuple[int, int, int]]:
    """(chunk index, start, end) of the sentences most likely to hold the answer, at most
    `limit`: each chunk's sentences by IDF-weighted coverage of the question's terms, the
    best sentence of every chunk first (in chunk order), then the rest by coverage. With
    `prose_only`, only sentences of prose (`prose_sentences`): a heading is no answer.

    A cross-encoder is too slow to read every sentence of k chunks within the latency
    budget; the sentence that answers a question nearly always shares its rarest terms.
    """
    firsts: list[tuple[int, int, int]] = []
    rest: list[tuple[float, int, int, int, int]] = []
    for i, chunk in enumerate(chunks):
        spans = prose_sentences(chunk, weights) if prose_only else sentence_spans(chunk.text)
        scored = sorted(
            (
                (-coverage(weights, set(tokenize(chunk.text[a:b]))), n, a, b)
                for n, (a, b) in enumerate(spans)
                if b - a >= 12
            ),
        )
        if scored:
            firsts.append((i, scored[0][2], scored[0][3]))
            rest.extend((cov, i, n, a, b) for cov, n, a, b in scored[1:])
    rest.sort()
    return (firsts + [(i, a, b) for _, i, _, a, b in rest])[:limit]


def read_evidence(
    question: str,
    chunks: Sequence[IndexedChunk],
    weights: Mapping[str, float],
    scorer: AnswerScorer,
    limit: int,
    prose_only: bool = True,
) -> list[Evidence]:
    """The answer judge's reading of the best candidate sentences (each read with its
    document's title: `operators.answer_judge.passage`), in answer order (`evidence_order`)."""
    spots = candidate_sentences(weights, chunks, limit, prose_only)
    if not spots:
        return []
    read = scorer.holds(
        [(question, passage(chunks[i].title, chunks[i].text[a:b])) for i, a, b in spots]
    )
    return _in_answer_order(chunks, weights, spots, [float(p) for p in read])


def _in_answer_order(
    chunks: Sequence[IndexedChunk],
    weights: Mapping[str, float],
    spots: Sequence[tuple[int, int, int]],
    answers: Sequence[float] | None,
) -> list[Evidence]:
    """The sentences `spots` as evidence in answer order (`evidence_order`), each read as
    holding the answer with its P in `answers` (None: with its coverage of the question)."""
    found = []
    for n, (i, a, b) in enumerate(spots):
        covered = coverage(weights, set(tokenize(chunks[i].text[a:b])))
        p = covered if answers is None else answers[n]
        found.append(Evidence(i, a, b, p, evidence_order(p, i, covered), covered))
    return sorted(found, key=lambda e: -e.order)


@dataclass(frozen=True)
class Limits:
    """The answerability thresholds (`query.answerable.*` settings; see `judge` for how each
    is used).

    >>> q = QuerySettings(answerable={"judge_floor": 0.7, "judge_sentences": 8})
    >>> Limits.from_settings(q).sentences
    8
    """

    floor: float = 0.0  # coverage the best chunk needs (`answerable.floor`)
    dense_floor: float = 1.0  # or this best dense cosine (`answerable.dense`)
    judge_floor: float = 0.5  # the floor rule: the answer judge's P a sentence needs
    judge_dense: float = 1.01  # the floor rule: or this best dense cosine
    sentences: int = 16  # sentences the answer judge reads (`answerable.judge_sentences`)
    decision_floor: float | None = None  # the calibrated decision's floor (None: fitted)
    prose_only: bool = True  # headings, captions, code never read (`answerable.prose_only`)
    other_coverage: float = 0.3  # another language: coverage the best chunk needs
    other_dense: float = 0.68  # another language: or this best cosine, both legs agreeing

    @classmethod
    def from_settings(cls, q: QuerySettings) -> Limits:
        a = q.answerable
        return cls(
            floor=a.floor,
            dense_floor=a.dense,
            judge_floor=a.judge_floor,
            judge_dense=a.judge_dense,
            sentences=a.judge_sentences,
            decision_floor=a.decision_floor,
            prose_only=a.prose_only,
            other_coverage=a.other_language_coverage,
            other_dense=a.other_language_dense,
        )


@dataclass(frozen=True)
class Asked:
    """What `judge` reads: the question, the chunks retrieved for it, the index's document
    frequencies, the best dense cosine among the chunks, and `extra` signals recorded with
    the others (the engine's leg agreement, top margin and leg leads)."""

    question: str
    chunks: Sequence[IndexedChunk]
    doc_freqs: DocFreqs
    dense_best: float = 0.0
    extra: Mapping[str, float] = field(default_factory=dict)
    language: Language = ENGLISH  # what it is read in (`reading_language`)


def reading_language(
    question: str, chunks: Sequence[IndexedChunk], sources: Mapping[str, str] | None = None
) -> Language:
    """The language the answer path reads a question in: the question's own when the
    trained models do not read it, else the best chunk's when they do not read that one
    (an English question over Chinese text), else English. A chunk's language is its
    source's (`sources`: name -> ISO 639-1 code, `SourceConfig.language`), else detected.

    >>> chunk = IndexedChunk.model_construct(text="扁豆汤是一道用扁豆做的汤。")
    >>> reading_language("What is 扁豆汤?", [chunk]).code
    'zh'
    >>> reading_language("扁豆汤是什么?", []).code
    'zh'
    """
    asked = detect(question)
    if not asked.trained_models or not chunks:
        return asked
    best = language_of((sources or {}).get(chunks[0].source), chunks[0].text)
    return asked if best.trained_models else best


def judge(
    asked: Asked,
    limits: Limits = Limits(),
    scorer: AnswerScorer | None = None,
    decision: Decision | None = None,
) -> tuple[Answerability, list[Evidence]]:
    """Decide whether the chunks answer the question, and say why.

    Coverage rule: the best chunk covers at least `limits.floor` of the question's
    IDF-weighted terms, or its dense cosine reaches `limits.dense_floor` (a question asked
    in other words than the documents use can still match them closely in meaning). With
    the trained answer judge (`scorer`) it also reads the best candidate sentences against
    the question (`judge_best`: how surely the best one holds the answer; `judge_second`:
    the next). Floor rule (no `decision`): one of them must reach `limits.judge_floor`,
    unless the best dense cosine reaches `limits.judge_dense`; the coverage rule must hold
    as well, and the score is the judge's reading.

    With a fitted `decision` (query/decision.py) the signals it reads are combined into
    one calibrated probability instead: the score is that probability, and the question is
    answerable when it reaches `limits.decision_floor` (None: the floor fitted with it) or
    an override of the decision's holds. Returns the verdict and the sentences read, the
    one most surely holding the answer first. The verdict and its signals are recorded on
    a `query.answerable` span.
    """
    with span("query.answerable", floor=limits.floor, chunks=len(asked.chunks)) as sp:
        verdict, evidence = _judged(asked, limits, scorer, decision)
        sp.set_attribute("score", verdict.score)
        sp.set_attribute("answerable", verdict.answerable)
        if decision is not None:  # whose cosines the decision was fitted on
            sp.set_attribute("decision_embedder", decision.embedder)
        for name, value in verdict.signals.items():
            sp.set_attribute(f"signal.{name}", value)
    return verdict, evidence


@dataclass(frozen=True)
class AnswerRule:
    """Which sentences the answer judge read make the extractive answer (`answering`):
    `query.answerable.sentence_floor`, `follow_ratio` and `alone_floor`."""

    floor: float = 0.01  # P any answer sentence needs
    follow: float = 0.0  # P a sentence after the lead needs, as a share of the lead's P
    alone: float = 0.0  # P a sentence from another document than the lead's needs

    @classmethod
    def from_settings(cls, q: QuerySettings) -> AnswerRule:
        a = q.answerable
        return cls(floor=a.sentence_floor, follow=a.follow_ratio, alone=a.alone_floor)


def answering(
    chunks: Sequence[IndexedChunk],
    evidence: Sequence[Evidence],
    rule: AnswerRule,
    turn: Collection[str] = (),
    given: Collection[str] = (),
) -> list[str]:
    """The sentences of the evidence (in answer order) that make the extractive answer,
    lead first; empty when there is none.

    The lead is the first sentence read as holding the answer with P >= `rule.floor` that
    an answer may copy (`quotable`: no command to the assistant), and there is none when
    that one shares no term of the question (a page footer read against
    "What is the currency of Japan?"). `turn`: the terms a rewritten follow-up adds to its
    conversation (`new_terms`); where there are any, the first sentence that shares one
    leads, and none sharing one means no answer (the carried topic terms are in every
    sentence about the topic). `given`: the sentences earlier answers of the conversation
    gave (`said_key`); one of them never follows, and leads only when no other could.
    A sentence follows the lead only when it adds to the answer (`_follows`); a lead that
    ends in a colon is followed by the sentence it introduces.

    >>> chunk = IndexedChunk.model_construct(text="Ducks swim in ponds. Yen is Japan's currency.",
    ...     doc_id="d", non_prose=(), section_path=())
    >>> duck, yen = Evidence(0, 0, 20, 0.6, covered=0.0), Evidence(0, 21, 45, 0.5)
    >>> answering([chunk], [duck, yen], AnswerRule())
    []
    >>> rule = AnswerRule()
    >>> answering([chunk], [yen, duck], rule), answering([chunk], [yen], rule, ["mayor"])
    (["Yen is Japan's currency.", 'Ducks swim in ponds.'], [])
    >>> answering([chunk], [yen, Evidence(0, 0, 20, answers=0.1)], AnswerRule(follow=0.5))
    ["Yen is Japan's currency."]
    >>> answering([chunk], [yen, Evidence(0, 0, 20, 0.5)], AnswerRule(), ["swim"])
    ['Ducks swim in ponds.', "Yen is Japan's currency."]
    >>> answering([chunk], [yen, duck], AnswerRule(), given=[said_key("Yen is Japan's currency")])
    ['Ducks swim in ponds.']
    """
    held = [e for e in evidence if e.answers >= rule.floor and quotable(_text(chunks, e))]
    if not held or held[0].covered <= 0.0:
        return []
    words = {id(e): set(tokenize(_text(chunks, e))) for e in held} if turn else {}
    may_lead = [e for e in held if not turn or set(turn) & words[id(e)]]
    if not may_lead:
        return []
    fresh = [e for e in held if said_key(_text(chunks, e)) not in given]
    lead = next((e for e in may_lead if e in fresh), may_lead[0])
    said = [_text(chunks, e) for e in fresh if e is not lead and _follows(chunks, e, lead, rule)]
    introduced = _introduced(chunks[lead.chunk], lead)
    if introduced and introduced not in said:
        said.insert(0, introduced)
    return [_text(chunks, lead), *said]


def _follows(chunks: Sequence[IndexedChunk], e: Evidence, lead: Evidence, rule: AnswerRule) -> bool:
    """Whether `e` adds to an answer `lead` leads: read as answering too (`rule.follow` of
    the lead's P), and on its own when from another document (`rule.alone`)."""
    same = chunks[e.chunk].doc_id == chunks[lead.chunk].doc_id
    return e.answers >= rule.follow * lead.answers and (same or e.answers >= rule.alone)


def _text(chunks: Sequence[IndexedChunk], e: Evidence) -> str:
    return chunks[e.chunk].text[e.start : e.end]


def _introduced(chunk: IndexedChunk, lead: Evidence) -> str:
    """The sentence of prose right after `lead` in its chunk when the lead ends in a colon
    (it introduces what follows), else ""."""
    if not chunk.text[lead.start : lead.end].rstrip().endswith(":"):
        return ""
    after = [(a, b) for a, b in prose_sentences(chunk) if a >= lead.end]
    return chunk.text[after[0][0] : after[0][1]] if after else ""


def said_key(text: str) -> str:
    """A sentence as compared with what earlier answers said: citation markers, case,
    spacing and end punctuation left out.

    >>> said_key("It buried Pompeii [S2, S3].") == said_key("it buried  Pompeii")
    True
    """
    bare = CITATION.sub("", text)
    return " ".join(bare.split()).rstrip(".!?:;, ").casefold()


def said_before(messages: Sequence[ChatMessage], question: str = "") -> frozenset[str]:
    """The sentences the assistant turns of `messages` gave (`said_key`); none when
    `question` repeats an earlier user turn word for word (it asks for the same again).

    >>> sorted(said_before([ChatMessage(role="user", content="Why?"),
    ...     ChatMessage(role="assistant", content="Rain fell [S1]. It was cold [S2].")]))
    ['it was cold', 'rain fell']
    >>> said_before([ChatMessage(role="user", content="Why?"),
    ...     ChatMessage(role="assistant", content="Rain fell [S1].")], "why")
    frozenset()
    """
    if question and said_key(question) in {
        said_key(m.content) for m in messages if m.role == "user"
    }:
        return frozenset()
    return frozenset(
        said_key(m.content[a:b])
        for m in messages
        if m.role == "assistant"
        for a, b in sentence_spans(m.content)
    )


def said_as(terms: Collection[str], text: str) -> list[str]:
    """The words of `text` that analyze to one of `terms`, as written (distinct, in order).

    >>> said_as(["dollar", "cost"], "What did it cost in dollars?")
    ['cost', 'dollars']
    """
    wanted = set(terms)
    words = (w for w in _WORDS.findall(text) if wanted & set(tokenize(w)))
    return list(dict.fromkeys(words))


# words a chat turn uses about itself, not its subject ("so", "I meant", "do you think",
# "as well"): the analyzer keeps them, and no answer needs to hold them
CHAT_WORDS = frozenset(
    tokenize(
        "its it's has have had having is are was were be been being so well also just really "
        "maybe perhaps think thought meant mean want wanted need needed like okay ok yes no "
        "thanks thank sure actually therefore then than very more most other others same some "
        "any all each every still even only too again already dont don't aren't isn't can't "
        "won't doesn't didn't im i'm let lets let's know say said see else tell"
    )
)


def new_terms(turn: str, history: Sequence[str]) -> list[str]:
    """The terms a follow-up adds to its conversation: `question_terms` of `turn` that no
    earlier message (`history`: the user's and the assistant's) holds, less `CHAT_WORDS`.

    >>> new_terms("So what did it cost?", ["It erupted in AD 79."])
    ['cost']
    >>> new_terms("And did it erupt as well?", ["It erupted in AD 79."])
    []
    """
    said = {t for message in history for t in tokenize(message)} | CHAT_WORDS
    return [t for t in question_terms(turn) if t not in said]


def unmentioned_in(
    names: Sequence[str],
    cited: Sequence[ChunkView],
    documents: Callable[[str], Sequence[IndexedChunk]],
) -> list[str]:
    """The `names` the cited chunks' documents never mention: a name missing from the
    `cited` chunks is looked up in all the chunks of their documents (`documents(doc_id)`:
    a title, another section) before it counts as missing."""
    missing = missing_names(names, [chunk_terms(c) for c in cited])
    if missing:
        docs = [c for d in dict.fromkeys(s.doc_id for s in cited) for c in documents(d)]
        missing = missing_names(names, [chunk_terms(c) for c in docs])
    return missing


def _judged(
    asked: Asked, limits: Limits, scorer: AnswerScorer | None, decision: Decision | None
) -> tuple[Answerability, list[Evidence]]:
    """`judge`'s verdict and the sentences read."""
    weights, unseen = _term_weights(asked)
    said = [chunk_terms(c) for c in asked.chunks]
    signals, best = _coverage_signals(asked, weights, said, unseen)
    score, used_floor, decided_by = best, limits.floor, "coverage"
    evidence: list[Evidence] = []
    if not asked.language.trained_models:  # the judge and the decision read English only
        signals[OTHER_LANGUAGE] = 1.0
        evidence = covering_evidence(asked.chunks, weights, limits.sentences, limits.prose_only)
        scorer, used_floor, decided_by = None, limits.other_coverage, "other_language"
    if scorer is not None:
        evidence = read_evidence(
            asked.question, asked.chunks, weights, scorer, limits.sentences, limits.prose_only
        )
        signals.update(_judge_signals(asked, evidence))
        if decision is not None:
            own = decision.reading(signals)
            used_floor = own.floor if limits.decision_floor is None else limits.decision_floor
            score, decided_by = own.probability(signals), "decision"
        else:
            score, used_floor, decided_by = signals["judge_best"], limits.judge_floor, "judge"
    answerable = answers_from(signals, limits, decision, judged=scorer is not None)
    verdict = Answerability(
        score=round(score, 4),
        answerable=answerable,
        floor=used_floor,
        signals=signals,
        judge=str(getattr(scorer, "version", "")) if scorer is not None else "",
        decided_by=decided_by,
        language=asked.language.code,
    )
    return verdict, evidence


def covering_evidence(
    chunks: Sequence[IndexedChunk],
    weights: Mapping[str, float],
    limit: int,
    prose_only: bool = True,
) -> list[Evidence]:
    """The best candidate sentences read by how much of the question's IDF-weighted terms
    each covers, in answer order: the answer judge's reading where it cannot read the
    language (an `Evidence`'s `answers` is then that coverage)."""
    spots = candidate_sentences(weights, chunks, limit, prose_only)
    return _in_answer_order(chunks, weights, spots, None)


def answers_from(
    signals: Mapping[str, float],
    limits: Limits,
    decision: Decision | None,
    *,
    judged: bool = True,
) -> bool:
    """The answerability verdict from recorded signals: the coverage rule (the best chunk
    covers `limits.floor` of the question's terms, or its dense cosine reaches
    `limits.dense_floor`); then, when the answer judge read the chunks (`judged`), the
    calibrated `decision` at its floor (or `limits.decision_floor`), or without one the floor
    rule (the judge's best reading reaches `limits.judge_floor`, or the best cosine
    `limits.judge_dense`); and never a question no term of which the documents hold with
    nothing close in meaning. What the engine decides, so that a replay of recorded signals
    decides the same.

    >>> s = {"coverage_best": 0.8, "dense_best": 0.6, "judge_best": 0.7,
    ...      "question_terms": 2.0, "unseen_term_share": 0.0}
    >>> answers_from(s, Limits(), None), answers_from({**s, "judge_best": 0.2}, Limits(), None)
    (True, False)
    """
    dense = signals.get("dense_best", 0.0)
    covered = signals.get("coverage_best", 0.0) >= limits.floor or dense >= limits.dense_floor
    if signals.get(OTHER_LANGUAGE):  # read in a language the trained models do not read
        # the cosine counts only where the dense leg reads the language as well: where it
        # puts the top chunk in its own top 3 as the lexical leg does (`legs_agree`); an
        # English embedder's cosines over CJK text run high on anything
        agreed = signals.get("legs_agree", 0.0) > 0
        read = signals.get("coverage_best", 0.0) >= limits.other_coverage or (
            agreed and dense >= limits.other_dense
        )
    elif not judged:
        read = True
    elif decision is not None:  # its own floor (or its conversation member's) unless set
        read = decision.answers(signals, limits.decision_floor)
    else:
        read = signals.get("judge_best", 0.0) >= limits.judge_floor or dense >= limits.judge_dense
    return covered and read and not _unknown(signals, limits)


def _unknown(signals: Mapping[str, float], limits: Limits) -> bool:
    """No term of the question occurs in the documents (or it has none the analyzer reads)
    and nothing is close in meaning: it is about something else, or in another language or
    script."""
    unknown = not signals.get("question_terms", 0.0) or signals.get("unseen_term_share", 0.0) >= 1
    return unknown and signals.get("dense_best", 0.0) < limits.dense_floor


def _term_weights(asked: Asked) -> tuple[dict[str, float], float]:
    """The question's terms with their IDF weights, and the weighted share of them the
    index has never seen."""
    terms = question_terms(asked.question)
    documents, df = asked.doc_freqs(terms)
    weights = {t: idf(documents, df.get(t, 0)) for t in terms}
    total = sum(weights.values())
    unseen = sum(w for t, w in weights.items() if df.get(t, 0) == 0) / total if total else 0.0
    return weights, unseen


def _coverage_signals(
    asked: Asked, weights: Mapping[str, float], said: Sequence[set[str]], unseen: float
) -> tuple[dict[str, float], float]:
    """The index's signals (coverage, names, dense cosine, unseen terms, `extra`) and the
    best chunk's coverage, unrounded."""
    per_chunk = [coverage(weights, terms) for terms in said]
    best = max(per_chunk, default=0.0)
    names = named_terms(asked.question)
    named = 1.0 - len(missing_names(names, said)) / len(names) if names else 1.0
    signals = {
        "named_coverage": round(named, 4),
        "coverage_best": round(best, 4),
        "dense_best": round(asked.dense_best, 4),
        "coverage_union": round(coverage(weights, set().union(*said)), 4),
        "unseen_term_share": round(unseen, 4),
        "question_terms": float(len(weights)),
        **asked.extra,
    }
    return signals, best


def _judge_signals(asked: Asked, evidence: Sequence[Evidence]) -> dict[str, float]:
    """The answer judge's signals: how surely the best and second sentence hold the answer,
    the best of the top chunk's, how many it read, and whether the best three look like
    the kind of answer asked for."""
    chunks = asked.chunks
    surest = [*sorted((e.answers for e in evidence), reverse=True), 0.0, 0.0]
    best_read = [chunks[e.chunk].text[e.start : e.end] for e in evidence[:3]]
    return {
        "judge_best": round(surest[0], 4),
        "judge_second": round(surest[1], 4),
        "judge_top": round(max((e.answers for e in evidence if e.chunk == 0), default=0.0), 4),
        "judge_sentences": float(len(evidence)),
        "answer_type_match": answer_type_match(asked.question, best_read),
    }


def ranking_signals(ranked: Sequence[Reranked]) -> dict[str, float]:
    """How decided the ranking is: do both retrieval legs put the top chunk in their own
    top 3 (`legs_agree`), and by how much does it lead the second (`top_margin`, relative)."""
    if not ranked:
        return {}
    ranks = ranked[0].candidate.ranks
    agree = all(ranks.get(leg, 10**6) <= 3 for leg in ("dense", "lexical"))
    first = ranked[0].score
    second = ranked[1].score if len(ranked) > 1 else 0.0
    margin = (first - second) / abs(first) if first else 0.0
    return {"legs_agree": float(agree), "top_margin": round(margin, 4)}
