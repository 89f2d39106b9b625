"""Structure-aware, token-bounded, edit-stable chunking.

See docs/architecture.md, "Identity and versions".

Boundaries come from document structure and from the *content* of the units, never from
absolute offsets. A group is closed after a unit when the group has reached `min_tokens`
and the unit is either big (>= min_tokens) or "content-selected" (its hash modulo
`boundary_modulus` is 0), and always before a heading or before the budget would overflow.
Whether a cut happens after a unit depends only on that unit and the group in progress, so
an edit changes at most the group(s) between the nearest unchanged cut points on either
side — usually one chunk — instead of shifting every later boundary.

A block too large for one chunk enters the grouping as its sentences (a single over-long
sentence as token windows), so its pieces group with their neighbours like blocks do.

With `header_tokens > 0` each chunk also carries a contextual header (its heading path, at
most that many tokens) that is embedded with the chunk but never shown or cited: a chunk
from the middle of a long section rarely names its subject, and the header gives the dense
leg the topic words the chunk itself lacks. The content hash covers the embedded text
(header included), so editing a heading re-embeds the chunks under it, and the text budget
shrinks by the header budget so header + text still fit the model.

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
from itertools import pairwise
from typing import Any

import xxhash

from ragstream.core.ids import config_key, content_hash, point_id
from ragstream.core.language import (
    CJK_CHARS,
    CJK_CLOSERS,
    CJK_SENTENCE_END,
    cjk_sentence_ends,
    join_spans,
    word_spans,
)
from ragstream.core.models import NON_PROSE_KINDS, Block, Chunk, NonProse, ParsedDocument

TokenCounter = Callable[[Sequence[str]], list[int]]
CHUNKER_VERSION = "ragstream-chunker-3"
BLOCK_SEPARATOR = "\n\n"
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+(?=[\"'(\[A-Z0-9])")
_CJK_EDGE = re.compile(f"[{CJK_CHARS}{CJK_SENTENCE_END}{CJK_CLOSERS}、，：；「『（【]")


@dataclass(frozen=True)
class ChunkerConfig:
    """Everything that changes chunk text; all of it is in `key` (and so in every hash)."""

    max_tokens: int
    min_tokens: int
    boundary_modulus: int
    tokenizer: str
    header_tokens: int = 0  # 0: no contextual header; max_tokens is the text budget
    situate: str = ""  # `operators.situate.situate_identity` when on; "" = off

    @property
    def key(self) -> str:
        parts: list[object] = [
            CHUNKER_VERSION,
            self.max_tokens,
            self.min_tokens,
            self.boundary_modulus,
            self.tokenizer,
        ]
        if self.header_tokens:  # absent when off, so indexes built before it keep their hashes
            parts.append(f"header{self.header_tokens}")
        if self.situate:  # likewise: the sentence's model and prompt re-situate everything
            parts.append(f"situate:{self.situate}")
        return config_key(*parts)


def context_header(section_path: Sequence[str], text: str, budget: int, count: TokenCounter) -> str:
    """The chunk's heading path as one line of at most `budget` tokens (pure).

    Headings only, never the `title` field: a document without headings is titled by its
    file name, so a title in the header would make a rename re-embed every chunk, and text
    moved to another file under the same headings keeps its header (and its vectors).
    Headings already at the start of the chunk text (a section's first chunk opens with
    its heading) are left out; an over-long header keeps its leading words.
    """
    parts: list[str] = []
    for part in section_path:
        part = " ".join(part.split())
        if part and part not in parts and not text.startswith(part):
            parts.append(part)
    header = " > ".join(parts)
    if not header or budget <= 0:
        return ""
    return _windows(header, budget, count)[0]


def embedding_text(context: str, text: str) -> str:
    """What the dense side embeds (and the content hash covers): header, blank line, text."""
    return f"{context}{BLOCK_SEPARATOR}{text}" if context else text


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
    """The text's sentences: cut after `.!?;:` and space before a capital, a digit or an
    opening quote, and after a CJK sentence end (`。！？`), which needs no space after it.

    >>> split_sentences("东京是首都。人口很多！ Then it rained. It stopped.")
    ['东京是首都。', '人口很多！', 'Then it rained.', 'It stopped.']
    """
    out: list[str] = []
    for part in _SENTENCE_END.split(text):
        at = 0
        for end in cjk_sentence_ends(part):
            out.append(part[at:end])
            at = end
        out.append(part[at:])
    return [s.strip() if s[:1].isspace() else s for s in out if s.strip()]


def _windows(text: str, max_tokens: int, count: TokenCounter) -> list[str]:
    """Cut an over-long sentence into word windows that fit (the last resort, rare); a CJK
    character is a word (`core.language.word_spans`), so text without spaces is cut too."""
    spans = word_spans(text)
    sizes = count([text[s:e] for s, e in spans])
    out: list[str] = []
    current: list[tuple[int, int]] = []
    size = 0
    for span, n in zip(spans, sizes, strict=True):
        if current and size + n > max_tokens:
            out.append(join_spans(text, current))
            current, size = [], 0
        current.append(span)
        size += n
    if current:
        out.append(join_spans(text, current))
    return out


def _split_block(text: str, cfg: ChunkerConfig, count: TokenCounter) -> list[str]:
    """An over-budget block as sentence units (over-long sentences as word windows).

    The sentences then go through the same content-defined grouping as blocks, so an edit
    to one sentence of a long paragraph re-cuts only the chunk around that sentence.
    """
    sentences = split_sentences(text)
    pieces: list[str] = []
    for sentence, n in zip(sentences, count(sentences), strict=True):
        pieces.extend(
            _windows(sentence, cfg.max_tokens, count) if n > cfg.max_tokens else [sentence]
        )
    return pieces


@dataclass(frozen=True)
class _Piece:
    text: str
    block: Block
    start: int  # char offset in the document text (blocks joined by BLOCK_SEPARATOR)


def _units(blocks: Sequence[Block], cfg: ChunkerConfig, count: TokenCounter) -> list[_Piece]:
    """Blocks as units that each fit the budget: over-long blocks become sentence pieces."""
    texts = [b.text for b in blocks]
    units: list[_Piece] = []
    pos = 0
    for block, text, size in zip(blocks, texts, count(texts), strict=True):
        if size <= cfg.max_tokens:
            units.append(_Piece(text, block, pos))
        else:
            cursor = 0
            for piece in _split_block(text, cfg, count):
                found = text.find(piece.split(maxsplit=1)[0], cursor)
                start = found if found >= 0 else cursor
                cursor = start + 1
                units.append(_Piece(piece, block, pos + start))
        pos += len(text) + len(BLOCK_SEPARATOR)
    return units


def _pieces(blocks: Sequence[Block], cfg: ChunkerConfig, count: TokenCounter) -> list[list[_Piece]]:
    """Group units into chunk-sized lists, cutting before every heading.

    Pieces of a split block are grouped like blocks, so a heading joins the first piece of
    the long paragraph under it instead of becoming a chunk of its own.
    """
    units = _units(blocks, cfg, count)
    texts = [u.text for u in units]
    headings = frozenset(i for i, u in enumerate(units) if u.block.kind == "heading")
    groups = group_units(
        texts, count(texts), cfg.max_tokens, cfg.min_tokens, cfg.boundary_modulus, headings
    )
    return [[units[i] for i in group] for group in groups]


def _join(pieces: Sequence[_Piece]) -> str:
    """Pieces of one block rejoin with a space (none between two pieces of CJK text, which
    had none), different blocks with a blank line."""
    out = pieces[0].text
    for prev, piece in pairwise(pieces):
        if piece.block is not prev.block:
            out += BLOCK_SEPARATOR + piece.text
        else:
            out += ("" if _glued(prev.text, piece.text) else " ") + piece.text
    return out


def _glued(before: str, after: str) -> bool:
    """Whether two pieces of one block meet without a space: both sides are CJK text."""
    return bool(_CJK_EDGE.search(before[-1:]) and _CJK_EDGE.match(after[:1]))


def chunk_document(doc: ParsedDocument, cfg: ChunkerConfig, count: TokenCounter) -> list[Chunk]:
    """Chunks of a parsed document, in order, each with its deterministic point id."""
    blocks = [b for b in doc.blocks if b.text.strip()]
    chunks: list[Chunk] = []
    seen: Counter[str] = Counter()
    for ordinal, pieces in enumerate(_pieces(blocks, cfg, count)):
        text = _join(pieces)
        body = next((p.block for p in pieces if p.block.kind != "heading"), pieces[0].block)
        context = context_header(body.section_path, text, cfg.header_tokens, count)
        chash = content_hash(embedding_text(context, text), cfg.key)
        occurrence = seen[chash]
        seen[chash] += 1
        last = pieces[-1]
        chunks.append(
            Chunk(
                point_id=point_id(doc.doc_id, chash, occurrence),
                doc_id=doc.doc_id,
                ordinal=ordinal,
                occurrence=occurrence,
                content_hash=chash,
                text=text,
                context=context,
                section_path=body.section_path,
                page=pieces[0].block.page,
                char_start=pieces[0].start,
                char_end=last.start + len(last.text),
                non_prose=non_prose_spans(pieces),
                **_ocr_provenance(pieces),
            )
        )
    return chunks


def non_prose_spans(pieces: Sequence[_Piece]) -> tuple[NonProse, ...]:
    """(start, end, kind) in the joined text (`_join`) of each block that is no prose: a
    heading or title, a caption, a table row, code. Pieces of one block make one span."""
    spans: list[NonProse] = []
    offset = 0
    for i, piece in enumerate(pieces):
        if i:
            offset += 1 if piece.block is pieces[i - 1].block else len(BLOCK_SEPARATOR)
        kind = piece.block.kind
        end = offset + len(piece.text)
        if kind in NON_PROSE_KINDS:
            if spans and i and piece.block is pieces[i - 1].block:
                spans[-1] = (spans[-1][0], end, kind)
            else:
                spans.append((offset, end, kind))
        offset = end
    return tuple(spans)


def _ocr_provenance(pieces: Sequence[_Piece]) -> dict[str, Any]:
    """origin "ocr" when any piece was read by OCR, with the character-weighted mean of the
    engine's confidence and the union of the OCR boxes on the chunk's first page."""
    read = [p for p in pieces if p.block.origin == "ocr"]
    if not read:
        return {}
    chars = sum(max(len(p.text), 1) for p in read)
    confidence = sum((p.block.confidence or 0.0) * max(len(p.text), 1) for p in read) / chars
    page = pieces[0].block.page
    boxes = [p.block.bbox for p in read if p.block.bbox is not None and p.block.page == page]
    bbox = None
    if boxes:
        bbox = (
            min(b[0] for b in boxes),
            min(b[1] for b in boxes),
            max(b[2] for b in boxes),
            max(b[3] for b in boxes),
        )
    return {"origin": "ocr", "confidence": round(confidence, 4), "bbox": bbox}
