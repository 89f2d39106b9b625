"""Training pairs for the support judge, from SciFact's train claims and corpus only.

The judge reads (evidence sentence, statement) and says one of three things: the sentence is
unrelated to the statement (it does not answer it), supports it, or contradicts it. The
answerability decision asks "supports or contradicts" (the documents speak to the question);
claim verification asks "supports". Each train claim gives:

- its labelled evidence (SUPPORT / CONTRADICT), and the rule-made negation of the claim with
  the opposite label (`eval.negate`);
- faithful copies (a sentence supports itself) and the sentence's own negation (contradicts);
- the claim asked as a question (`negate.questions`), with the same label: a question is
  answered by what supports or contradicts the claim it asks about. Evidence pairs get
  both forms; the others are asked instead of stated in `QUESTION_SHARE` of the pairs;
- unrelated but same-topic text: the gold abstract's other sentences, the closest sentences
  of the BM25 neighbours that are not cited (what the index returns when the gold document
  is missing), the cited sentences of not-enough-info claims, and one random sentence.

Claims are split by a stable hash into a fit part and a held-out part (early stopping, the
threshold choice and the negation figures); the SciFact test queries are never read.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from ragstream.connectors.lexical import tokenize
from ragstream.eval.negate import negate, questions
from ragstream.query.verify import content_tokens, sentence_spans

UNRELATED, SUPPORTS, CONTRADICTS = 0, 1, 2
LABELS = ("unrelated", "supports", "contradicts")
HOLDOUT_SHARE = 0.15
NEIGHBOURS = 4  # BM25 neighbours per claim, 2 closest sentences each (hard negatives)
QUESTION_SHARE = 0.4  # pairs whose claim is asked as a question instead (`negate.questions`)


@dataclass(frozen=True)
class Pair:
    """One training example: does `premise` (source text) bear on `statement`?"""

    premise: str
    statement: str
    label: int
    claim_id: int
    kind: str


@dataclass(frozen=True)
class Claim:
    id: int
    text: str
    evidence: dict[str, list[tuple[list[int], str]]]  # doc id -> [(sentence ids, label)]
    cited: list[str]


def load_claims(path: Path) -> list[Claim]:
    claims = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        evidence = {
            str(doc): [(list(s["sentences"]), s["label"]) for s in sets]
            for doc, sets in row["evidence"].items()
        }
        cited = [str(d) for d in row["cited_doc_ids"]]
        claims.append(Claim(int(row["id"]), row["claim"], evidence, cited))
    return claims


def load_corpus(path: Path) -> dict[str, tuple[str, list[str]]]:
    """doc id -> (title, sentences): the BEIR text split as the answer path splits it."""
    docs = {}
    with path.open(encoding="utf-8") as fh:
        for line in filter(str.strip, fh):
            d = json.loads(line)
            text = d.get("text") or ""
            docs[str(d["_id"])] = (
                d.get("title") or "",
                [text[a:b] for a, b in sentence_spans(text)],
            )
    return docs


def is_holdout(claim_id: int) -> bool:
    """Stable, seed-free split: the same claims are held out on every machine and run."""
    return xxhash.xxh64_intdigest(f"claim:{claim_id}".encode()) % 1000 < HOLDOUT_SHARE * 1000


def _overlap(a: str, b: str) -> int:
    return len(content_tokens(a) & content_tokens(b))


def evidence_sentences(claim: str, sentences: Sequence[str], ids: Sequence[int]) -> list[int]:
    """The local sentence ids for SciFact's ids. The BEIR text joins the original sentence
    list and our splitter can cut an abbreviation differently, so each id may be off by one:
    take, of i-1, i, i+1, the sentence that shares most content words with the claim."""
    out: list[int] = []
    for i in ids:
        near = [j for j in (i, i - 1, i + 1) if 0 <= j < len(sentences)]
        if near:
            best = max(near, key=lambda j: _overlap(claim, sentences[j]))
            if best not in out:
                out.append(best)
    return out


class Neighbours:
    """BM25 over the whole corpus (rank-bm25, the project's exact reference), for the
    same-topic documents a claim retrieves when its own are missing."""

    def __init__(self, docs: dict[str, tuple[str, list[str]]]) -> None:
        from rank_bm25 import BM25Okapi

        self.ids = list(docs)
        self.bm25 = BM25Okapi(
            [tokenize(" ".join([docs[d][0], *docs[d][1]])) or ["_"] for d in self.ids]
        )

    def top(self, text: str, n: int, exclude: Iterable[str]) -> list[str]:
        skip = set(exclude)
        scores = self.bm25.get_scores(tokenize(text))
        order = sorted(range(len(self.ids)), key=lambda i: (-scores[i], i))
        return [self.ids[i] for i in order[: n + len(skip)] if self.ids[i] not in skip][:n]


def _closest(statement: str, sentences: Sequence[str], n: int, skip: set[int]) -> list[int]:
    ranked = sorted(
        (j for j in range(len(sentences)) if j not in skip),
        key=lambda j: (-_overlap(statement, sentences[j]), j),
    )
    return ranked[:n]


def claim_pairs(
    claim: Claim,
    docs: dict[str, tuple[str, list[str]]],
    neighbours: Neighbours,
    rng: random.Random,
    all_ids: Sequence[str],
) -> list[Pair]:
    """Every training pair one claim yields (see the module docstring)."""
    pairs: list[Pair] = []

    asked = questions(claim.text)

    def add(premise: str, statement: str, label: int, kind: str) -> None:
        if not premise.strip() or not statement.strip():
            return
        if statement == claim.text and asked and label != UNRELATED:
            # evidence is scarce: keep the claim and add it asked as a question
            pairs.append(Pair(premise, rng.choice(asked), label, claim.id, kind + "_asked"))
        elif statement == claim.text and asked and rng.random() < QUESTION_SHARE:
            statement, kind = rng.choice(asked), kind + "_asked"
        pairs.append(Pair(premise, statement, label, claim.id, kind))

    negated = negate(claim.text)
    for doc, sets in claim.evidence.items():
        sentences = docs[doc][1]
        used: set[int] = set()
        for ids, label in sets:
            local = evidence_sentences(claim.text, sentences, ids)
            used.update(j + d for j in local for d in (-1, 0, 1))
            premise = " ".join(sentences[j] for j in local)
            if label == "SUPPORT":
                add(premise, claim.text, SUPPORTS, "support")
                add(premise, negated, CONTRADICTS, "negated_claim")
                first = sentences[local[0]] if local else ""
                add(first, first, SUPPORTS, "copy")
                add(first, negate(first), CONTRADICTS, "negated_copy")
            else:
                add(premise, claim.text, CONTRADICTS, "contradict")
                add(premise, negated, SUPPORTS, "negated_contradiction")
        for j in _closest(claim.text, sentences, 2, used):
            add(sentences[j], claim.text, UNRELATED, "same_abstract")
    if not claim.evidence:
        for doc in claim.cited:
            for j in _closest(claim.text, docs[doc][1], 2, set()):
                add(docs[doc][1][j], claim.text, UNRELATED, "not_enough_info")
    for doc in neighbours.top(claim.text, NEIGHBOURS, [*claim.cited, *claim.evidence]):
        for j in _closest(claim.text, docs[doc][1], 2, set()):
            add(docs[doc][1][j], claim.text, UNRELATED, "neighbour")
    other = docs[rng.choice(all_ids)][1]
    if other:
        add(rng.choice(other), claim.text, UNRELATED, "random")
    return pairs


def build_pairs(claims_path: Path, corpus_path: Path, seed: int) -> tuple[list[Pair], list[Pair]]:
    """(fit pairs, held-out pairs), shuffled with `seed`; same inputs and seed, same lists."""
    docs = load_corpus(corpus_path)
    neighbours = Neighbours(docs)
    rng = random.Random(seed)
    all_ids = sorted(docs)
    fit: list[Pair] = []
    held: list[Pair] = []
    for claim in load_claims(claims_path):
        (held if is_holdout(claim.id) else fit).extend(
            claim_pairs(claim, docs, neighbours, rng, all_ids)
        )
    rng.shuffle(fit)
    return fit, held
