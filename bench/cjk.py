"""Chinese and Japanese questions against their own paragraphs: the lexical leg, the dense
leg, the hybrid ranking and the answer, side by side for each embedder.

The sets are CMRC 2018 dev (Chinese) and JSQuAD v1.3 valid (Japanese) from
../shared/data/cjk (SQuAD format; JSQuAD's "title [SEP] " prefix is stripped, the title
is each paragraph's heading). Their articles are split in two with a fixed seed: `tune`
is the half thresholds are chosen on, `report` the half figures are read on. Every
paragraph of the half is written as a Markdown file and indexed as a user's folder is,
except `--removed` of them picked at random: their questions are the **gold-removed**
ones, whose paragraph is not in the index (as the natural-negatives sets make them). Every
other question is answerable from the index.

Per language and embedder, over the answerable questions: hit@1 of the lexical leg alone,
of the dense leg alone, of the fused ranking and of the engine's final ranking (after the
reranker); then, over `--questions` of them and as many gold-removed ones, the answer:
how often it holds a gold answer string, how often an answerable question is refused, how
often a gold-removed one is, and which path decided (`Answerability.decided_by`). `--tune`
(on the tune half) answers with no coverage floor and no cosine rule, and prints what each
pair of them would do.
`--english` prints what the script-aware reading changes on English text; `--fusion dbsf`
fuses the fused column's list by DBSF instead of the engine's RRF.

    .venv/bin/python bench/cjk.py [--half report] [--embedders minilm-l6,multilingual-e5-small]
        [--langs zh,ja] [--questions 300] [--removed 60] [--tune] [--english] [--fusion dbsf]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragstream.core.answers import Answer, Fusion, QueryRequest
from ragstream.eval.beir import doc_key, index_corpus
from ragstream.eval.squad import SquadDataset, SquadQuestion, contains_answer, load_squad
from ragstream.query.engine import QueryEngine

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cjk"
FILES = {"zh": "cmrc2018_dev.json", "ja": "jsquad_valid-v1.3.json"}
SEED = 20261207
SEP = " [SEP] "


def load_half(lang: str, half: str) -> SquadDataset:
    """The articles of one half (seeded, by article) with JSQuAD's title prefix stripped."""
    data = load_squad(DATA / FILES[lang])
    titles = sorted({q.article for q in data.questions})
    random.Random(SEED).shuffle(titles)
    keep = set(titles[: len(titles) // 2] if half == "tune" else titles[len(titles) // 2 :])
    questions = [q for q in data.questions if q.article in keep]
    wanted = {q.paragraph for q in questions}
    corpus = {
        pid: {**doc, "text": doc["text"].split(SEP, 1)[-1]}
        for pid, doc in data.corpus.items()
        if pid in wanted
    }
    return SquadDataset(corpus, questions)


@dataclass
class Tally:
    asked: int = 0
    lexical: int = 0
    dense: int = 0
    fused: int = 0
    final: int = 0
    answered_q: int = 0
    holds_gold: int = 0
    refused_answerable: int = 0
    removed_q: int = 0
    refused_removed: int = 0
    paths: Counter[str] = field(default_factory=Counter)
    # per answered question: gold removed, coverage_best, dense_best, legs_agree, refused,
    # holds gold
    rows: list[tuple[bool, float, float, bool, bool, bool]] = field(default_factory=list)


def _top_doc(ranked: Sequence[tuple[int, str]]) -> str | None:
    return min(ranked)[1] if ranked else None


def rank_hits(engine: QueryEngine, q: SquadQuestion, t: Tally, fusion: Fusion = "rrf") -> None:
    """hit@1 of each leg, of the fused list (`fusion`) and of the engine's final ranking."""
    fused = engine.retriever.retrieve(q.text, n=20, fusion=fusion)
    t.asked += 1
    for leg in ("lexical", "dense"):
        ranked = [
            (c.ranks[leg], doc_key(c.chunk.doc_id)) for c in fused.candidates if leg in c.ranks
        ]
        setattr(t, leg, getattr(t, leg) + (_top_doc(ranked) == q.paragraph))
    t.fused += bool(fused.candidates) and doc_key(fused.candidates[0].chunk.doc_id) == q.paragraph
    final = engine.retrieve(QueryRequest(query=q.text)).results
    t.final += bool(final) and doc_key(final[0].doc_id) == q.paragraph


def tally_answer(answer: Answer, q: SquadQuestion, removed: bool, t: Tally) -> None:
    refused = answer.refusal is not None
    verdict = answer.answerability
    t.paths[verdict.decided_by if verdict is not None else "gate"] += 1
    signals = verdict.signals if verdict is not None else {}
    holds = contains_answer(answer.text, q.answers)
    t.rows.append(
        (
            removed,
            signals.get("coverage_best", 0.0),
            signals.get("dense_best", 0.0),
            bool(signals.get("legs_agree", 0.0)),
            refused,
            holds,
        )
    )
    if removed:
        t.removed_q += 1
        t.refused_removed += refused
    else:
        t.answered_q += 1
        t.refused_answerable += refused
        t.holds_gold += holds


def run(lang: str, embedder: str, args: argparse.Namespace) -> Tally:
    data = load_half(lang, args.half)
    rng = random.Random(SEED)
    removed = set(rng.sample(sorted(data.corpus), min(args.removed, len(data.corpus) // 5)))
    kept = {pid: doc for pid, doc in data.corpus.items() if pid not in removed}
    folder = args.out / f"cjk-{lang}-{args.half}-{embedder}"
    # --tune: nothing refused on coverage, so every answer is written and each floor's
    # refusals can be read off the recorded signals (`floors`)
    off = {"other_language_coverage": 0.0, "other_language_dense": 1.01}
    answerable_settings = off if args.tune else {}
    overrides = {"embedder": embedder, "query": {"answerable": answerable_settings}}
    settings = index_corpus(kept, folder, overrides)
    answerable = [q for q in data.questions if q.paragraph not in removed]
    negatives = [q for q in data.questions if q.paragraph in removed]
    t = Tally()
    with QueryEngine.open(settings) as engine:
        for q in answerable[: args.limit or None]:
            rank_hits(engine, q, t, args.fusion)
        asked = rng.sample(answerable, min(args.questions, len(answerable)))
        gone = rng.sample(negatives, min(args.questions, len(negatives)))
        for q, is_removed in [(q, False) for q in asked] + [(q, True) for q in gone]:
            tally_answer(engine.answer(QueryRequest(query=q.text)), q, is_removed, t)
    return t


def floors(t: Tally, label: str) -> None:
    """What each coverage floor would do, read off the signals of answers written with none:
    answerable questions refused, answers holding gold, gold-removed questions refused; with
    no dense rule, and with a best cosine of 0.68 answering where both legs agree."""
    print(f"\n{label}: floor | dense | answerable refused | holds gold | gold-removed refused")
    asked = [r for r in t.rows if not r[0]]
    gone = [r for r in t.rows if r[0]]
    for floor in (0.0, 0.2, 0.3, 0.35, 0.4, 0.5):
        for dense in (1.01, 0.68):

            def answers(r: tuple[bool, float, float, bool, bool, bool]) -> bool:
                return not r[4] and (r[1] >= floor or (r[3] and r[2] >= dense))  # noqa: B023

            refused = sum(not answers(r) for r in asked)
            holds = sum(r[5] and answers(r) for r in asked)
            gone_refused = sum(not answers(r) for r in gone)
            print(
                f"{floor:.2f} | {dense:.2f} | {_share(refused, len(asked))} | "
                f"{_share(holds, len(asked))} | {_share(gone_refused, len(gone))}"
            )


def english_check() -> None:
    """What the script-aware reading changes on English text: over the SciFact corpus and
    queries and the squad2-half test paragraphs and questions, how many texts' BM25 tokens
    and verifier tokens differ from the English-only analyzer's, and how many are read as
    another language (then the trained models would not read them)."""
    import json
    import re

    from ragstream.connectors.lexical import WORD_ANALYZER, tokenize
    from ragstream.core.language import detect
    from ragstream.query.verify import STOPWORDS, content_tokens

    english_only = WORD_ANALYZER  # all text as words: the analyzer of storage format 2
    ascii_word = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
    shared = DATA.parent
    sets: dict[str, list[str]] = {}
    with (shared / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        sets["scifact corpus"] = [f"{d['title']} {d['text']}" for d in map(json.loads, fh)]
    with (shared / "scifact" / "queries.jsonl").open(encoding="utf-8") as fh:
        sets["scifact queries"] = [q["text"] for q in map(json.loads, fh)]
    squad = load_squad(shared / "squad2-half", "test")
    sets["squad2-half test paragraphs"] = [d["text"] for d in squad.corpus.values()]
    sets["squad2-half test questions"] = [q.text for q in squad.questions]
    print(
        "| texts | count | BM25 tokens differ | verifier tokens differ | read as another language |"
    )
    print("|---|---|---|---|---|")
    for name, texts in sets.items():
        bm25 = sum(tokenize(t) != list(english_only.analyze(t)) for t in texts)
        old = (
            {w for w in ascii_word.findall(t.lower()) if w not in STOPWORDS and len(w) > 1}
            for t in texts
        )
        verifier = sum(content_tokens(t) != o for t, o in zip(texts, old, strict=True))
        other = sum(not detect(t).trained_models for t in texts)
        print(f"| {name} | {len(texts)} | {bm25} | {verifier} | {other} |", flush=True)


def _share(n: int, d: int) -> str:
    return f"{n / d:.3f}" if d else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("tune", "report"), default="report")
    parser.add_argument("--embedders", default="minilm-l6,multilingual-e5-small")
    parser.add_argument("--langs", default="zh,ja")
    parser.add_argument("--questions", type=int, default=300, help="answered per set")
    parser.add_argument("--removed", type=int, default=60, help="paragraphs left out")
    parser.add_argument("--limit", type=int, default=0, help="ranked questions (0: all)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument("--tune", action="store_true", help="print each coverage floor's figures")
    parser.add_argument("--english", action="store_true", help="what changes on English text")
    parser.add_argument("--fusion", choices=("rrf", "dbsf"), default="rrf", help="fused column")
    args = parser.parse_args()
    if args.english:
        english_check()
        return
    print(
        "| set | embedder | questions | lexical hit@1 | dense hit@1 | fused hit@1 | "
        "final hit@1 | answer holds gold | answerable refused | gold-removed refused | "
        "decided by |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for lang in args.langs.split(","):
        for embedder in args.embedders.split(","):
            t = run(lang, embedder, args)
            paths = ", ".join(f"{k} {v}" for k, v in sorted(t.paths.items()))
            print(
                f"| {lang} {args.half} | {embedder} | {t.asked} | {_share(t.lexical, t.asked)} | "
                f"{_share(t.dense, t.asked)} | {_share(t.fused, t.asked)} | "
                f"{_share(t.final, t.asked)} | {_share(t.holds_gold, t.answered_q)} | "
                f"{_share(t.refused_answerable, t.answered_q)} | "
                f"{_share(t.refused_removed, t.removed_q)} ({t.removed_q}) | {paths} |",
                flush=True,
            )
            if args.tune:
                floors(t, f"{lang} {args.half} {embedder}")


if __name__ == "__main__":
    main()
