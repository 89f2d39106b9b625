"""The shared data sets' questions of every kind, each data set on its own index, and one
user question set, read through the engine of the served index (`eval.opened`).

`read_kinds` reads the sets of `Sets` (SQuAD 2.0's articles, SciFact's claims, mtrag-un's
conversations alone and in their chat, the repository's docs questions), each indexed into
its own data dir on first use (incrementally after) and its readings kept there, so a rerun
on the same inputs asks nothing again; `read_question_set` reads one SQuAD 2.0 or BEIR-format
set of a user's. How a question becomes its readings is `eval.kinds`.

Which split each data set contributes is the caller's choice: `ragstream.train.decision`
reads train splits only, `bench/natural_negatives.py` reports the test splits.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from ragstream.core.settings import ConversationSettings, Settings
from ragstream.eval.answer_eval import OFF_TOPIC
from ragstream.eval.beir import index_corpus, load_beir, load_corpus
from ragstream.eval.kinds import (
    CHAT,
    POOL,
    K,
    Reading,
    beir_readings,
    engine_reader,
    hiding,
    load,
    load_mtrag,
    mtrag_readings,
    off_topic_readings,
    save,
    squad_readings,
)
from ragstream.eval.opened import opened
from ragstream.eval.squad import holds_out, load_squad, squad_file
from ragstream.service import ingest


def read_question_set(
    dataset_dir: Path, data_dir: Path, split: str, judge: Path | None = None
) -> list[Reading]:
    """One question set of `split` (SQuAD 2.0 or BEIR format), its corpus indexed into
    `data_dir` (incrementally), every judged question read with and without its gold
    documents (and a SQuAD set's unanswerable ones as `adversarial`), by the answer judge
    in `judge` (None: the shipped one)."""
    squad = squad_file(dataset_dir)
    name = dataset_dir.name
    if squad is not None:
        data = load_squad(squad, split)
        with opened(index_corpus(data.corpus, data_dir), judge) as engine:
            return squad_readings(engine_reader(engine), data.questions, name)
    corpus, _, _ = load_beir(dataset_dir, split)
    with opened(index_corpus(corpus, data_dir), judge) as engine:
        return beir_readings(engine_reader(engine), dataset_dir, split, name, keep=lambda _: True)


# every ELSEWHERE_STRIDE-th question of the train articles the index leaves out is asked as
# an off-topic question (of the SQuAD index, and of SciFact's but for the articles that share
# its subject)
ELSEWHERE_STRIDE = 6
MEDICAL_ARTICLES = frozenset({"Immune_system"})
SQUAD_TRAIN_MORE = "squad2-train10"  # train articles the answer judge never read


@dataclass(frozen=True)
class Sets:
    """Where the data sets and their indexes are: the shared data folder, and a folder the
    per-set data dirs are made under (each indexed on first use, incrementally after)."""

    shared: Path
    out: Path
    off_topic: tuple[tuple[str, str], ...] = ()  # general questions (id, text), test only
    # the answer judge's model directory the engines read with (None: the shipped one); a
    # candidate's readings are kept beside the shipped judge's, under its version
    judge: Path | None = None

    def data_dir(self, name: str) -> Path:
        return self.out / name


def read_kinds(
    sets: Sets, split: str, *, only: Sequence[str] = ("squad", "scifact", "mtrag")
) -> list[Reading]:
    """Every kind of question of `split` over each data set of `only`, each data set on its
    own index (`train`: SQuAD 2.0's held-out train articles and `squad2-train10`, SciFact's
    train claims, mtrag-un's train conversations; `test`: the test side of each). Readings
    are kept in each data dir under the judge's version and the split (a chat's also under
    the rewrite's settings): a rerun on the same inputs asks nothing again."""
    out: list[Reading] = []
    for name in only:
        out += _cached(sets, name, split)
    return out


def _cached(sets: Sets, name: str, split: str) -> list[Reading]:
    from ragstream.operators.answer_judge import AnswerJudge, bundled_answer_judge

    data_dir = sets.data_dir(INDEX_DIRS[name](split))
    data_dir.mkdir(parents=True, exist_ok=True)
    version = (AnswerJudge(sets.judge) if sets.judge else bundled_answer_judge()).version
    cache = data_dir / f"kinds-{name}-{split}{f'-{version}' if sets.judge else ''}.json"
    key = f"{version} k={K} pool={POOL} off={len(sets.off_topic)}"
    key += _READ_AS.get(name, "")
    if name == CHAT:  # a chat's readings follow the rewrite's settings
        key += " " + xxhash.xxh64(ConversationSettings().model_dump_json().encode()).hexdigest()
    saved = load(cache, key)
    if saved is not None:
        return saved
    readings = _READERS[name](sets, split, data_dir)
    save(readings, cache, key)
    return readings


def _squad(sets: Sets, split: str, data_dir: Path) -> list[Reading]:
    half = load_squad(sets.shared / "squad2-half", split)
    if split == "train":
        more = load_squad(sets.shared / SQUAD_TRAIN_MORE)
        own = [q for q in half.questions if holds_out(q.article)] + more.questions
        slugs = {q.paragraph.rsplit("-p", 1)[0] for q in own}
        corpus = {
            pid: doc
            for pid, doc in {**half.corpus, **more.corpus}.items()
            if pid.rsplit("-p", 1)[0] in slugs
        }
        elsewhere = [q for q in half.questions if not holds_out(q.article)][::ELSEWHERE_STRIDE]
        off = [(f"squad-elsewhere-{q.id}", q.text) for q in elsewhere]
    else:
        own, corpus, off = half.questions, half.corpus, list(sets.off_topic)
    with opened(index_corpus(corpus, data_dir), sets.judge) as engine:
        read = engine_reader(engine)
        return squad_readings(read, own, "squad") + off_topic_readings(read, off, "squad")


def _scifact(sets: Sets, split: str, data_dir: Path) -> list[Reading]:
    if split == "train":
        half = load_squad(sets.shared / "squad2-half", "train")
        elsewhere = [q for q in half.questions if not holds_out(q.article)][::ELSEWHERE_STRIDE]
        off = [
            (f"squad-elsewhere-{q.id}", q.text)
            for q in elsewhere
            if q.article not in MEDICAL_ARTICLES
        ]
    else:
        off = [(f"scifact-offtopic-{i}", q) for i, q in enumerate(OFF_TOPIC, 1)]
        off += list(sets.off_topic)
    dataset = sets.shared / "scifact"
    with opened(index_corpus(load_corpus(dataset), data_dir), sets.judge) as engine:
        read = engine_reader(engine)
        claims = beir_readings(read, dataset, split, "scifact", keep=lambda _: True)
        return claims + off_topic_readings(read, off, "scifact")


def _mtrag(sets: Sets, split: str, data_dir: Path, *, chat: bool = False) -> list[Reading]:
    corpus, tasks = load_mtrag(sets.shared / "mtrag-un", split)
    dataset = CHAT if chat else "mtrag"
    with opened(index_corpus(corpus, data_dir), sets.judge) as engine:
        return mtrag_readings(engine_reader(engine), tasks, dataset, chat=chat)


def _mtrag_chat(sets: Sets, split: str, data_dir: Path) -> list[Reading]:
    return _mtrag(sets, split, data_dir, chat=True)


DOCS_FOLDERS = ("html", "md")  # the shared real documents the docs questions were written on


def _docs(sets: Sets, split: str, data_dir: Path) -> list[Reading]:
    """The shared real documents (`DOCS_FOLDERS`, synced where they are): the repository's
    docs questions read with and without the file that answers them, its off-topic questions
    and the general ones (test only: none of them is ever fitted on)."""
    if split != "test":
        return []
    tests = Path(__file__).resolve().parents[2] / "tests" / "data"
    lines = (tests / "docs_questions.tsv").read_text(encoding="utf-8").splitlines()
    rows = csv.DictReader([ln for ln in lines if not ln.startswith("#")], delimiter="\t")
    answerable_docs = [(f"docs-{i}", r["question"], r["file"]) for i, r in enumerate(rows, 1)]
    texts = (tests / "offtopic_questions.txt").read_text(encoding="utf-8").splitlines()
    off = [(f"docs-offtopic-{i}", t.strip()) for i, t in enumerate(texts, 1)]
    off = [(i, t) for i, t in off if t and not t.startswith("#")] + list(sets.off_topic)
    folders = [sets.shared / "docs" / f for f in DOCS_FOLDERS]
    settings = Settings(data_dir=data_dir).with_paths(folders)
    ingest.sync(folders, settings=settings)
    out = []
    with opened(settings, sets.judge) as engine:
        read = engine_reader(engine)
        for qid, question, file in answerable_docs:
            # a doc id is `<folder>:<path under it>`
            pair = read(question, hiding({file.replace("/", ":", 1)}, key=str))
            out.append(Reading(qid, "answerable", "docs", qid, pair.present))
            out.append(Reading(qid, "gold_removed", "docs", qid, pair.absent))
        return out + off_topic_readings(read, off, "docs")


# how a data set's questions are read, where that changed what its cached readings hold
_READ_AS = {"mtrag": " alone", CHAT: " history-turns"}
INDEX_DIRS: dict[str, Callable[[str], str]] = {  # each set's data dir under `Sets.out`
    "squad": lambda split: f"squad-{split}-data",
    "scifact": lambda _: "scifact-data",
    "mtrag": lambda _: "mtrag-data",
    CHAT: lambda _: "mtrag-data",
    "docs": lambda _: "docs-data",
}
_READERS: dict[str, Callable[[Sets, str, Path], list[Reading]]] = {
    "squad": _squad,
    "scifact": _scifact,
    "mtrag": _mtrag,
    CHAT: _mtrag_chat,
    "docs": _docs,
}
