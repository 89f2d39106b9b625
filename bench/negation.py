"""Claims that negate their source: does verification catch them, and keep faithful ones?

From the SciFact *train* claims the judge never trained on (`judge_data.is_holdout`), each
SUPPORT evidence sentence gives claims, each cited to its whole abstract (one source `[S1]`)
and checked by the real verifier (`query.verify`: lexical + dense support, the polarity
rule, and the trained judge's entailment when `--judge` is not `none`):

- negations of the sentence, which must be marked unsupported, made three ways: by
  `eval.negate` (the rules the judge trains on: take a negation out, else swap the first
  direction word for its opposite or put "not" after the first auxiliary), by putting
  "not" after the first auxiliary only (no opposites), and by prefixing "It is false
  that";
- the SciFact annotators' own CONTRADICT claims (people's negations, in other words than
  the sentence): reported, not a target;
- the claim as the annotators wrote it (a paraphrase its evidence supports) and the
  sentence itself, word for word: must be kept.

Columns: the verifier as shipped (polarity rule + judge), the polarity rule alone, the
judge alone.

    .venv/bin/python bench/negation.py [--judge bundled|none|DIR] [--contradiction-floor F ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragstream.core.answers import SourceChunk  # noqa: E402
from ragstream.eval.negate import AUXILIARY, negate  # noqa: E402
from ragstream.operators.embed import load_embedder, with_vector_memo  # noqa: E402
from ragstream.operators.judge import load_judge  # noqa: E402
from ragstream.query.verify import verify  # noqa: E402
from ragstream.train.judge_data import (  # noqa: E402
    evidence_sentences,
    is_holdout,
    load_claims,
    load_corpus,
)

SHARED = REPO.parent / "shared" / "data"


def not_after_auxiliary(sentence: str) -> str | None:
    """ "not" after the first auxiliary or copula, or None when there is none or it is
    negated already (a second way to negate, without `negate`'s opposites)."""
    found = AUXILIARY.search(sentence)
    return None if found is None else f"{sentence[: found.end()]} not{sentence[found.end() :]}"


def false_that(sentence: str) -> str:
    return "It is false that " + (sentence[:1].lower() + sentence[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--judge", default="bundled")
    ap.add_argument("--contradiction-floor", type=float, default=0.5)
    args = ap.parse_args()
    docs = load_corpus(SHARED / "scifact" / "corpus.jsonl")
    claims = load_claims(SHARED / "scifact-claims" / "claims_train.jsonl")
    # vectors memoized: the columns cost one encoding of each text
    judge, embedder = load_judge(args.judge), with_vector_memo(load_embedder("minilm-l6"), 65536)
    columns = {
        "as shipped": {"judge": judge, "polarity_rule": True},
        "polarity rule alone": {"judge": None, "polarity_rule": True},
        "judge alone": {"judge": judge, "polarity_rule": False},
    }
    if judge is None:
        del columns["judge alone"]
    counts: dict[tuple[str, str], list[int]] = {}

    def check(row: str, said: str, want: bool, source: SourceChunk) -> None:
        for column, options in columns.items():
            checked = verify(
                f"{said.rstrip('.')} [S1].", [source], embedder,
                contradiction_floor=args.contradiction_floor, **options,  # type: ignore[arg-type]
            )  # fmt: skip
            cell = counts.setdefault((row, column), [0, 0])
            cell[0] += checked.claims[0].supported == want
            cell[1] += 1

    for claim in (c for c in claims if is_holdout(c.id)):
        for doc, sets in claim.evidence.items():
            title, sentences = docs[doc]
            text = " ".join(sentences)
            source = SourceChunk(
                cid="S1", point_id=doc, doc_id=doc, path=f"{doc}.md", title=title,
                char_start=0, char_end=len(text), text=text, score=1.0,
            )  # fmt: skip
            for ids, label in sets:
                if label == "CONTRADICT":
                    check(
                        "annotators' CONTRADICT claim caught (no target)", claim.text, False, source
                    )
                    continue
                for j in evidence_sentences(claim.text, sentences, ids)[:1]:
                    sentence = sentences[j]
                    check("negated by eval.negate caught", negate(sentence), False, source)
                    inserted = not_after_auxiliary(sentence)
                    if inserted is not None:
                        check('"not" after the first auxiliary caught', inserted, False, source)
                    check('"It is false that …" caught', false_that(sentence), False, source)
                    check("annotated claim kept", claim.text, True, source)
                    check("verbatim sentence kept", sentence, True, source)
    print(f"judge: {args.judge}, contradiction floor {args.contradiction_floor}")
    print("| held-out train claims | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in sorted(dict.fromkeys(r for r, _ in counts), key=lambda r: ("kept" in r, r)):
        cells = [counts[row, c] for c in columns]
        print(f"| {row} | " + " | ".join(f"{ok} / {n} ({ok / n:.1%})" for ok, n in cells) + " |")


if __name__ == "__main__":
    main()
