"""Chinese, Japanese and Korean documents beside English ones, on the offline default: an
exact CJK term finds its own document, a question in those languages is answered from the
sentence that holds the answer (decided on the signals that read any language, and saying
so), its citation's span is the sentence in code points, a question whose document is gone
is refused, and an English question still goes through the trained models. A paragraph of
Chinese longer than a chunk is cut at its sentence ends, never past the model's length."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.embed import load_embedder

FILES = {
    "汤.md": "# 扁豆汤\n\n𠮷野家的扁豆汤很有名。扁豆汤是用扁豆和番茄慢慢炖成的，冬天最受欢迎。\n",
    "灯台.md": (
        "# 岬の灯台\n\n岬の灯台は千八百七十四年に初めて点灯された。"
        "灯守は三人で、六週間ごとに交代した。\n"
    ),
    "서울.md": "# 서울\n\n서울은 한국의 수도이며 가장 큰 도시이다. 한강이 서울을 가로지른다.\n",
    "kestrels.md": (
        "# Kestrels\n\nThe common kestrel hovers over open fields while hunting voles. "
        "Kestrels nest in old crow nests and lay four to six eggs in spring.\n"
    ),
    "pumps.md": (
        "# Pump station P-7\n\nThe pump station P-7 runs at 40 litres per second. It was "
        "built in 1998 and serves the eastern district of the town.\n"
    ),
}
LONG = (
    "长城是中国古代的军事防御工程。" + "它东起山海关，西至嘉峪关，全长数千公里，历代多次修建。" * 40
)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    root = tmp_path_factory.mktemp("cjk")
    docs = root / "docs"
    docs.mkdir()
    for name, text in {**FILES, "长城.md": f"# 长城\n\n{LONG}\n"}.items():
        (docs / name).write_text(text, encoding="utf-8")
    s = Settings(data_dir=root / "data", query={"log_queries": False})
    api.sync([docs], settings=s)
    yield s.with_paths([docs])


def test_an_exact_cjk_term_ranks_its_own_document_first(settings: Settings) -> None:
    with Client(settings=settings) as client:
        for term, doc in (("扁豆汤", "汤.md"), ("灯台", "灯台.md"), ("서울", "서울.md")):
            hit = client.retrieve(term, k=3).results[0]
            assert hit.doc_id == f"docs:{doc}" and hit.ranks["lexical"] == 1, term


@pytest.mark.parametrize(
    ("question", "said", "doc", "language"),
    [
        ("扁豆汤是用什么炖成的？", "番茄", "汤.md", "zh"),
        ("岬の灯台が初めて点灯されたのはいつですか？", "千八百七十四年", "灯台.md", "ja"),
    ],
)
def test_a_cjk_question_is_answered_from_its_sentence_on_signals_that_read_it(
    settings: Settings, question: str, said: str, doc: str, language: str
) -> None:
    with Client(settings=settings) as client:
        answer = client.query(question)
    assert answer.refusal is None, answer.refusal
    assert said in answer.text and "[S" in answer.text
    verdict = answer.answerability
    assert verdict is not None and verdict.decided_by == "other_language"
    assert verdict.language == language and verdict.judge == ""
    cited = {c.path.rsplit("/", 1)[-1] for c in answer.citations}
    assert cited == {doc}
    claim = answer.claims[0]
    assert claim.supported and said in claim.text
    source = next(s for s in answer.sources if s.cid == claim.support_cid)
    assert claim.support_span is not None
    start, end = claim.support_span
    assert said in source.text[start:end]  # code points, past the astral 𠮷 too
    assert source.text[start:end].endswith("。")


def test_the_cli_prints_a_cjk_answer_and_the_path_that_decided(settings: Settings) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "query", "扁豆汤是用什么炖成的？",
         "--data-dir", str(settings.data_dir)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "扁豆汤是用扁豆和番茄慢慢炖成的" in done.stdout and "汤.md" in done.stdout
    assert "read as zh (other_language)" in done.stdout


def test_a_question_whose_document_is_gone_is_refused(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in FILES.items():
        if name != "灯台.md":
            (docs / name).write_text(text, encoding="utf-8")
    s = Settings(data_dir=tmp_path / "data", embedder="static", query={"log_queries": False})
    api.sync([docs], settings=s)
    with Client(settings=s.with_paths([docs])) as client:
        gone = client.query("岬の灯台が初めて点灯されたのはいつですか？")
        there = client.query("扁豆汤是用什么炖成的？")
    assert gone.refusal is not None and gone.refusal.reason == "not_answerable"
    assert there.refusal is None and "番茄" in there.text


def test_with_the_multilingual_preset_an_exact_term_leads_both_legs(tmp_path: Path) -> None:
    """The probe's case: a Chinese exact term ranks its own document first on the lexical
    leg and on the dense leg, among English and Japanese documents."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in FILES.items():
        (docs / name).write_text(text, encoding="utf-8")
    s = Settings(
        data_dir=tmp_path / "data", embedder="multilingual-e5-small", query={"log_queries": False}
    )
    api.sync([docs], settings=s)
    with Client(settings=s.with_paths([docs])) as client:
        for term, doc in (("扁豆汤", "汤.md"), ("灯台", "灯台.md"), ("서울", "서울.md")):
            hit = client.retrieve(term, k=3).results[0]
            assert hit.doc_id == f"docs:{doc}", term
            assert hit.ranks == {"lexical": 1, "dense": 1}, (term, hit.ranks)


def test_an_english_question_still_reads_the_trained_models(settings: Settings) -> None:
    with Client(settings=settings) as client:
        answer = client.query("How fast does pump P-7 run?")
    assert answer.refusal is None and "40 litres per second" in answer.text
    assert answer.answerability is not None
    assert answer.answerability.decided_by == "decision"
    assert answer.answerability.language == "en" and answer.answerability.judge


def test_a_long_chinese_paragraph_is_cut_at_sentence_ends_within_the_model(
    settings: Settings,
) -> None:
    with open_runtime(settings) as rt:
        chunks = sorted(rt.vectors.live_chunks("docs:长城.md"), key=lambda c: c.ordinal)
    embedder = load_embedder(settings.embedder)
    sizes = embedder.count_tokens([c.text for c in chunks])
    assert len(chunks) > 1 and max(sizes) <= settings.chunk.max_tokens
    assert all(c.text.endswith("。") for c in chunks)
    body = "".join(c.text for c in chunks).removeprefix("长城").lstrip()
    assert body == LONG  # no space put between sentences
