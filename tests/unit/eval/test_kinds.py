"""Every kind of question read through the engine (ragstream/eval/kinds.py, the data sets
of ragstream/eval/kind_sets.py) on a small real index, mtrag-un's split as its README states
it, and `ragstream tune --what decision`'s gate (ragstream/train/tune_decision.py)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragstream.cli import app
from ragstream.core.answers import ChatMessage, ChatRequest
from ragstream.eval import kind_sets, kinds
from ragstream.eval.beir import index_corpus
from ragstream.eval.opened import opened
from ragstream.eval.squad import SquadQuestion, load_squad
from ragstream.query.decision import HISTORY
from ragstream.service.served import open_engine
from ragstream.train import tune_decision

pytestmark = pytest.mark.slow  # indexes a corpus and loads the embedder and the answer judge

PARAGRAPHS = {
    "Lyon": [
        "Lyon is the third-largest city of France. It stands where the Rhône meets the Saône.",
        "Lyon's silk industry grew in the sixteenth century and employed thousands of weavers.",
        "The Festival of Lights takes place in Lyon every December, since 1852.",
    ],
    "Kestrel": [
        "The common kestrel hovers over open fields while it hunts for voles.",
        "A kestrel lays four to six eggs, and the female incubates them for a month.",
        "Kestrels were kept by falconers, although they were thought a minor bird of prey.",
    ],
}
QUESTIONS = [  # (id, article, paragraph, question, answer or None)
    ("q1", "Lyon", 0, "Which two rivers meet at Lyon?", "the Rhône meets the Saône"),
    ("q2", "Lyon", 1, "When did Lyon's silk industry grow?", "sixteenth century"),
    ("q3", "Kestrel", 0, "What does the common kestrel hunt for?", "voles"),
    ("q4", "Kestrel", 1, "How many eggs does a kestrel lay?", "four to six"),
    ("q5", "Kestrel", 1, "How many eggs does a kestrel's mate guard?", None),
    ("q6", "Lyon", 2, "In which month is the Festival of Lights held in Lyon?", "December"),
]


def squad_json(path: Path) -> Path:
    data = []
    for title, texts in PARAGRAPHS.items():
        paragraphs = []
        for i, text in enumerate(texts):
            qas = []
            for qid, article, para, question, answer in QUESTIONS:
                if (article, para) != (title, i):
                    continue
                found = (
                    [] if answer is None else [{"text": answer, "answer_start": text.index(answer)}]
                )
                qas.append({"id": qid, "question": question, "answers": found,
                            "is_impossible": answer is None})  # fmt: skip
            paragraphs.append({"context": text, "qas": qas})
        data.append({"title": title, "paragraphs": paragraphs})
    path.mkdir(parents=True, exist_ok=True)
    (path / "mini.json").write_text(json.dumps({"version": "v2.0", "data": data}))
    return path


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = squad_json(tmp_path_factory.mktemp("mini-squad"))
    data_dir = tmp_path_factory.mktemp("mini-data")
    index_corpus(load_squad(folder).corpus, data_dir)
    return folder, data_dir


def test_each_kind_is_read_with_and_without_its_gold_paragraph(mini: tuple[Path, Path]) -> None:
    folder, data_dir = mini
    data = load_squad(folder)
    text_of = {pid: doc["text"] for pid, doc in data.corpus.items()}
    with open_engine(index_corpus(data.corpus, data_dir)) as (engine, _):
        read = kinds.engine_reader(engine)
        q4 = next(q for q in data.questions if q.id == "q4")
        pair = read(q4.text, kinds.hiding({q4.paragraph}))
        assert pair.present is not None and pair.left
        gold = text_of[q4.paragraph]
        assert not any(gold in t or t in gold for t in pair.left)  # the gold paragraph is out
        others = [v for k, v in text_of.items() if k != q4.paragraph]
        assert all(any(o in t or t in o for o in others) for t in pair.left)
        readings = kinds.squad_readings(read, data.questions, "mini")
        offtopic = kinds.off_topic_readings(read, [("off-1", "Who won the 1998 World Cup?")], "x")
    by = {(r.qid, r.kind): r for r in readings}
    answerable = {q for q, k in by if k == "answerable"}
    assert answerable == {"q1", "q2", "q3", "q4", "q6"}
    assert by[("q5", "adversarial")].group == "Kestrel"
    assert set(by) - {(q, "answerable") for q in answerable} - {("q5", "adversarial")} == {
        (q, "gold_removed") for q in answerable
    }
    present = by[("q4", "answerable")].signals
    absent = by[("q4", "gold_removed")].signals
    assert present is not None and absent is not None
    assert present["judge_best"] > absent["judge_best"]
    assert offtopic[0].kind == "off_topic" and offtopic[0].group == "off"


def test_a_follow_up_is_read_with_its_history_as_a_chat_asks_it(mini: tuple[Path, Path]) -> None:
    """With its history, a follow-up is retrieved through the conversation's rewrite and
    judged as its effective question: the kestrel's eggs, not "they" alone."""
    folder, data_dir = mini
    history = (
        ChatMessage(role="user", content="Tell me about the common kestrel."),
        ChatMessage(role="assistant", content="It is a small bird of prey that hovers."),
    )
    # the form test ("they"): on this small index the follow-up retrieves strongly alone, so
    # the default test, which reads the index, would leave it as asked
    form = {"query": {"conversation": {"not_standalone": ["deictic"]}}}
    with open_engine(index_corpus(load_squad(folder).corpus, data_dir, form)) as (engine, _):
        read = kinds.engine_reader(engine, gate=False)
        question = "How many eggs do they lay?"
        alone = read(question).present
        followed = read(question, None, history).present
        retrieval = engine.chat_retrieve(
            ChatRequest(messages=[*history, ChatMessage(role="user", content=question)])
        )
    assert retrieval.effective_query is not None
    assert "kestrel" in retrieval.effective_query.sparse.lower()
    assert alone is not None and followed is not None
    assert followed != alone
    assert alone[HISTORY] == 0.0 and followed[HISTORY] == 1.0  # what the decision routes on


