"""SQuAD 2.0-format datasets: questions with and without an answer in their paragraph.

A SQuAD file (`data[].title`, `paragraphs[].context`, `qas[]` with `question`,
`is_impossible` and `answers[]`) becomes a corpus of one document per paragraph, so the
same ingest, eval and answer harness that reads BEIR reads it: each paragraph is written as
`<article>-p<NNN>.md` (the article title as its heading) and indexed as a user's folder is.
An answerable question's gold document is its paragraph; an unanswerable one (written to
look answerable from its paragraph) has none.

A `split.json` beside the file (`{"train": [titles], "test": [titles]}`) splits by
article: models and thresholds are fitted on `train`, figures are read on `test`.
"""

from __future__ import annotations

import functools
import json
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from ragstream.core.language import CJK_CHARS
from ragstream.eval.beir import Corpus, Qrels, Queries

SPLIT_FILE = "split.json"


@dataclass(frozen=True)
class SquadQuestion:
    """One question, the paragraph it was written on, and its gold answers (none when it
    cannot be answered from that paragraph)."""

    id: str
    text: str
    article: str
    paragraph: str  # corpus id of its paragraph
    answers: tuple[str, ...]
    starts: tuple[int, ...]

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


@dataclass(frozen=True)
class SquadDataset:
    corpus: Corpus  # paragraph id -> {"title", "text"}
    questions: list[SquadQuestion]

    def queries(self) -> Queries:
        return {q.id: q.text for q in self.questions}

    def qrels(self) -> Qrels:
        """Answerable questions only: their paragraph is the relevant document."""
        return {q.id: {q.paragraph: 1} for q in self.questions if q.answerable}


def squad_file(path: str | Path) -> Path | None:
    """The SQuAD JSON file `path` names (a file, or a folder holding exactly one `.json`
    besides `split.json`), or None when it is not SQuAD-format (e.g. a BEIR folder)."""
    p = Path(path)
    if p.is_dir():
        if (p / "corpus.jsonl").exists():
            return None
        found = [f for f in sorted(p.glob("*.json")) if f.name != SPLIT_FILE]
        p = found[0] if len(found) == 1 else p
    if not p.is_file() or p.suffix.lower() != ".json":
        return None
    with p.open(encoding="utf-8") as fh:
        head = fh.read(4096)
    shaped = re.search(r'"data"\s*:', head) and re.search(r'"(?:paragraphs|qas)"\s*:', head)
    return p if shaped else None


def paragraph_id(article: str, index: int) -> str:
    """A paragraph's corpus id (a safe file stem): the article title, then its position.

    >>> paragraph_id("Steam_engine", 7)
    'Steam_engine-p007'
    >>> paragraph_id("Ca/fé: 1", 0)
    'Ca_fé_1-p000'
    """
    slug = re.sub(r"[^\w.-]+", "_", article).strip("._") or "article"
    return f"{slug}-p{index:03d}"


def split_articles(squad_path: Path, split: str | None) -> set[str] | None:
    """The titles of `split` in the `split.json` beside the file; None (every article) when
    no split is asked for or the file has no `split.json` beside it."""
    where = squad_path.parent / SPLIT_FILE
    if split is None or not where.exists():
        return None
    splits = json.loads(where.read_text(encoding="utf-8"))
    if split not in splits:
        raise ValueError(f"{where} has no split {split!r} (it has {sorted(splits)})")
    return set(splits[split])


def load_squad(path: str | Path, split: str | None = None) -> SquadDataset:
    """The articles of `split` (every article when None) as a corpus and its questions."""
    where = squad_file(path)
    if where is None:
        raise ValueError(f"{path} is not a SQuAD-format JSON file")
    raw = json.loads(where.read_text(encoding="utf-8"))
    keep = split_articles(where, split)
    corpus: Corpus = {}
    questions: list[SquadQuestion] = []
    for article in raw["data"]:
        title = str(article["title"])
        if keep is not None and title not in keep:
            continue
        for i, para in enumerate(article["paragraphs"]):
            pid = paragraph_id(title, i)
            corpus[pid] = {"title": title.replace("_", " "), "text": para["context"]}
            for qa in para["qas"]:
                gold = [] if qa.get("is_impossible") else qa.get("answers", [])
                first: dict[str, int] = {}  # each distinct answer at its first start
                for a in gold:
                    first.setdefault(str(a["text"]), int(a["answer_start"]))
                questions.append(
                    SquadQuestion(
                        id=str(qa["id"]),
                        text=str(qa["question"]),
                        article=title,
                        paragraph=pid,
                        answers=tuple(first),
                        starts=tuple(first.values()),
                    )
                )
    return SquadDataset(corpus, questions)


def holds_out(article: str, buckets: int = 4) -> bool:
    """A stable, seed-free choice of about one train article in `buckets`: the answer
    judge never trains on these, the answerability decision is fitted on them (a decision
    fitted on the judge's own training questions would trust it too much)."""
    return xxhash.xxh64_intdigest(f"article:{article}".encode()) % buckets == buckets - 1


# SQuAD's official answer normalization: lower case, no punctuation, no articles
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_CJK = re.compile(f"[{CJK_CHARS}]")
_CITATIONS = re.compile(r"\[\s*S\d+(?:\s*[,;]\s*S\d+)*\s*\]")


@functools.lru_cache(maxsize=65536)
def normalize_answer(text: str) -> str:
    """SQuAD's normalization, for exact match and F1.

    >>> normalize_answer("The  Norman conquest!")
    'norman conquest'
    """
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """Does `text` hold one of the gold answer strings (both normalized)?

    >>> contains_answer("They settled in Normandy, France [S1].", ["France"])
    True
    >>> contains_answer("They settled in Normandy [S1].", ["France", "10th century"])
    False
    >>> contains_answer("他于1980年出生[S1]。", ["1980年"])  # CJK words are not spaced
    True
    >>> contains_answer("经常逃学看电影早场[S1]。", ["逃学看电影早场。"])
    True
    """
    bare = _CITATIONS.sub("", text)
    flat = f" {normalize_answer(bare)} "
    if any(f" {gold} " in flat for gold in map(normalize_answer, answers) if gold):
        return True
    # CJK words are not spaced: a gold string is found inside the text, all punctuation
    # (、。「」 too) and spacing aside
    unspaced = _unpunctuated(bare)
    return any(
        _CJK.search(gold) is not None and _unpunctuated(gold) in unspaced
        for gold in answers
        if _unpunctuated(gold)
    )


def _unpunctuated(text: str) -> str:
    """Case-folded, without spaces or any Unicode punctuation (CJK matching)."""
    return "".join(
        c
        for c in text.casefold()
        if not c.isspace() and not unicodedata.category(c).startswith("P")
    )


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD's token F1 of a predicted span against the best gold answer.

    >>> round(f1_score("the 10th century", ["10th and 11th centuries"]), 3)
    0.333
    """
    best = 0.0
    said = normalize_answer(prediction).split()
    for gold in answers:
        wanted = normalize_answer(gold).split()
        common = sum((Counter(said) & Counter(wanted)).values())
        if common:
            p, r = common / len(said), common / len(wanted)
            best = max(best, 2 * p * r / (p + r))
    return best
