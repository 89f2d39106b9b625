"""Structure-aware, token-bounded, edit-stable chunking (DESIGN §2).

Boundaries come from document structure and from the *content* of the units, never from
absolute offsets. A group is closed after a unit when the group has reached `min_tokens`
and the unit is either big (>= min_tokens) or "content-selected" (its hash modulo
`boundary_modulus` is 0), and always before a heading or before the budget would overflow.
Whether a cut happens after a unit depends only on that unit and the group in progress, so
an edit changes at most the group(s) between the nearest unchanged cut points on either
side — usually one chunk — instead of shifting every later boundary.

The same grouping runs at two levels: blocks within a document, then sentences within a
block too large for one chunk; a single over-long sentence is cut into token windows.

>>> groups = group_units(["a b", "c d e", "f"], [2, 3, 1], max_tokens=5, min_tokens=2,
...                      modulus=1, cut_before=frozenset())
>>> groups
[[0], [1], [2]]
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import xxhash

from core.ids import config_key, content_hash, point_id
from core.models import Block, Chunk, ParsedDocument

TokenCounter = Callable[[Sequence[str]], list[int]]
CHUNKER_VERSION = "ragstream-chunker-1"
BLOCK_SEPARATOR = "\n\n"
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+(?=[\"'(\[A-Z0-9])")


@dataclass(frozen=True)
class ChunkerConfig:
    """Everything that changes chunk text; all of it is in `key` (and so in every hash)."""

    max_tokens: int
    min_tokens: int
    boundary_modulus: int
    tokenizer: str

    @property
    def key(self) -> str:
        return config_key(
            CHUNKER_VERSION, self.max_tokens, self.min_tokens, self.boundary_modulus, self.tokenizer
        )


def _content_selected(text: str, modulus: int) -> bool:
    return xxhash.xxh32_intdigest(text.encode()) % modulus == 0


def group_units(
    texts: Sequence[str],
    sizes: Sequence[int],
    max_tokens: int,
    min_tokens: int,
    modulus: int,
    cut_before: frozenset[int],
) -> list[list[int]]:
    """Partition unit indexes into consecutive groups of at most `max_tokens` (pure).

    Units larger than `max_tokens` come out as singleton groups (the caller splits them).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, (text, n) in enumerate(zip(texts, sizes, strict=True)):
        if current and (i in cut_before or size + n > max_tokens):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += n
        if size >= min_tokens and (n >= min_tokens or _content_selected(text, modulus)):
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def _windows(text: str, max_tokens: int, count: TokenCounter) -> list[str]:
    """Cut an over-long sentence into word windows that fit (the last resort, rare)."""
    words = text.split()
    sizes = count(words)
    out: list[str] = []
    current: list[str] = []
    size = 0
    for word, n in zip(words, sizes, strict=True):
        if current and size + n > max_tokens:
            out.append(" ".join(current))
            current, size = [], 0
        current.append(word)
        size += n
    if current:
        out.append(" ".join(current))
    return out


def _split_block(text: str, cfg: ChunkerConfig, count: TokenCounter) -> list[str]:
    """Pieces of one over-budget block: sentence groups, then word windows."""
    sentences = split_sentences(text)
    sizes = count(sentences)
    pieces: list[str] = []
    for group in group_units(
        sentences, sizes, cfg.max_tokens, cfg.min_tokens, cfg.boundary_modulus, frozenset()
    ):
        joined = " ".join(sentences[i] for i in group)
        if len(group) == 1 and sizes[group[0]] > cfg.max_tokens:
            pieces.extend(_windows(joined, cfg.max_tokens, count))
        else:
            pieces.append(joined)
    return pieces


@dataclass(frozen=True)
class _Piece:
    text: str
    block: Block
    start: int  # char offset in the document text (blocks joined by BLOCK_SEPARATOR)


def _pieces(blocks: Sequence[Block], cfg: ChunkerConfig, count: TokenCounter) -> list[list[_Piece]]:
    """Group blocks into chunk-sized lists of pieces, with each piece's document offset."""
    texts = [b.text for b in blocks]
    sizes = count(texts)
    offsets, pos = [], 0
    for text in texts:
        offsets.append(pos)
        pos += len(text) + len(BLOCK_SEPARATOR)
    headings = frozenset(i for i, b in enumerate(blocks) if b.kind == "heading")
    grouped: list[list[_Piece]] = []
    groups = group_units(
        texts, sizes, cfg.max_tokens, cfg.min_tokens, cfg.boundary_modulus, headings
    )
    for group in groups:
        if len(group) == 1 and sizes[group[0]] > cfg.max_tokens:
            i = group[0]
            cursor = 0
            for piece in _split_block(texts[i], cfg, count):
                first_word = piece.split(maxsplit=1)[0]
                found = texts[i].find(first_word, cursor)
                start = found if found >= 0 else cursor
                cursor = start + 1
                grouped.append([_Piece(piece, blocks[i], offsets[i] + start)])
        else:
            grouped.append([_Piece(texts[i], blocks[i], offsets[i]) for i in group])
    return grouped


def chunk_document(doc: ParsedDocument, cfg: ChunkerConfig, count: TokenCounter) -> list[Chunk]:
    """Chunks of a parsed document, in order, each with its deterministic point id."""
    blocks = [b for b in doc.blocks if b.text.strip()]
    chunks: list[Chunk] = []
    seen: Counter[str] = Counter()
    for ordinal, pieces in enumerate(_pieces(blocks, cfg, count)):
        separator = BLOCK_SEPARATOR if len(pieces) > 1 else ""
        text = separator.join(p.text for p in pieces)
        chash = content_hash(text, cfg.key)
        occurrence = seen[chash]
        seen[chash] += 1
        last = pieces[-1]
        body = next((p.block for p in pieces if p.block.kind != "heading"), pieces[0].block)
        chunks.append(
            Chunk(
                point_id=point_id(doc.doc_id, chash, occurrence),
                doc_id=doc.doc_id,
                ordinal=ordinal,
                occurrence=occurrence,
                content_hash=chash,
                text=text,
                section_path=body.section_path,
                page=pieces[0].block.page,
                char_start=pieces[0].start,
                char_end=last.start + len(last.text),
            )
        )
    return chunks
