"""The language object and the script-aware analyzer's pure parts: CJK runs, bigrams, word
units, sentence ends and detection, as properties and on the shared Chinese and Japanese
sets (../shared/data/cjk)."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.language import (
    CJK_CHARS,
    bigrams,
    cjk_runs,
    cjk_sentence_ends,
    detect,
    join_spans,
    language_of,
    word_spans,
)

CJK_DATA = Path(__file__).parents[4] / "shared" / "data" / "cjk"
HAN = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
KANA = st.characters(min_codepoint=0x3041, max_codepoint=0x30FA)
LATIN = st.sampled_from("abcdefghij KLMNOP 0123 .,!?-")
MIXED = st.text(st.one_of(HAN, KANA, LATIN, st.sampled_from(" \n\t。！？」、")), max_size=80)


@given(MIXED)
def test_cjk_runs_cover_the_text_in_order(text: str) -> None:
    pieces = list(cjk_runs(text))
    assert "".join(p for p, _ in pieces) == text
    for piece, cjk in pieces:
        assert all(bool(re.match(f"[{CJK_CHARS}]", c)) == cjk for c in piece)
    assert all(a[1] != b[1] for a, b in pairwise(pieces))


@given(st.text(st.one_of(HAN, KANA), min_size=1, max_size=40))
def test_bigrams_overlap_and_rebuild_the_run(run: str) -> None:
    grams = bigrams(run)
    assert len(grams) == max(1, len(run) - 1)
    assert grams[0][0] + "".join(g[-1] for g in grams) == run or run == grams[0]


@given(st.text(st.one_of(LATIN, st.sampled_from(" \n")), max_size=60))
def test_spaced_text_keeps_its_words_and_single_spaces(text: str) -> None:
    spans = word_spans(text)
    assert [text[s:e] for s, e in spans] == text.split()
    assert join_spans(text, spans) == " ".join(text.split())


@given(MIXED)
def test_each_cjk_character_is_one_unit_and_nothing_is_lost(text: str) -> None:
    spans = word_spans(text)
    assert "".join(text[s:e] for s, e in spans) == "".join(text.split())
    for s, e in spans:
        piece = text[s:e]
        assert len(piece) == 1 or not re.search(f"[{CJK_CHARS}]", piece)


def test_sentence_ends_need_no_space_and_keep_their_closing_quotes() -> None:
    text = "「東京は首都です。」人口は多い！本当？ Yes."
    ends = cjk_sentence_ends(text)
    assert [text[:i] for i in ends] == [
        "「東京は首都です。」",
        "「東京は首都です。」人口は多い！",
        "「東京は首都です。」人口は多い！本当？",
    ]
    assert cjk_sentence_ends("只有一句。") == []  # the text's own end is no cut


def _contexts(name: str, n: int) -> list[str]:
    raw = json.loads((CJK_DATA / name).read_text(encoding="utf-8"))
    texts = [p["context"] for a in raw["data"] for p in a["paragraphs"]]
    questions = [q["question"] for a in raw["data"] for p in a["paragraphs"] for q in p["qas"]]
    return texts[:n] + questions[: 4 * n]


def test_detect_reads_the_shared_chinese_and_japanese_sets() -> None:
    zh = [detect(t).code for t in _contexts("cmrc2018_dev.json", 100)]
    ja = [detect(t).code for t in _contexts("jsquad_valid-v1.3.json", 100)]
    assert zh.count("zh") / len(zh) >= 0.99, [t for t in zh if t != "zh"]
    assert ja.count("ja") / len(ja) >= 0.97, [t for t in ja if t != "ja"]


def test_trained_models_read_english_only_and_a_setting_wins() -> None:
    english = "Which keepers lived on the rock, and when was the lamp first lit?"
    assert detect(english).trained_models
    others = [
        "扁豆汤是什么？",
        "灯台はいつ点灯されたか",
        "등대는 언제 켜졌나요?",
        "Quand le phare a-t-il été allumé pour la première fois ?",
    ]
    assert not any(detect(t).trained_models for t in others)
    assert language_of("de-CH", english).code == "de" and language_of(None, english).code == "en"
    assert language_of("xx", english).code == "und"
