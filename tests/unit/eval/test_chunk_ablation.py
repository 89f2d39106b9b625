"""The chunking ablation's own logic (bench/chunk_ablation.py): config specs, the choice of
the best config under the edit budget, and the table. The measuring itself is the real
harness (`evaluate_dataset`) and bench/incremental.py, exercised by running the bench."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bench.chunk_ablation import (
    MAX_RATIO,
    ROW_NAMES,
    ConfigResult,
    effective_chunk,
    markdown_ablation,
    parse_spec,
    pick_best,
)
from ragstream.core.models import EmbedderVersion
from ragstream.core.settings import ChunkSettings
from ragstream.eval.evaluation import Row
from ragstream.operators.embed import Embedder


def _result(name: str, rrf: float, re_embedded: int, changed: int = 50) -> ConfigResult:
    rows = [
        Row.model_validate(
            {
                "name": n,
                "ndcg@10": rrf if n == "hybrid-rrf" else rrf - 0.01 * (i + 1),
                "recall@10": 0.8,
                "recall@100": 0.95,
                "mrr@10": 0.6,
                "p50_ms": 1.0,
                "p95_ms": 2.0,
            }
        )
        for i, n in enumerate(ROW_NAMES)
    ]
    return ConfigResult(
        name=name,
        chunk=ChunkSettings(),
        split="train",
        queries=809,
        docs=100,
        chunks=250,
        index_s=1.0,
        rows=rows,
        edits=changed,
        changed=changed,
        re_embedded=re_embedded,
    )


def test_parse_spec_builds_validated_chunk_settings() -> None:
    name, chunk = parse_spec("min128=256/128/8")
    assert name == "min128"
    assert (chunk.max_tokens, chunk.min_tokens, chunk.boundary_modulus) == (256, 128, 8)
    for bad in ("min128", "a/b=256/128/8", "x=256/128"):
        with pytest.raises(ValueError, match="NAME=MAX_TOKENS"):
            parse_spec(bad)
    with pytest.raises(ValidationError):  # ChunkSettings' own bounds still apply
        parse_spec("tiny=8/0/1")


def test_pick_best_skips_configs_whose_edits_are_expensive() -> None:
    cheap, better_but_costly, worse = (
        _result("cheap", 0.70, 54),
        _result("costly", 0.75, 80),
        _result("worse", 0.69, 50),
    )
    assert better_but_costly.ratio > MAX_RATIO >= cheap.ratio
    assert pick_best([worse, better_but_costly, cheap]) is cheap
    assert pick_best([worse, better_but_costly], max_ratio=2.0) is better_but_costly
    with pytest.raises(ValueError, match="re-embed ratio"):
        pick_best([better_but_costly])


def test_markdown_ablation_has_one_line_per_config_with_its_figures() -> None:
    results = [_result("a", 0.7123, 54), _result("b", 0.6987, 50)]
    lines = markdown_ablation(results).splitlines()
    assert len(lines) == 2 + len(results)
    header = lines[0].split("|")
    assert all(f"{n} nDCG@10" in lines[0] for n in ROW_NAMES)
    for line, r in zip(lines[2:], results, strict=True):
        cells = [c.strip() for c in line.split("|")]
        assert len(cells) == len(header)
        assert cells[1] == r.name
        assert f"{r.row('hybrid-rrf').ndcg_10:.4f}" in cells
        assert f"{r.ratio:.3f} ({r.re_embedded}/{r.changed})" in cells
        assert f"{r.chunks / r.docs:.2f}" in cells


def test_effective_chunk_shows_the_caps_that_make_two_configs_chunk_alike() -> None:
    # only the sequence length matters to the caps; the model itself is never called
    embedder = Embedder(
        EmbedderVersion(name="seq-128", fingerprint="0", dimension=4),
        max_seq_length=128,
        tokenizer_name="seq-128",
        _count=lambda texts: [len(t.split()) for t in texts],
        _encode=lambda texts, batch: [],
    )
    big = effective_chunk(
        ChunkSettings(max_tokens=256, min_tokens=100, boundary_modulus=8, header_tokens=0),
        embedder,
    )
    huge = effective_chunk(
        ChunkSettings(max_tokens=512, min_tokens=90, boundary_modulus=8, header_tokens=0),
        embedder,
    )
    assert big == huge
    assert (big.max_tokens, big.min_tokens, big.boundary_modulus) == (126, 63, 8)
    small = ChunkSettings(max_tokens=100, min_tokens=20, boundary_modulus=4, header_tokens=0)
    assert effective_chunk(small, embedder) == small
    # the contextual header's tokens come out of the text budget
    headed = effective_chunk(ChunkSettings(max_tokens=256, min_tokens=100), embedder)
    assert headed.header_tokens == 32
    assert (headed.max_tokens, headed.min_tokens) == (126 - 32, (126 - 32) // 2)
