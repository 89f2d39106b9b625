"""The cosine scale: a monotone map from one embedder's cosines onto another's, measured on
pairs of texts drawn from the index's own chunks."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.core.models import IndexedChunk
from ragstream.operators.cosine_scale import (
    MIN_CHUNKS,
    SAMPLE_CHUNKS,
    CosineScale,
    calibration_pairs,
    measure_scale,
    pseudo_questions,
    quantile_knots,
)
from ragstream.operators.embed import load_embedder

cosines = st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=2, max_size=200)


@settings(max_examples=200, deadline=None)
@given(cosines, st.data())
def test_the_map_is_monotone_and_passes_the_same_share_of_pairs(live: list[float], data) -> None:
    reference = data.draw(st.lists(st.floats(-1.0, 1.0), min_size=len(live), max_size=len(live)))
    knots = quantile_knots(live, reference)
    xs, ys = zip(*knots, strict=True)
    assert list(xs) == sorted(set(xs)) and list(ys) == sorted(ys)  # strictly / weakly rising
    scale = CosineScale("live", "ref", knots)
    read = [scale.read(c) for c in sorted(live)]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(read))  # float noise aside
    assert min(reference) - 1e-6 <= min(read) and max(read) <= max(reference) + 1e-6


def test_a_shifted_and_squeezed_scale_is_undone() -> None:
    rng = np.random.default_rng(0)
    reference = rng.uniform(-0.1, 0.9, 2000)
    live = 0.7 + 0.3 * reference  # an e5-like model: everything high, little spread
    scale = CosineScale("e5", "minilm", quantile_knots(live.tolist(), reference.tolist()))
    for c in (0.0, 0.25, 0.5, 0.8):
        assert abs(scale.read(0.7 + 0.3 * c) - c) < 0.03


def test_the_identity_reads_every_cosine_as_it_is() -> None:
    scale = CosineScale("m", "m")
    assert scale.identity and scale.read(0.123) == 0.123
    assert CosineScale.from_json(scale.to_json()) == scale


def chunk(doc: str, n: int, text: str) -> IndexedChunk:
    return IndexedChunk(
        point_id=f"{doc}-{n}",
        doc_id=doc,
        source="s",
        path=f"{doc}.md",
        file_type="md",
        ordinal=n,
        content_hash=f"h{doc}{n}",
        text=text,
        char_start=0,
        char_end=len(text),
    )


TEXTS = {
    "pumps": "The pump station P-7 runs at forty litres per second. Its impeller is bronze.",
    "birds": "The common kestrel hovers over open fields while hunting voles and mice.",
    "trains": "Night trains leave the central station at eleven and reach the coast by dawn.",
}


def corpus(per_doc: int) -> list[IndexedChunk]:
    return [
        chunk(doc, n, f"{text} Paragraph {n} adds detail number {n}.")
        for doc, text in TEXTS.items()
        for n in range(per_doc)
    ]


def test_pairs_read_each_pseudo_question_against_its_chunk_its_document_and_others() -> None:
    chunks = corpus(4)
    pairs = calibration_pairs(chunks, seed=3)
    assert pairs == calibration_pairs(list(reversed(chunks)), seed=3)  # the order is not read
    assert len(pairs.passages) == len(chunks) <= SAMPLE_CHUNKS
    firsts: dict[int, int] = {}
    for q, p in pairs.pairs:
        firsts.setdefault(q, p)
    assert len(firsts) == len(pairs.questions) > len(chunks)
    for q, p in firsts.items():  # a question's first pair is its own chunk
        words = pairs.questions[q].split()
        assert all(w in pairs.passages[p] for w in words)
    assert calibration_pairs(corpus(1)[:1]).pairs == []  # one document: nothing to contrast


def test_pseudo_questions_need_words() -> None:
    assert pseudo_questions("") == []
    assert pseudo_questions("42 17 99.") == ["42 17 99."]


def test_a_scale_between_two_shipped_models_is_measured_and_one_model_is_its_own_identity() -> None:
    static, minilm = load_embedder("static"), load_embedder("minilm-l6")
    chunks = corpus(4)
    assert len(chunks) >= MIN_CHUNKS
    scale = measure_scale(static, minilm, chunks, live_count=len(chunks))
    assert not scale.identity and scale.pairs > len(chunks)
    assert (scale.embedder, scale.reference) == (static.version.slug, minilm.version.slug)
    assert measure_scale(minilm, minilm, chunks, live_count=12).identity
    assert measure_scale(static, minilm, chunks[: MIN_CHUNKS - 1], live_count=7).identity
