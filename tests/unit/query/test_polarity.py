"""The polarity rule (query/polarity.py): a claim that copies its source with the meaning
flipped is a contradiction; a copy, a paraphrase or a shortened copy is not.

Property tests on the pure function, plus the rule on real sentences of a shared document
(negated by `eval.negate`, the same rules the judge trains on, and by a prefix it never
saw). The held-out SciFact figures are bench/negation.py's.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.eval.negate import negate
from ragstream.query.polarity import contradicts, words
from ragstream.query.verify import sentence_spans

WORD = st.sampled_from(
    words(
        "cells protein mice the a of in expression growth tumour levels signalling was were is "
        "increased reduced not no higher lower stable unstable required dispensable patients"
    )
)
SENTENCE = st.lists(WORD, min_size=3, max_size=25).map(" ".join)


@given(SENTENCE)
@settings(max_examples=300, deadline=None)
def test_a_sentence_never_contradicts_itself(sentence: str) -> None:
    assert not contradicts(sentence, sentence)


@given(SENTENCE)
@settings(max_examples=300, deadline=None)
def test_one_negation_flips_and_two_cancel(sentence: str) -> None:
    once = f"It is false that {sentence}"
    assert contradicts(sentence, once)
    assert not contradicts(sentence, f"It is false that {once}")
    assert contradicts(once, sentence)  # symmetric: taking a negation out flips too


@given(SENTENCE, st.lists(WORD, min_size=1, max_size=4).map(" ".join))
@settings(max_examples=300, deadline=None)
def test_a_dropped_clause_is_not_a_flip(sentence: str, clause: str) -> None:
    """Leaving out a clause that has a negation in it keeps the claim's meaning."""
    span = f"{sentence}, but the change did not alter {clause} in patients"
    assert not contradicts(span, sentence)


def test_opposites_flip_and_synonyms_do_not() -> None:
    span = "Aspirin reduces the risk of stroke in older adults."
    assert contradicts(span, "Aspirin increases the risk of stroke in older adults.")
    assert contradicts(span, "Aspirin doesn't reduce the risk of stroke in older adults.")
    assert contradicts(span, "Aspirin fails to reduce the risk of stroke in older adults.")
    assert not contradicts(span, "Aspirin lowers the risk of stroke in older adults.")
    assert not contradicts(span, "Aspirin reduces the risk of stroke.")
    assert not contradicts(span, "Statins are safe.")  # not a copy at all
    assert contradicts(
        "The kinase is required for growth.", "The kinase is dispensable for growth."
    )
    assert contradicts("The effect was significant.", "The effect was insignificant.")
    assert not contradicts("X was not effective.", "X was ineffective.")  # same meaning
    assert contradicts("Drug A is not effective.", "It is not true that drug A is ineffective.")
    assert contradicts("More stable links need cyclin A.", "Less stable links need cyclin A.")


def test_words_spell_out_contractions() -> None:
    assert words("It doesn't; they can't.") == ["it", "does", "not", "they", "can", "not"]


@pytest.fixture(scope="module")
def sentences(shared_docs: Path) -> list[str]:
    text = (shared_docs / "md" / "docling_concepts_chunking.md").read_text(encoding="utf-8")
    out = [" ".join(text[a:b].split()) for a, b in sentence_spans(text)]
    return [s for s in out if len(s.split()) >= 6][:40]


def test_real_negations_are_caught_and_real_copies_kept(sentences: list[str]) -> None:
    assert len(sentences) >= 20
    assert all(contradicts(s, negate(s)) for s in sentences), [
        (s, negate(s)) for s in sentences if not contradicts(s, negate(s))
    ]
    assert not any(contradicts(s, s) for s in sentences)
    assert not any(contradicts(a, b) for a, b in itertools.pairwise(sentences))
