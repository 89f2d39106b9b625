"""The evidence-coverage answerability judge: pure properties, and the refusal it drives."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.models import IndexedChunk
from ragstream.query.answerable import (
    Asked,
    Limits,
    coverage,
    idf,
    judge,
    named_terms,
    reading_language,
    unmentioned,
)


def chunk(text: str, title: str = "") -> IndexedChunk:
    return IndexedChunk(
        point_id=text[:8], doc_id="d", source="s", path="d.md", file_type="md", title=title,
        ordinal=0, content_hash="h", text=text, char_start=0, char_end=len(text),
    )  # fmt: skip


def corpus_freqs(texts: Sequence[str]):  # type: ignore[no-untyped-def]
    """doc_freqs over an in-memory corpus, analyzed like the lexical index."""
    from ragstream.connectors.lexical import tokenize

    docs = [set(tokenize(t)) for t in texts]

    def doc_freqs(terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        return len(docs), {t: sum(t in d for d in docs) for t in set(terms)}

    return doc_freqs


CORPUS = [
    "Liquidity and capital resources of the group remained strong in 2023.",
    "The hybrid chunker splits documents into chunks that respect the tokenizer's limit.",
    "Docling converts PDF, DOCX and HTML documents into a unified document model.",
]


@given(st.integers(1, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))
def test_idf_is_positive_and_falls_as_terms_get_common(n: int, a: int, b: int) -> None:
    a, b = min(a, n), min(b, n)
    assert idf(n, a) > 0 and idf(n, b) > 0
    if a < b:
        assert idf(n, a) > idf(n, b)


@given(
    st.dictionaries(st.text(min_size=1, max_size=5), st.floats(0.01, 10), max_size=8),
    st.sets(st.text(min_size=1, max_size=5), max_size=8),
)
def test_coverage_is_a_share(weights: dict[str, float], terms: set[str]) -> None:
    share = coverage(weights, terms)
    assert 0.0 <= share <= 1.0
    assert coverage(weights, set(weights)) == 1.0
    if weights:
        assert coverage(weights, set()) == 0.0


def test_a_question_about_something_absent_is_not_answerable() -> None:
    chunks = [chunk(t) for t in CORPUS]
    verdict, _ = judge(
        Asked("What is the capital of Mongolia?", chunks, corpus_freqs(CORPUS)), Limits(0.5)
    )
    assert not verdict.answerable and verdict.score < 0.5
    assert verdict.signals["unseen_term_share"] > 0.5  # "mongolia" is nowhere in the index


def test_a_question_the_evidence_covers_is_answerable() -> None:
    chunks = [chunk(t) for t in CORPUS]
    verdict, _ = judge(
        Asked("What does the hybrid chunker do?", chunks, corpus_freqs(CORPUS)), Limits(0.5)
    )
    assert verdict.answerable and verdict.score == 1.0
    # coverage is per chunk: terms spread over different chunks do not add up
    spread, _ = judge(Asked("hybrid chunker for PDF", chunks, corpus_freqs(CORPUS)), Limits(0.0))
    assert spread.signals["coverage_union"] == 1.0 > spread.score


def test_the_title_and_section_count_as_what_a_chunk_says() -> None:
    titled = [chunk("It keeps every row of the table.", title="Table structure recognition")]
    texts = ["Table structure recognition. It keeps every row of the table."]
    verdict, _ = judge(
        Asked("table structure recognition", titled, corpus_freqs(texts)), Limits(0.9)
    )
    assert verdict.answerable


def test_a_close_match_in_meaning_is_answerable_whatever_the_words() -> None:
    """Asked in other words than the document uses: low coverage, high dense similarity."""
    texts = ["Green tea is steeped at 80 degrees for two minutes."]
    chunks = [chunk(texts[0])]
    question = "How hot should green tea water be?"
    lexical_only, _ = judge(Asked(question, chunks, corpus_freqs(texts)), Limits(0.5))
    assert not lexical_only.answerable and lexical_only.score < 0.5
    close, _ = judge(Asked(question, chunks, corpus_freqs(texts), 0.62), Limits(0.5, 0.5))
    assert close.answerable and close.signals["dense_best"] == 0.62
    far, _ = judge(Asked(question, chunks, corpus_freqs(texts), 0.3), Limits(0.5, 0.5))
    assert not far.answerable


CURRENCY = [
    "The functional currency for the subsidiary is the Euro.",
    "Gains and losses on foreign currency transactions are reported in other income.",
]


def test_the_names_a_question_asks_about_and_the_ones_the_text_never_mentions() -> None:
    """Near in every word but the one that matters: the currency text never names Japan."""
    chunks = [chunk(t) for t in CURRENCY]
    freqs = corpus_freqs([*CURRENCY, "Offices in Japan and Switzerland."])
    question = "What is the currency of Japan?"
    assert named_terms(question) == unmentioned(question, chunks) == ["japan"]
    verdict, _ = judge(Asked(question, chunks, freqs, dense_best=0.9), Limits(dense_floor=0.5))
    assert verdict.answerable and verdict.signals["named_coverage"] == 0.0  # recorded only
    named = [*chunks, chunk("The yen.", title="Japan")]  # a title counts
    assert unmentioned(question, named) == []
    verdict, _ = judge(Asked(question, named, freqs, 0.9), Limits(0.0, 0.5))
    assert verdict.signals["named_coverage"] == 1.0
    assert named_terms("what is a functional currency?") == []


@given(st.text(max_size=80))
def test_named_terms_are_among_the_question_terms(question: str) -> None:
    from ragstream.query.answerable import question_terms

    assert set(named_terms(question)) <= set(question_terms(question))


class _Reads:
    """An answer judge that says every sentence holds the answer (it must not be asked)."""

    version = "reads-everything"

    def __init__(self) -> None:
        self.asked = 0

    def holds(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.asked += len(pairs)
        return [1.0] * len(pairs)


def test_another_language_is_read_on_coverage_and_never_by_the_english_judge() -> None:
    texts = ["扁豆汤是用扁豆和番茄慢慢炖成的。", "豆腐是一种用大豆做成的食品。"]
    chunks = [chunk(t) for t in texts]
    scorer = _Reads()
    for question, answered in (("扁豆汤是用什么炖成的？", True), ("长城有多长？", False)):
        asked = Asked(
            question, chunks, corpus_freqs(texts), language=reading_language(question, chunks)
        )
        verdict, evidence = judge(asked, Limits(), scorer)
        assert verdict.decided_by == "other_language" and verdict.language == "zh"
        assert verdict.answerable is answered and verdict.judge == ""
        assert not answered or texts[0] in chunks[evidence[0].chunk].text[evidence[0].start :]
    assert scorer.asked == 0


def test_a_sources_language_wins_over_detection_for_its_chunks() -> None:
    german = chunk("Edison: Glühbirne, 1879.")  # too short to tell
    assert reading_language("When was it invented?", [german]).code == "en"
    assert reading_language("When was it invented?", [german], {"s": "de"}).code == "de"
    assert reading_language("When was it invented?", [german], {"other": "de"}).code == "en"
