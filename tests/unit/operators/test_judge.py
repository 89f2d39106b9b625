"""The trained support judge: the shipped artifact, what it reads, and how verification
uses it (entailment-checked claims). The answer judge, which answerability and the
extractive answer read, is tests/unit/operators/test_answer_judge.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xxhash

from ragstream.core.errors import ModelUnavailableError
from ragstream.eval.negate import negate
from ragstream.operators.judge import BUNDLED, SupportJudge, bundled_judge, load_judge
from ragstream.query.answerable import candidate_sentences
from tests.unit.query.test_answerable import chunk

# Statements from outside SciFact (the judge trained on SciFact train claims only).
FACTS = [
    "The hybrid chunker splits chunks that exceed the tokenizer's token limit.",
    "Python lists are mutable, while tuples are immutable.",
    "The company's revenue increased by 12 percent in 2023.",
    "Docling converts PDF documents into a unified document representation.",
    "Regular exercise reduces the risk of cardiovascular disease.",
    "The observatory was closed to visitors during the winter months.",
]
UNRELATED = "The recipe calls for two cups of flour and a pinch of salt."


@pytest.fixture(scope="module")
def judge_model() -> SupportJudge:
    return bundled_judge()


def test_the_shipped_artifact_is_small_versioned_and_from_train_data() -> None:
    meta = json.loads((BUNDLED / "judge.json").read_text())
    model = (BUNDLED / "model.onnx").read_bytes()
    assert meta["version"] == "judge-" + xxhash.xxh64(model).hexdigest()[:12]
    assert len(model) < 40 * 2**20  # tens of MB at most
    assert meta["labels"] == ["unrelated", "supports", "contradicts"]
    assert "train only" in meta["data"]["split"] and meta["command"] == "make judge"
    assert meta["training"]["config"]["seed"] == 13


def test_probabilities_are_one_distribution_per_pair(judge_model: SupportJudge) -> None:
    probs = judge_model.probabilities([(f, f) for f in FACTS] + [("x", "y")])
    assert probs.shape == (len(FACTS) + 1, 3)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    assert judge_model.probabilities([]).shape == (0, 3)


def test_a_negated_sentence_reads_as_contradicting_it(judge_model: SupportJudge) -> None:
    negated = judge_model.probabilities([(f, negate(f)) for f in FACTS])
    # out of domain (the held-out SciFact figure is bench/negation.py): most, not all
    assert (negated[:, 2] > negated[:, 1]).sum() >= len(FACTS) - 2, negated


def test_unrelated_text_neither_supports_nor_answers(judge_model: SupportJudge) -> None:
    probs = judge_model.probabilities([(UNRELATED, f) for f in FACTS])
    assert (probs[:, 0] >= 0.5).sum() >= len(FACTS) - 1, probs


def test_a_huge_pair_is_truncated_not_fatal(judge_model: SupportJudge) -> None:
    probs = judge_model.probabilities([("word " * 50_000, "question? " * 5_000)])
    assert probs.shape == (1, 3)


def test_a_missing_or_broken_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableError, match="support judge"):
        SupportJudge(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    (tmp_path / "model.onnx").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelUnavailableError):
        SupportJudge(tmp_path)


def test_a_lazy_judge_opens_its_model_on_first_use(tmp_path: Path) -> None:
    lazy = SupportJudge(BUNDLED, eager=False)
    assert not lazy.loaded and lazy.version == SupportJudge(BUNDLED).version
    probs = lazy.probabilities([(FACTS[0], FACTS[0])])
    assert lazy.loaded and probs.shape == (1, 3)
    # a model file onnxruntime cannot open: a clear error at first use, not at load
    for name in ("tokenizer.json", "judge.json"):
        (tmp_path / name).write_bytes((BUNDLED / name).read_bytes())
    (tmp_path / "model.onnx").write_bytes(b"\x00" * 64)
    broken = SupportJudge(tmp_path, eager=False)
    with pytest.raises(ModelUnavailableError, match="support judge"):
        broken.probabilities([("a", "b")])


def test_judge_specs() -> None:
    assert load_judge("none") is None and load_judge("") is None and load_judge(None) is None
    assert load_judge("bundled") is bundled_judge()
    assert isinstance(load_judge(str(BUNDLED)), SupportJudge)


def test_candidate_sentences_take_each_chunks_best_first() -> None:
    chunks = [
        chunk("Cats sleep a lot. The hybrid chunker merges small chunks. Dogs bark."),
        chunk("Nothing here is relevant at all. The chunker is hybrid by design."),
    ]
    weights = {"hybrid": 2.0, "chunker": 1.0}
    spots = candidate_sentences(weights, chunks, limit=3)
    texts = [chunks[i].text[a:b] for i, a, b in spots]
    assert texts[:2] == [
        "The hybrid chunker merges small chunks.",
        "The chunker is hybrid by design.",
    ]
    assert len(spots) == 3
    assert candidate_sentences(weights, chunks, limit=1) == spots[:1]


# --- the judge in verification --------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    from ragstream.operators.embed import load_embedder

    return load_embedder("minilm-l6")


@pytest.fixture(scope="module")
def paragraphs(shared_docs: Path) -> list[str]:
    text = (shared_docs / "md" / "docling_concepts_chunking.md").read_text(encoding="utf-8")
    return [p for p in text.split("\n\n") if len(p.split()) > 25][:6]


def test_verify_catches_a_claim_that_negates_its_source(embedder, judge_model, paragraphs) -> None:
    from ragstream.query.verify import sentence_spans, verify
    from tests.unit.query.test_generate_verify import make_context

    ctx = make_context(paragraphs, "")
    sentences = [
        " ".join(p[a:b].split()) for p in paragraphs for a, b in sentence_spans(p)
        if len(p[a:b].split()) >= 6
    ][:8]  # fmt: skip
    cid = {s: next(c.cid for c in ctx.sources if s.split()[0] in c.text) for s in sentences}
    faithful = " ".join(f"{s.rstrip('.')} [{cid[s]}]." for s in sentences)
    negated = " ".join(f"{negate(s).rstrip('.')} [{cid[s]}]." for s in sentences)
    plain = verify(negated, ctx.sources, embedder, polarity_rule=False)
    assert plain.grounding >= 0.75  # overlap alone cannot see a negation
    by_rule = verify(negated, ctx.sources, embedder)  # the polarity rule, no judge
    assert by_rule.grounding == 0.0
    # (two of the test's citations point at a chunk without the sentence: unsupported anyway)
    assert sum(c.contradicted for c in by_rule.claims) >= 0.75 * len(by_rule.claims)
    assert verify(faithful, ctx.sources, embedder).grounding >= 0.75
    kept = verify(faithful, ctx.sources, embedder, judge=judge_model)
    caught = verify(negated, ctx.sources, embedder, judge=judge_model)
    assert kept.grounding >= 0.75, [(c.text, c.entailment) for c in kept.claims]
    assert caught.grounding <= 0.25, [(c.text, c.entailment) for c in caught.claims]
    assert all(c.entailment is not None for c in caught.claims)
    assert sum(c.contradicted for c in caught.claims) >= len(caught.claims) // 2


class Reads:
    """A scripted judge (the real one is tested above): it reads as answering exactly the
    sentences that contain `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def probabilities(self, pairs):  # type: ignore[no-untyped-def]
        hit = [self.marker and self.marker in premise for premise, _ in pairs]
        return np.array([[0.1, 0.9, 0.0] if h else [1.0, 0.0, 0.0] for h in hit])


def test_verify_keeps_a_verbatim_copy_whatever_the_judge_reads(embedder, paragraphs) -> None:
    from ragstream.query.verify import sentence_spans, verify
    from tests.unit.query.test_generate_verify import make_context

    ctx = make_context(paragraphs[:1], "")
    text = ctx.sources[0].text
    a, b = sentence_spans(text)[0]
    checked = verify(f"{text[a:b].rstrip('.')} [S1].", ctx.sources, embedder, judge=Reads(""))
    assert checked.claims[0].supported and checked.claims[0].entailment == 1.0
