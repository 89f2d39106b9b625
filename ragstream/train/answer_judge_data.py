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
  returns for a question it cannot answer);
- `gold_removed`: what the engine reads when the answering paragraph is not indexed: the
  article's other paragraphs ranked as the dense leg ranks them (the engine's embedder,
  question against paragraph), and from each of the best the sentence the query path
  hands the judge first (most question words), when it holds none of the answers.

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

import numpy as np

from ragstream.eval.squad import SquadQuestion, contains_answer, holds_out, load_squad
from ragstream.operators.answer_judge import passage
from ragstream.operators.embed import Embedder
from ragstream.query.verify import content_tokens, sentence_spans

NOT_ANSWER, ANSWER = 0, 1
LABELS = ("no_answer", "answer")
SAME_PARAGRAPH = 3  # negatives per answerable question from its own paragraph (closest first)
OTHER_PARAGRAPH = 2  # from other paragraphs of its article (closest first)
UNANSWERABLE = 3  # sentences of an unanswerable question's paragraph (closest first)
OTHER_ARTICLE = 1  # from the other articles of its side of the split (closest first)
GOLD_REMOVED = 2  # the best other paragraphs by dense cosine, one sentence from each

# The dense ranking `gold_removed` reads: question ids -> the article's paragraph ids, best
# first (the engine's embedder; `dense_rankings`).
DenseRanking = dict[str, list[str]]


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
    q: SquadQuestion,
    paragraphs: dict[str, dict[str, str]],
    article_paragraphs: list[str],
    dense_ranked: Sequence[str] = (),
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
    return pairs + gold_removed_pairs(q, paragraphs, dense_ranked, {p.passage for p in pairs})


def gold_removed_pairs(
    q: SquadQuestion,
    paragraphs: dict[str, dict[str, str]],
    dense_ranked: Sequence[str],
    taken: set[str],
) -> list[AnswerPair]:
    """`gold_removed` negatives: the first-read sentence of each of the best
    `GOLD_REMOVED` other paragraphs in `dense_ranked` whose sentence holds no answer and is
    not `taken` already."""
    out: list[AnswerPair] = []
    for pid in dense_ranked:
        if len(out) == GOLD_REMOVED:
            break
        if pid == q.paragraph:
            continue
        para = paragraphs[pid]
        own = [para["text"][a:b] for a, b in sentences_of(para["text"])]
        best = _closest(q.text, own, 1)
        if not best or contains_answer(best[0], q.answers):
            continue
        said = passage(para["title"], best[0])
        if said not in taken:
            out.append(AnswerPair(q.text, said, NOT_ANSWER, q.article, "gold_removed"))
    return out


def dense_rankings(
    questions: Sequence[SquadQuestion],
    paragraphs: dict[str, dict[str, str]],
    by_article: dict[str, list[str]],
    embedder: Embedder,
) -> DenseRanking:
    """Each answerable question's article paragraphs, best first by the cosine of the
    embedder's query and passage vectors (how the dense leg ranks chunks)."""
    ids = [pid for pids in by_article.values() for pid in pids]
    vectors = embedder.encode_passages(
        [f"{paragraphs[pid]['title']}\n\n{paragraphs[pid]['text']}" for pid in ids]
    )
    row = {pid: n for n, pid in enumerate(ids)}
    asked = [q for q in questions if q.answerable]
    queries = embedder.encode_queries([q.text for q in asked])
    out: DenseRanking = {}
    for q, vec in zip(asked, queries, strict=True):
        pids = by_article[q.paragraph.rsplit("-p", 1)[0]]
        cos = vectors[[row[pid] for pid in pids]] @ vec
        out[q.id] = [pids[j] for j in np.argsort(-cos, kind="stable")]
    return out


def build_pairs(
    squad_path: Path, seed: int, embedder: Embedder | None = None
) -> tuple[list[AnswerPair], list[AnswerPair]]:
    """(fit pairs, held-out pairs) from the `train` split's articles, shuffled with
    `seed`; the same file, seed and embedder give the same lists (no `gold_removed` pairs
    without an embedder)."""
    data = load_squad(squad_path, "train")
    by_article: dict[str, list[str]] = {}
    for pid in data.corpus:
        by_article.setdefault(pid.rsplit("-p", 1)[0], []).append(pid)
    ranked = (
        dense_rankings(data.questions, data.corpus, by_article, embedder)
        if embedder is not None
        else {}
    )
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
        pairs = question_pairs(q, data.corpus, by_article[article], ranked.get(q.id, ()))
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
