"""BM25 scores each chunk on its section: the pure neighbour window, and the real
ingest keeping it right through an edit without re-embedding the neighbours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import StorePairing
from ragstream import api
from ragstream.connectors.lexical import lexical_text, section_contexts
from ragstream.connectors.protocols import SearchFilter
from ragstream.core.models import SyncReport
from ragstream.core.settings import ChunkSettings, Settings
from ragstream.flows.runtime import open_runtime


@dataclass(frozen=True)
class Piece:
    text: str
    section_path: tuple[str, ...]


pieces = st.lists(
    st.tuples(st.integers(1, 12), st.sampled_from([(), ("A",), ("A", "B")])), max_size=12
)


@given(pieces, st.integers(0, 40))
def test_window_is_bounded_nearest_first_and_never_crosses_a_section(
    spec: list[tuple[int, tuple[str, ...]]], budget: int
) -> None:
    chunks = [
        Piece(" ".join(f"w{i}x{k}" for k in range(n)), path) for i, (n, path) in enumerate(spec)
    ]
    contexts = section_contexts(chunks, budget)
    assert len(contexts) == len(chunks)
    for i, (chunk, ctx) in enumerate(zip(chunks, contexts, strict=True)):
        words = ctx.split()
        assert len(words) <= budget
        owners = {int(w[1:].split("x")[0]) for w in words}
        assert i not in owners  # never its own words
        assert all(chunks[j].section_path == chunk.section_path for j in owners)
        same = [j for j, c in enumerate(chunks) if j != i and c.section_path == chunk.section_path]
        if sum(len(chunks[j].text.split()) for j in same) <= budget:
            assert ctx == " ".join(chunks[j].text for j in same)  # the whole section, in order
        if owners:  # nearest first (in section order): no farther one while a nearer is out
            section = sorted([*same, i])
            gap = {j: abs(section.index(j) - section.index(i)) for j in same}
            far = max(gap[j] for j in owners)
            assert {j for j in same if gap[j] < far} <= owners


def _sync(settings: Settings, root: Path) -> SyncReport:
    return api.sync([root], settings=settings)


@pytest.mark.slow
def test_an_edit_reindexes_its_neighbours_bm25_text_without_reembedding_them(
    tmp_path: Path, store_pairing: StorePairing
) -> None:
    vector, lexical = store_pairing
    root = tmp_path / "docs"
    root.mkdir()
    paragraphs = [
        f"Paragraph {i} discusses topic{i} at length, with several details about item{i}. "
        f"It adds a second sentence on aspect{i} so that each paragraph is its own chunk."
        for i in range(6)
    ]
    for k in range(20):  # other documents, so the marker word is rare (BM25 IDF > 0)
        (root / f"other{k}.md").write_text(f"# Other {k}\n\nFiller text number {k} on pottery.\n")
    doc = root / "notes.md"
    doc.write_text("# Notes\n\n" + "\n\n".join(paragraphs) + "\n\n# Other\n\nUnrelated words.\n")
    settings = Settings(
        data_dir=tmp_path / "data",
        store={"vector_backend": vector, "lexical_backend": lexical},
    ).model_copy(update={"chunk": ChunkSettings(max_tokens=40, header_tokens=0)})
    first = _sync(settings, root)
    assert first.chunks_live >= 5
    paragraphs[2] = paragraphs[2].replace("several details", "several zymurgy details")
    doc.write_text("# Notes\n\n" + "\n\n".join(paragraphs) + "\n\n# Other\n\nUnrelated words.\n")
    second = _sync(settings, root)
    assert second.chunks_embedded == 1  # only the edited chunk is re-embedded
    with open_runtime(settings.with_paths([root])) as rt:
        hits = rt.lexical.search("zymurgy", 20, SearchFilter())
        live = {c.point_id: c for c in rt.vectors.live_chunks("docs:notes.md")}
    assert hits and "zymurgy" in hits[0].chunk.text  # the chunk holding the word ranks first
    neighbours = [h.chunk for h in hits[1:]]
    assert neighbours, "its section neighbours match through their BM25 context"
    for chunk in neighbours:
        assert "zymurgy" not in chunk.text and "zymurgy" in lexical_text(chunk)
        assert chunk.section_path == hits[0].chunk.section_path
        assert live[chunk.point_id].lexical_context == ""  # never in the vector payload
    assert all("Unrelated" not in h.chunk.text for h in hits)  # another section: no match
