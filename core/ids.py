"""Identities: what a document, a chunk's content and a stored point are called.

A content hash says *what* a text is, never *where*; a point id is derived from
(doc_id, content hash, occurrence) so re-writing a document is an idempotent upsert and
inserting a paragraph adds one point instead of renumbering every later one.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Collection
from pathlib import PurePosixPath

import xxhash

POINT_NAMESPACE = uuid.UUID("6f1d2a7e-4b8c-5d3e-9f10-2a3b4c5d6e7f")


def doc_id(source: str, rel_path: str) -> str:
    """`<source>:<posix path relative to the root>`, NFC-normalized so a path has one id."""
    rel = PurePosixPath(unicodedata.normalize("NFC", rel_path.replace("\\", "/")))
    return f"{source}:{rel.as_posix().lstrip('/')}"


def source_of(doc: str) -> str:
    """The source (watched root) name a doc id belongs to: the part before the first `:`.

    >>> source_of("handbook:policies/leave.md")
    'handbook'
    """
    return doc.split(":", 1)[0]


def in_sources(doc: str, own: Collection[str] | None) -> bool:
    """Whether a doc id belongs to one of the `own` sources (None: every source): the tenant
    rule of a caller's view of the live feed.

    >>> in_sources("handbook:a.md", {"handbook"}), in_sources("wiki:b.md", {"handbook"})
    (True, False)
    >>> in_sources("wiki:b.md", None)
    True
    """
    return own is None or source_of(doc) in own


def normalize_text(text: str) -> str:
    """NFC + collapsed whitespace: formatting-only edits must not change a hash."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def content_hash(text: str, chunker_key: str) -> str:
    """xxh3_128 of the normalized text, keyed by the chunker config that produced it."""
    payload = f"{chunker_key}\x00{normalize_text(text)}".encode()
    return xxhash.xxh3_128_hexdigest(payload)


def point_id(doc: str, chash: str, occurrence: int) -> str:
    """Deterministic UUID: the same text at the same occurrence in the same doc = same point."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{doc}\x00{chash}\x00{occurrence}"))


def config_key(*parts: object) -> str:
    """A short stable key over every setting that changes an output (cache keys)."""
    return xxhash.xxh3_64_hexdigest("\x00".join(map(str, parts)).encode())


def doc_prefixes(doc: str) -> list[str]:
    """Every directory prefix of a doc id: `src:a/b/c.md` -> `src:`, `src:a/`, `src:a/b/`.

    Stores index these as a multi-valued keyword so a `path_prefix` filter is one exact term
    match inside the store (no prefix scan, no post-filter); a prefix always ends in `:` or `/`,
    so `src:a/b/` never matches a sibling like `src:a/bc.md`.
    """
    source, sep, rel = doc.partition(":")
    head = source + sep if sep else ""
    out = [head] if head else []
    for part in (rel if sep else doc).split("/")[:-1]:
        head += part + "/"
        out.append(head)
    return out


def prefix_key(path_prefix: str) -> str:
    """A `SearchFilter.path_prefix` as stored in `doc_prefixes`.

    The prefix must end at a directory boundary ("src:" or "src:docs/"); a value that does not
    end in ":" or "/" names a directory, so "src:docs" means "src:docs/". A partial file name
    ("src:docs/rea") therefore never matches "src:docs/readme.md".
    """
    return path_prefix if path_prefix.endswith((":", "/")) else path_prefix + "/"


def partition_of(doc: str, count: int) -> int:
    """Which of `count` sync partitions owns a document: a stable hash of its id (xxh64, the
    same on every machine and Python run), so N sync replicas each take a fixed share of the
    documents, and every event of one document (edit, move, delete) goes to the same one."""
    return xxhash.xxh64_intdigest(doc.encode()) % count if count > 1 else 0