def test_mtrag_tasks_carry_the_conversation_before_their_question(shared_docs: Path) -> None:
    folder = shared_docs.parent / "mtrag-un"
    _, tasks = kinds.load_mtrag(folder, "train")
    raw = {
        (t := json.loads(line))["task_id"]: t
        for line in (folder / "conversations.jsonl").read_text("utf-8").splitlines()
    }
    for task in tasks:
        turns = raw[task.id]["turns"]
        assert turns[-1]["text"] == task.question
        assert [m.content for m in task.history] == [
            m["text"] for m in turns[:-1] if m["text"].strip()
        ]
        assert task.domain == raw[task.id]["domain"]
    assert any(len(t.history) >= 2 for t in tasks) and any(not t.history for t in tasks)


def test_a_gold_removed_question_another_paragraph_answers_is_left_out() -> None:
    lyon = SquadQuestion("q", "Where?", "Lyon", "Lyon-p000", ("Saône",), (0,))
    assert kinds.answered_elsewhere(lyon, ["The Saône flows south.", "Nothing."])
    assert not kinds.answered_elsewhere(lyon, ["Silk weavers."])


def test_mtrag_tasks_follow_the_conversation_split(shared_docs: Path) -> None:
    folder = shared_docs.parent / "mtrag-un"
    corpus, train = kinds.load_mtrag(folder, "train")
    _, test = kinds.load_mtrag(folder, "test")
    assert not {t.conversation for t in train} & {t.conversation for t in test}
    assert len(train) + len(test) == 365
    assert all(g in corpus for t in train + test for g in t.gold)
    assert {t.answerability for t in train} >= {"ANSWERABLE", "UNANSWERABLE", "UNDERSPECIFIED"}
    assert not [t for t in train + test if t.answerability == "UNANSWERABLE" and t.gold]


def test_tuning_a_decision_on_too_few_questions_is_a_clear_error(
    mini: tuple[Path, Path],
) -> None:
    folder, data_dir = mini
    result = CliRunner().invoke(
        app, ["tune", str(folder), "--data-dir", str(data_dir), "--what", "decision"]
    )
    assert result.exit_code == 2, result.output
    assert "too few questions" in result.output


