"""Training pairs for the answer judge, from the train articles of a SQuAD 2.0-format file.

The answer judge reads (question, passage sentence) and says whether the sentence holds
the answer. Every pair's passage side is written as the query path writes it
(`operators.answer_judge.passage`: the document title, then the sentence). From each question of the
judge's articles:

- positives: the sentence that contains an answer span (a span across a sentence break
  gives the sentences it spans, joined);
- `same_paragraph`: the other sentences of its paragraph that hold none of its answers;
- `other_paragraph`: the sentences of other paragraphs of the same article that share most
  words with the question and hold none of its answers (a passage on the right page
  without the answer: how retrieval fails in practice);
- `unanswerable`: the sentences of the paragraph of a question written to look answerable
  from it, which does not answer it (the hard case);
- `other_article`: the sentence of another article that shares most words with the
  question (the same words about another subject: what an index of other documents
  returns for a question it cannot answer).

Articles are split by `eval.squad.holds_out`: the judge fits on the rest, and the
held-out articles' pairs decide early stopping and the figures (the answerability
decision is fitted on the same held-out articles). The test split is never read.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragstream.eval.squad import SquadQuestion, contains_answer, holds_out, load_squad
from ragstream.operators.answer_judge import passage
from ragstream.query.verify import content_tokens, sentence_spans

NOT_ANSWER, ANSWER = 0, 1
LABELS = ("no_answer", "answer")
SAME_PARAGRAPH = 3  # negatives per answerable question from its own paragraph (closest first)
OTHER_PARAGRAPH = 2  # from other paragraphs of its article (closest first)
UNANSWERABLE = 3  # sentences of an unanswerable question's paragraph (closest first)
OTHER_ARTICLE = 1  # from the other articles of its side of the split (closest first)


@dataclass(frozen=True)
class AnswerPair:
    question: str
    passage: str
    label: int
    article: str
    kind: str


def sentences_of(text: str) -> list[tuple[int, int]]:
    return [(a, b) for a, b in sentence_spans(text) if b - a >= 12]


def answer_sentences(text: str, q: SquadQuestion) -> list[str]:
    """The sentence (or joined sentences) each gold span lies in, distinct."""
    spans = sentences_of(text)
    out: list[str] = []
    for answer, start in zip(q.answers, q.starts, strict=False):
        end = start + len(answer)
        touched = [(a, b) for a, b in spans if a < end and start < b]
        if touched:
            out.append(text[touched[0][0] : touched[-1][1]])
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=65536)
def _tokens(text: str) -> frozenset[str]:
    return frozenset(content_tokens(text))


def _closest(question: str, sentences: Sequence[str], n: int) -> list[str]:
    asked = _tokens(question)
    ranked = sorted(range(len(sentences)), key=lambda j: (-len(asked & _tokens(sentences[j])), j))
    return [sentences[j] for j in ranked[:n]]


def question_pairs(
    q: SquadQuestion, paragraphs: dict[str, dict[str, str]], article_paragraphs: list[str]
) -> list[AnswerPair]:
    """Every pair one question yields (see the module docstring)."""
    para = paragraphs[q.paragraph]
    title, text = para["title"], para["text"]
    own = [text[a:b] for a, b in sentences_of(text)]

    def pair(sentence: str, label: int, kind: str, where: str = title) -> AnswerPair:
        return AnswerPair(q.text, passage(where, sentence), label, q.article, kind)

    if not q.answerable:
        return [pair(s, NOT_ANSWER, "unanswerable") for s in _closest(q.text, own, UNANSWERABLE)]
    gold = answer_sentences(text, q)
    pairs = [pair(s, ANSWER, "answer") for s in gold]
    others = [s for s in own if s not in gold and not contains_answer(s, q.answers)]
    pairs += [
        pair(s, NOT_ANSWER, "same_paragraph") for s in _closest(q.text, others, SAME_PARAGRAPH)
    ]
    elsewhere = [
        s
        for pid in article_paragraphs
        if pid != q.paragraph
        for a, b in sentences_of(paragraphs[pid]["text"])
        if not contains_answer(s := paragraphs[pid]["text"][a:b], q.answers)
    ]
    pairs += [
        pair(s, NOT_ANSWER, "other_paragraph") for s in _closest(q.text, elsewhere, OTHER_PARAGRAPH)
    ]
    return pairs


def build_pairs(squad_path: Path, seed: int) -> tuple[list[AnswerPair], list[AnswerPair]]:
    """(fit pairs, held-out pairs) from the `train` split's articles, shuffled with
    `seed`; the same file and seed give the same lists."""
    data = load_squad(squad_path, "train")
    by_article: dict[str, list[str]] = {}
    for pid in data.corpus:
        by_article.setdefault(pid.rsplit("-p", 1)[0], []).append(pid)
    fit: list[AnswerPair] = []
    held: list[AnswerPair] = []
    sentences = {
        article: [
            passage(data.corpus[pid]["title"], data.corpus[pid]["text"][a:b])
            for pid in pids
            for a, b in sentences_of(data.corpus[pid]["text"])
        ]
        for article, pids in by_article.items()
    }
    for q in data.questions:
        article = q.paragraph.rsplit("-p", 1)[0]
        side = holds_out(q.article)
        pairs = question_pairs(q, data.corpus, by_article[article])
        # the same words about another subject: the closest sentences of the other articles
        # on the question's side of the split (held-out pairs never read a fit article)
        elsewhere = [
            s
            for other, said in sentences.items()
            if other != article and holds_out(other) == side
            for s in said
        ]
        pairs += [
            AnswerPair(q.text, s, NOT_ANSWER, q.article, "other_article")
            for s in _closest(q.text, elsewhere, OTHER_ARTICLE)
        ]
        (held if side else fit).extend(pairs)
    random.Random(seed).shuffle(fit)
    return fit, held
