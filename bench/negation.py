"""Claims that negate their source: does verification catch them, and keep faithful ones?

From the SciFact *train* claims the judge never trained on (`judge_data.is_holdout`), each
SUPPORT evidence sentence gives three claims, each cited to its whole abstract (one source
`[S1]`) and checked by the real verifier (`query.verify`: lexical + dense support, and the
trained judge's entailment when `--judge` is not `none`):

- the sentence negated by rule (`train.negate`): must be marked unsupported;
- the claim as the SciFact annotators wrote it (a paraphrase its evidence supports): must
  be kept;
- the sentence itself, word for word: must be kept.

    .venv/bin/python bench/negation.py [--judge bundled|none|DIR]
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
from ragstream.operators.embed import load_embedder, with_vector_memo  # noqa: E402
from ragstream.operators.judge import load_judge  # noqa: E402
from ragstream.query.verify import verify  # noqa: E402
from ragstream.train.judge_data import (  # noqa: E402
    evidence_sentences,
    is_holdout,
    load_claims,
    load_corpus,
)
from ragstream.train.negate import negate  # noqa: E402

SHARED = REPO.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--judge", default="bundled")
    ap.add_argument("--contradiction-floor", type=float, nargs="+", default=[0.5])
    args = ap.parse_args()
    docs = load_corpus(SHARED / "scifact" / "corpus.jsonl")
    claims = load_claims(SHARED / "scifact-claims" / "claims_train.jsonl")
    # vectors memoized: the rows for several floors cost one encoding of each text
    judge, embedder = load_judge(args.judge), with_vector_memo(load_embedder("minilm-l6"), 65536)
    names = ("negated caught", "annotated claim kept", "verbatim kept")
    counts = {(f, n): [0, 0] for f in args.contradiction_floor for n in names}
    for claim in (c for c in claims if is_holdout(c.id)):
        for doc, sets in claim.evidence.items():
            title, sentences = docs[doc]
            text = " ".join(sentences)
            source = SourceChunk(
                cid="S1", point_id=doc, doc_id=doc, path=f"{doc}.md", title=title,
                char_start=0, char_end=len(text), text=text, score=1.0,
            )  # fmt: skip
            for ids, label in sets:
                if label != "SUPPORT":
                    continue
                for j in evidence_sentences(claim.text, sentences, ids)[:1]:
                    said_want = (
                        (negate(sentences[j]), False),
                        (claim.text, True),
                        (sentences[j], True),
                    )
                    for name, (said, want) in zip(names, said_want, strict=True):
                        for floor in args.contradiction_floor:
                            checked = verify(
                                f"{said.rstrip('.')} [S1].", [source], embedder,
                                judge=judge, contradiction_floor=floor,
                            )  # fmt: skip
                            counts[floor, name][0] += checked.claims[0].supported == want
                            counts[floor, name][1] += 1
    print(f"judge: {args.judge}")
    print("| contradiction floor | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for floor in args.contradiction_floor:
        cells = [counts[floor, n] for n in names]
        print(f"| {floor} | " + " | ".join(f"{ok} / {n} ({ok / n:.1%})" for ok, n in cells) + " |")


if __name__ == "__main__":
    main()