def user_readings(seed: int, judge_informs: bool) -> list[kinds.Reading]:
    """Readings of a user's corpus: `dense_best` tells answerable from gold-removed
    questions; the judge's reading is noise unless `judge_informs`."""
    rng = random.Random(seed)
    rows = []
    for i in range(300):
        for answerable in (True, False):
            dense = rng.gauss(0.7 if answerable else 0.5, 0.08)
            p = rng.uniform(0.5, 0.99) if answerable else rng.uniform(0.001, 0.5)
            judge = p if judge_informs else rng.uniform(0.001, 0.99)
            signals = {"dense_best": dense, "judge_best": judge, "judge_top": judge,
                       "answer_type_match": 1.0, "coverage_best": 1.0,
                       "named_coverage": 1.0}  # fmt: skip
            kind = "answerable" if answerable else "gold_removed"
            rows.append(kinds.Reading(f"q{i}", kind, "mine", f"g{i % 30}", signals))
    return rows


@pytest.mark.parametrize("judge_informs", [False, True])
def test_a_tuned_decision_is_kept_only_when_it_refuses_more_on_held_out_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_informs: bool
) -> None:
    """Where the judge's reading means nothing (the shipped decision trusts it), the refit
    refuses more of the held-out unanswerable questions and is kept, written beside a copy
    of the judge; where the shipped signals all inform, the refit gains nothing it could
    show and nothing is written."""
    monkeypatch.setattr(kind_sets, "read_question_set", lambda *_: user_readings(13, judge_informs))
    monkeypatch.setattr(
        tune_decision.ingest, "status", lambda **_: type("S", (), {"embedder": None})()
    )
    report = tune_decision.tune_decision(Path("mine"), tmp_path, progress=lambda _: None)
    tuned, shipped = report.held_refused_tuned, report.held_refused_shipped
    assert report.kept == tune_decision.better(tuned, shipped)
    if judge_informs:
        return
    assert report.kept, report
    assert tuned["mine gold_removed"] > shipped["mine gold_removed"] + 0.05
    out = Path(report.model_dir)
    assert (out / "decision.json").is_file() and (out / "model.onnx").is_file()
    assert report.switch_on.endswith(str(out))
    assert not {"judge_best", "judge_top"} & set(report.features)


def test_a_candidate_judge_reads_the_questions_and_keeps_its_own_readings(
    mini: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Sets.judge`: the engines read with the candidate judge's directory, and its readings
    are kept under its version beside the shipped judge's (neither overwrites the other)."""
    from ragstream.operators.answer_judge import BUNDLED_ANSWER_JUDGE, bundled_answer_judge

    folder, data_dir = mini
    candidate = tmp_path / "candidate"
    shutil.copytree(BUNDLED_ANSWER_JUDGE, candidate)
    settings = index_corpus(load_squad(folder).corpus, data_dir)
    with opened(settings, candidate) as engine:
        assert engine.answer_judge is not None and engine.answer_judge.model_dir == candidate
    with opened(settings) as engine:
        assert engine.answer_judge is not None
        assert engine.answer_judge.model_dir == BUNDLED_ANSWER_JUDGE

    seen: list[Path | None] = []

    def reader(sets: kind_sets.Sets, split: str, where: Path) -> list[kinds.Reading]:
        seen.append(sets.judge)
        return [kinds.Reading("q", "answerable", "mtrag", "g", {"judge_best": len(seen)})]

    monkeypatch.setitem(kind_sets._READERS, "mtrag", reader)
    shipped = kind_sets.Sets(folder, tmp_path / "out")
    tried = kind_sets.Sets(folder, tmp_path / "out", judge=candidate)
    for sets in (shipped, tried, shipped, tried):  # each read once, then from its own file
        kind_sets.read_kinds(sets, "train", only=("mtrag",))
    assert seen == [None, candidate]
    version = bundled_answer_judge().version
    kept = sorted(p.name for p in (tmp_path / "out" / "mtrag-data").glob("kinds-*.json"))
    assert kept == ["kinds-mtrag-train-" + version + ".json", "kinds-mtrag-train.json"]
