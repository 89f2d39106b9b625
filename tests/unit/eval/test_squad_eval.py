"""`ragstream eval` over a SQuAD 2.0-format file, end to end: a small slice of the shared
set (two articles, a few paragraphs each, both kinds of question) indexed through the real
ingest and asked through the real engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragstream.cli import app
from ragstream.eval.evaluation import EvalReport

pytestmark = pytest.mark.slow  # a real sync and ~40 answers


@pytest.fixture(scope="module")
def small_squad(squad_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = json.loads((squad_dir / "dev-v2.0-half.json").read_text())
    split = json.loads((squad_dir / "split.json").read_text())
    articles = [a for a in raw["data"] if a["title"] in split["test"]][:2]
    for a in articles:
        a["paragraphs"] = a["paragraphs"][:3]
        for p in a["paragraphs"]:
            p["qas"] = p["qas"][:8]
    root = tmp_path_factory.mktemp("squad")
    (root / "small.json").write_text(json.dumps({"version": "v2.0", "data": articles}))
    titles = [a["title"] for a in articles]
    (root / "split.json").write_text(json.dumps({"train": [], "test": titles}))
    return root


def run(args: list[str]) -> EvalReport:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return EvalReport.model_validate_json(result.stdout.strip().splitlines()[-1])


def test_answers_mode_reports_both_kinds_and_every_signal(
    small_squad: Path, tmp_path: Path
) -> None:
    report = run(["eval", str(small_squad), "--data-dir", str(tmp_path), "--mode", "answers"])
    squad = report.squad
    assert squad is not None and squad.answerable is not None
    assert squad.answerable.asked + squad.unanswerable.asked == report.queries
    assert squad.answerable.asked > 0 and squad.unanswerable.asked > 0
    for kind in (squad.answerable, squad.unanswerable):
        assert kind.answered + sum(kind.refused_by_check.values()) == kind.asked
    assert squad.answerable.answered > 0 and squad.gold_paragraph_cited is not None
    assert 0.0 <= (squad.gold_in_first_sentence or 0.0) <= (squad.gold_in_answer or 0.0)
    assert {"decision", "judge_best", "dense_best"} <= set(squad.signals)
    assert set(squad.signals["dense_best"].refused_at) == {"0.80", "0.85", "0.90", "0.95"}
    floors = list(squad.signals["decision"].floor_at.values())  # the frontier's floors
    assert len(floors) == 4 and floors == sorted(floors, reverse=True)
    details = json.loads(Path(report.details_file or "").read_text())
    assert len(details) == report.queries
    answered = [d for d in details if d["answerable"] and d["refusal"] is None]
    assert all(d["cited"] for d in answered)


def test_abstain_mode_asks_the_unanswerable_questions_only(
    small_squad: Path, tmp_path: Path
) -> None:
    report = run(["eval", str(small_squad), "--data-dir", str(tmp_path), "--mode", "abstain"])
    assert report.squad is not None and report.squad.answerable is None
    assert report.squad.unanswerable.asked == report.queries > 0


def test_a_squad_set_is_not_a_retrieval_benchmark(small_squad: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", str(small_squad), "--data-dir", str(tmp_path)])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # rich's box, unwrapped
    assert result.exit_code == 2 and "--mode answers or --mode abstain" in said
