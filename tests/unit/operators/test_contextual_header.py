"""The contextual header through the real ingest: the heading path is embedded with
every chunk, never shown or cited, and covered by the content hash (a heading edit
re-embeds every chunk under it; without the header only the chunk holding the heading)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragstream import api
from ragstream.core.answers import QueryRequest
from ragstream.core.models import IndexedChunk, SyncReport
from ragstream.core.settings import ChunkSettings, Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.query.engine import QueryEngine
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # several real syncs of shared documents

DOC = "md/docling_concepts_chunking.md"


def _setup(tmp_path: Path, shared_docs: Path, header_tokens: int) -> tuple[Settings, Path]:
    folder = copy_docs(shared_docs, [DOC], tmp_path / "docs", flat=True)
    settings = Settings(
        data_dir=tmp_path / "data", chunk=ChunkSettings(header_tokens=header_tokens)
    ).with_paths([folder])
    return settings, folder / Path(DOC).name


def _sync(settings: Settings) -> SyncReport:
    return api.sync([s.root for s in settings.sources], settings=settings)


def _live(settings: Settings) -> list[IndexedChunk]:
    with open_runtime(settings) as rt:
        return sorted(
            (c for page in rt.vectors.live_pages() for c in page), key=lambda c: c.ordinal
        )


def _expected_header(c: IndexedChunk) -> str:
    return " > ".join(p for p in c.section_path if not c.text.startswith(p))


def _retitle(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("## Introduction")
    path.write_text(text.replace("## Introduction", "## Overview of chunkers", 1))


def test_header_is_embedded_but_never_cited(tmp_path: Path, shared_docs: Path) -> None:
    settings, _ = _setup(tmp_path, shared_docs, header_tokens=32)
    assert _sync(settings).chunks_embedded > 3
    chunks = _live(settings)
    headed = [c for c in chunks if c.context]
    assert len(headed) >= len(chunks) // 2  # a section's first chunk opens with its heading
    assert all(c.context == _expected_header(c) for c in chunks)
    with open_runtime(settings) as rt:
        stored = rt.vectors.vectors_for_hashes([c.content_hash for c in headed])
        embedder = rt.embedder
        sample = headed[:4]
        with_header = embedder.encode_passages([embedding_text(c.context, c.text) for c in sample])
        bare = embedder.encode_passages([c.text for c in sample])
    for c, wh, b in zip(sample, np.asarray(with_header), np.asarray(bare), strict=True):
        v = np.asarray(stored[c.content_hash])
        assert float(v @ wh) > 0.999  # the stored vector is the header + text embedding
        assert float(v @ b) < 0.995  # … and not the bare text's
    with QueryEngine.open(settings) as engine:
        answer = engine.answer(QueryRequest(query="What does the BaseChunker API define?"))
    assert answer.sources
    by_id = {c.point_id: c for c in chunks}
    for source in answer.sources:  # cited text is the chunk text, header-free
        assert source.text == by_id[source.point_id].text
        assert not source.text.startswith(by_id[source.point_id].context or "\x00")


def test_heading_edit_reembeds_its_section_only_with_the_header(
    tmp_path: Path, shared_docs: Path
) -> None:
    for header_tokens in (32, 0):
        settings, path = _setup(tmp_path / f"h{header_tokens}", shared_docs, header_tokens)
        first = _sync(settings)
        _retitle(path)
        second = _sync(settings)
        after = _live(settings)
        assert second.chunks_live == len(after) == first.chunks_live
        under = [c for c in after if c.section_path == ("Overview of chunkers",)]
        assert 1 < len(under) < len(after)
        if header_tokens:  # every chunk of the renamed section has a new header
            assert second.chunks_embedded == len(under)
            assert all(c.context == "Overview of chunkers" for c in under[1:])
        else:
            assert second.chunks_embedded == 1  # only the chunk holding the edited heading
        assert all(c.title == "Overview of chunkers" for c in after)


def test_turning_the_header_on_recuts_unchanged_files(tmp_path: Path, shared_docs: Path) -> None:
    """A chunker setting change reaches files that did not change: their points carry the
    key of the chunker that cut them, and the catch-up scan re-reads a doc cut by another."""
    settings, _ = _setup(tmp_path, shared_docs, header_tokens=0)
    first = _sync(settings)
    assert _sync(settings).chunks_embedded == 0  # nothing changed: nothing re-read
    headed = settings.model_copy(update={"chunk": ChunkSettings(header_tokens=32)})
    second = _sync(headed)
    after = _live(headed)
    assert second.docs_changed == 1 and second.chunks_embedded == len(after) == first.chunks_live
    assert any(c.context for c in after)
    assert all(c.context == _expected_header(c) for c in after)
    assert len({c.chunker for c in after}) == 1
    assert _sync(headed).docs_changed == 0  # and only once
