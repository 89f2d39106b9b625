"""Chunker properties: token bounds, determinism, and edit stability."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.core.models import Block, FileFingerprint, ParsedDocument
from ragstream.operators.chunk import ChunkerConfig, chunk_document, embedding_text, group_units

CFG = ChunkerConfig(max_tokens=40, min_tokens=12, boundary_modulus=4, tokenizer="words")


def count_words(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def doc(paragraphs: list[str] | list[Block], doc_id: str = "src:a.md") -> ParsedDocument:
    blocks = tuple(
        p if isinstance(p, Block) else Block(kind="paragraph", text=p) for p in paragraphs
    )
    return ParsedDocument(
        doc_id=doc_id,
        source="src",
        path="/x/a.md",
        file_type="md",
        title="a",
        fingerprint=FileFingerprint(size=1, mtime_ns=1),
        blocks=blocks,
    )


def paragraph(rng: random.Random, words: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    sentences, left = [], words
    while left > 0:
        n = min(left, rng.randint(4, 12))
        body = " ".join(rng.choice(vocab) + str(rng.randint(0, 999)) for _ in range(n))
        sentences.append(body.capitalize() + ".")
        left -= n
    return " ".join(sentences)


sizes = st.lists(st.integers(min_value=1, max_value=60), min_size=0, max_size=40)


@given(sizes)
def test_groups_cover_units_in_order_and_respect_budget(unit_sizes: list[int]) -> None:
    texts = [f"u{i}" for i in range(len(unit_sizes))]
    groups = group_units(texts, unit_sizes, 40, 12, 4, frozenset())
    assert [i for g in groups for i in g] == list(range(len(unit_sizes)))
    for g in groups:
        assert len(g) == 1 or sum(unit_sizes[i] for i in g) <= 40


@settings(deadline=None, max_examples=60)
@given(st.integers(min_value=0, max_value=10_000))
def test_chunks_never_exceed_budget(seed: int) -> None:
    rng = random.Random(seed)
    paras = [paragraph(rng, rng.choice([3, 8, 20, 35, 90])) for _ in range(rng.randint(1, 15))]
    chunks = chunk_document(doc(paras), CFG, count_words)
    assert chunks, "a non-empty document yields chunks"
    for c in chunks:
        assert len(c.text.split()) <= CFG.max_tokens
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert len({c.point_id for c in chunks}) == len(chunks)


def test_char_spans_point_into_the_document_text() -> None:
    rng = random.Random(7)
    paras = [paragraph(rng, n) for n in (10, 30, 5, 80, 12)]
    full = "\n\n".join(paras)
    for c in chunk_document(doc(paras), CFG, count_words):
        assert full[c.char_start : c.char_end].split()[:3] == c.text.split()[:3]


@settings(deadline=None, max_examples=60)
@given(st.integers(min_value=0, max_value=10_000))
def test_local_edit_changes_at_most_two_chunks(seed: int) -> None:
    """Edit one paragraph or insert one: the other chunks keep their point ids."""
    rng = random.Random(seed)
    paras = [paragraph(rng, rng.randint(12, 38)) for _ in range(rng.randint(4, 20))]
    before = {c.point_id for c in chunk_document(doc(paras), CFG, count_words)}
    edited = list(paras)
    i = rng.randrange(len(paras))
    if rng.random() < 0.5:
        edited[i] = paragraph(rng, rng.randint(12, 38))
    else:
        edited.insert(i, paragraph(rng, rng.randint(12, 38)))
    after = [c.point_id for c in chunk_document(doc(edited), CFG, count_words)]
    new = [p for p in after if p not in before]
    assert len(new) <= 2


def test_chunker_settings_are_in_the_hash() -> None:
    paras = ["One short paragraph about things."]
    a = chunk_document(doc(paras), CFG, count_words)[0]
    other = ChunkerConfig(max_tokens=41, min_tokens=12, boundary_modulus=4, tokenizer="words")
    b = chunk_document(doc(paras), other, count_words)[0]
    assert a.text == b.text and a.content_hash != b.content_hash


def test_same_text_in_two_docs_has_same_hash_different_point() -> None:
    paras = ["Shared paragraph text that moves between files."]
    a = chunk_document(doc(paras, "src:a.md"), CFG, count_words)[0]
    b = chunk_document(doc(paras, "src:b.md"), CFG, count_words)[0]
    assert a.content_hash == b.content_hash and a.point_id != b.point_id


def test_headings_start_a_new_chunk() -> None:
    blocks = [
        Block(kind="paragraph", text="intro words here"),
        Block(kind="heading", text="Section", section_path=("Section",)),
        Block(kind="paragraph", text="body words", section_path=("Section",)),
    ]
    chunks = chunk_document(doc(blocks), CFG, count_words)
    assert [c.text for c in chunks] == ["intro words here", "Section\n\nbody words"]
    assert chunks[1].section_path == ("Section",)


HEADED = ChunkerConfig(
    max_tokens=40, min_tokens=12, boundary_modulus=4, tokenizer="words", header_tokens=6
)


def _sectioned(title: str, heading: str) -> ParsedDocument:
    rng = random.Random(3)
    blocks = [
        Block(kind="heading", text=heading, section_path=(heading,)),
        *(
            Block(kind="paragraph", text=paragraph(rng, 30), section_path=(heading,))
            for _ in range(4)
        ),
    ]
    return doc(blocks).model_copy(update={"title": title})


def test_header_is_the_heading_path_not_in_the_cited_text() -> None:
    chunks = chunk_document(_sectioned("Report", "Methods"), HEADED, count_words)
    assert len(chunks) > 2
    first, rest = chunks[0], chunks[1:]
    assert first.text.startswith("Methods") and first.context == ""  # no repeat
    for c in rest:
        assert c.context == "Methods"  # headings only: the title may be a file name
        assert "Methods" not in c.text
    plain = chunk_document(_sectioned("Report", "Methods"), CFG, count_words)
    assert all(c.context == "" for c in plain)


def test_header_is_in_the_hash_so_a_heading_edit_changes_every_point_under_it() -> None:
    before = chunk_document(_sectioned("Report", "Methods"), HEADED, count_words)
    after = chunk_document(_sectioned("Report", "Approach"), HEADED, count_words)
    assert [c.text for c in before[1:]] == [c.text for c in after[1:]]  # same cited text
    assert not {c.content_hash for c in before} & {c.content_hash for c in after}
    # a retitle (or a rename, for a file titled by its name) changes no point
    retitled = chunk_document(_sectioned("Final report", "Methods"), HEADED, count_words)
    assert [c.point_id for c in retitled] == [c.point_id for c in before]
    # without a header only the chunk holding the heading changes
    plain_before = chunk_document(_sectioned("Report", "Methods"), CFG, count_words)
    plain_after = chunk_document(_sectioned("Report", "Approach"), CFG, count_words)
    same = {c.point_id for c in plain_before} & {c.point_id for c in plain_after}
    assert len(same) == len(plain_before) - 1


def test_header_respects_its_budget_and_header_plus_text_fits() -> None:
    long_heading = " ".join(f"word{i}" for i in range(30))
    chunks = chunk_document(_sectioned("Report", long_heading), HEADED, count_words)
    for c in chunks:
        assert len(c.context.split()) <= HEADED.header_tokens
        assert len(embedding_text(c.context, c.text).split()) <= (
            HEADED.max_tokens + HEADED.header_tokens
        )
    assert chunks[1].context.startswith("word0 word1")


kinds = st.sampled_from(
    ["heading", "paragraph", "list_item", "table_row", "code", "caption", "link"]
)


@given(st.lists(st.tuples(kinds, st.integers(1, 90)), min_size=1, max_size=12), st.integers(0, 99))
@settings(max_examples=60, deadline=None)
def test_each_chunk_records_where_its_no_prose_blocks_are(
    blocks: list[tuple[str, int]], seed: int
) -> None:
    rng = random.Random(seed)
    parsed = doc([Block(kind=kind, text=paragraph(rng, words)) for kind, words in blocks])  # type: ignore[arg-type]
    labelled = {b.text: b.kind for b in parsed.blocks}
    for chunk in chunk_document(parsed, CFG, count_words):
        for start, end, kind in chunk.non_prose:
            assert kind in {"heading", "caption", "table_row", "link"}
            piece = chunk.text[start:end]  # a whole block, or the part of a split one here
            assert any(piece in text and labelled[text] == kind for text in labelled), piece
        prose = [
            t for t, k in labelled.items() if k not in {"heading", "caption", "table_row", "link"}
        ]
        for text in prose:  # a prose block in the chunk lies in no recorded span
            at = chunk.text.find(text)
            if at >= 0:
                assert not any(s < at + len(text) and at < e for s, e, _ in chunk.non_prose)
