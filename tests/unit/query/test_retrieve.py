"""Hybrid retrieval end to end on a tiny real index (real sync, MiniLM, Qdrant Edge, tantivy).

One module-scoped index: two tenants' folders, plus a file that is synced and then deleted,
so every test reads the same state a user would have after editing their folders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import live_collection
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.operators.embed import EmbedderUnavailable
from ragstream.query.retrieve import EmbedderMismatch, Fusion, NoIndexError, Retriever

DOCS = {
    "alpha/volcanoes.md": """# Volcanoes

A volcano erupts when magma rises through the crust. Basaltic lava flows from shield
volcanoes such as Mauna Loa, while stratovolcanoes explode with ash and pyroclastic flows.
""",
    "alpha/sourdough.md": """# Sourdough bread

Sourdough is leavened by a starter of wild yeast and lactobacilli. Bakers feed the starter
flour and water, then proof the dough overnight before baking it in a hot Dutch oven.
""",
    "alpha/honeybees.md": """# Honeybees

Honeybees pollinate flowers and store nectar as honey in the hive. The queen lays eggs
while worker bees forage and perform the waggle dance to share where pollen is found.
""",
    "beta/chess.md": """# Chess openings

The Sicilian Defence answers 1.e4 with c5. White often castles kingside while Black
counterattacks on the queenside; grandmasters study these opening lines for years.
""",
}
DELETED = "alpha/honeybees.md"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Synced once, then `DELETED` removed and caught up (the cheap second pass tombstones)."""
    root = tmp_path_factory.mktemp("folders")
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    folders = [root / "alpha", root / "beta"]
    s = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        sources=[
            FolderConfig(name="alpha", root=folders[0], tenant="t1"),
            FolderConfig(name="beta", root=folders[1], tenant="t2"),
        ],
    )
    first = api.sync(folders, settings=s)
    assert first.docs_changed == len(DOCS) and not first.dead_letters
    (root / DELETED).unlink()
    second = api.sync(folders, settings=s)
    assert second.docs_deleted == 1 and second.chunks_embedded == 0
    return s


@pytest.fixture(scope="module")
def retriever(settings: Settings, spans: InMemorySpanExporter) -> Iterator[Retriever]:
    with Retriever.open(settings) as r:
        yield r


def doc(rel: str) -> str:
    return rel.replace("/", ":", 1)  # alpha/x.md -> doc id alpha:x.md


@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
@pytest.mark.parametrize(
    ("query", "rel"),
    [
        ("how does magma make a volcano erupt?", "alpha/volcanoes.md"),
        ("wild yeast starter for baking bread", "alpha/sourdough.md"),
        ("Sicilian Defence opening", "beta/chess.md"),
    ],
)
def test_topic_query_ranks_its_doc_first(
    retriever: Retriever, query: str, rel: str, fusion: Fusion
) -> None:
    result = retriever.retrieve(query, n=10, fusion=fusion)
    top = result.candidates[0]
    assert top.chunk.doc_id == doc(rel)
    assert top.ranks == {"dense": 1, "lexical": 1}  # both legs agree on a distinct topic
    assert set(top.scores) == {"dense", "lexical"}
    assert result.hits["dense"] >= 1 and result.hits["lexical"] >= 1
    assert set(result.timings_ms) == {"embed", "dense", "lexical", "fuse", "total"}
    scores = [c.score for c in result.candidates]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("flt", "query", "rel"),
    [
        (SearchFilter(tenants=("t2",)), "Sicilian Defence opening", "beta/chess.md"),
        (SearchFilter(tenants=("t1",)), "wild yeast starter for baking", "alpha/sourdough.md"),
        (SearchFilter(path_prefix="beta:"), "Sicilian Defence opening", "beta/chess.md"),
        (SearchFilter(path_prefix="alpha:"), "magma make a volcano erupt", "alpha/volcanoes.md"),
    ],
    ids=["tenant-t2", "tenant-t1", "path-beta", "path-alpha"],
)
def test_a_filter_returns_its_matching_chunks_from_both_legs(
    retriever: Retriever, flt: SearchFilter, query: str, rel: str
) -> None:
    """Not only does nothing outside the filter come back: what it allows does, ranked."""
    result = retriever.retrieve(query, n=10, flt=flt)
    assert result.hits["dense"] >= 1 and result.hits["lexical"] >= 1
    assert result.candidates and result.candidates[0].chunk.doc_id == doc(rel)
    assert result.candidates[0].ranks == {"dense": 1, "lexical": 1}
    for c in result.candidates:
        assert flt.tenants is None or c.chunk.tenant in flt.tenants
        assert flt.path_prefix is None or c.chunk.doc_id.startswith(flt.path_prefix)
        assert c.chunk.status == "live"


def test_tenant_and_path_filters_apply_inside_both_legs(retriever: Retriever) -> None:
    query = "how does magma make a volcano erupt?"  # about a t1 document, asked under t2
    only_t2 = retriever.retrieve(query, n=10, flt=SearchFilter(tenants=("t2",)))
    assert only_t2.candidates and only_t2.hits["dense"] >= 1
    assert {c.chunk.tenant for c in only_t2.candidates} == {"t2"}
    assert {c.chunk.doc_id for c in only_t2.candidates} == {doc("beta/chess.md")}
    beta = retriever.retrieve(query, n=10, flt=SearchFilter(path_prefix="beta:"))
    assert beta.candidates and beta.hits["dense"] >= 1
    assert {c.chunk.doc_id for c in beta.candidates} == {doc("beta/chess.md")}
    nobody = retriever.retrieve(query, n=10, flt=SearchFilter(tenants=()))
    assert nobody.candidates == [] and nobody.hits == {"dense": 0, "lexical": 0}


def test_deleted_file_never_comes_back(retriever: Retriever) -> None:
    assert retriever.vectors.count("deleted") >= 1  # its chunks are still stored, tombstoned
    assert retriever.lexical.count("deleted") >= 1
    for fusion in ("rrf", "dbsf"):
        result = retriever.retrieve("honeybees pollen hive waggle dance", n=50, fusion=fusion)
        docs = {c.chunk.doc_id for c in result.candidates}
        assert doc(DELETED) not in docs
        assert docs <= {doc(rel) for rel in DOCS if rel != DELETED}
        assert all(c.chunk.status == "live" for c in result.candidates)


def test_query_spans_carry_counts_and_model(
    retriever: Retriever, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    result = retriever.retrieve("Sicilian Defence opening", n=5, fusion="dbsf")
    got = {s.name: dict(s.attributes or {}) for s in spans.get_finished_spans()}
    assert {
        "ragstream.query.retrieve",
        "ragstream.query.embed",
        "ragstream.query.retrieve.dense",
        "ragstream.query.retrieve.lexical",
        "ragstream.query.fuse",
    } <= set(got)
    assert str(got["ragstream.query.embed"]["model"]).startswith("all-minilm-l6-v2-384-")
    assert got["ragstream.query.retrieve.dense"]["hits"] == result.hits["dense"]
    assert got["ragstream.query.retrieve.lexical"]["hits"] == result.hits["lexical"]
    assert got["ragstream.query.fuse"]["candidates"] == len(result.candidates)
    assert got["ragstream.query.fuse"]["method"] == "dbsf"
    assert got["ragstream.query.fuse"]["top_score"] == result.candidates[0].score


@pytest.mark.slow  # loads a second real model (static)
def test_mismatched_embedder_is_refused(settings: Settings, retriever: Retriever) -> None:
    real = retriever.embedder
    forged = dataclasses.replace(
        real, version=real.version.model_copy(update={"fingerprint": "0" * 16})
    )
    with pytest.raises(EmbedderMismatch, match="fingerprint"):
        Retriever.open(settings, embedder_override=forged)
    with pytest.raises(EmbedderMismatch, match="dimension"):
        Retriever.open(settings, embedder_override="static")  # another real model
    assert issubclass(EmbedderMismatch, EmbedderUnavailable)


def test_loaded_embedder_is_the_recorded_one(settings: Settings, retriever: Retriever) -> None:
    s = settings
    # metadata only
    live = live_collection(s.store.vector_backend, s.vectors_dir, s.store.index_name)
    assert live is not None and live[0] == retriever.collection
    assert retriever.embedder.version == live[1]


def test_empty_data_dir_has_no_index(tmp_path: Path) -> None:
    with pytest.raises(NoIndexError, match=r"run `ragstream sync .*` first"):
        Retriever.open(Settings(data_dir=tmp_path))


def test_bad_arguments(retriever: Retriever) -> None:
    with pytest.raises(ValueError, match="n must be"):
        retriever.retrieve("volcano", n=0)
    with pytest.raises(ValueError, match="unknown fusion"):
        retriever.retrieve("volcano", fusion="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        retriever.retrieve("volcano", k=0)


def test_the_pointer_follower_keeps_a_pinned_side_open_across_swaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query pins the side it started on; a promote (or a rollback back to it) must not
    close that side's store under it, nor open a second handle on a store it still holds
    (`connectors.stores.PointerFollower`, as `PointerTracker` uses it)."""
    from dataclasses import dataclass, field

    from ragstream.connectors import stores

    @dataclass
    class Store:
        name: str
        closed: list[str] = field(default_factory=list)

        def close(self) -> None:
            self.closed.append(self.name)

    closed: list[str] = []
    opened: list[str] = []
    pointer = ["A"]
    monkeypatch.setattr(stores, "configured_live", lambda settings: (pointer[0], None))

    def open_side(name: str, recorded: object) -> Store:
        opened.append(name)
        return Store(name, closed)

    follower = stores.PointerFollower(
        Settings(), ("A", open_side("A", None)), open_side, keep=2, retire=Store.close
    )
    pinned = follower.current()
    for name in ("B", "A", "C", "D"):  # promote, rollback, two more promotes
        pointer[0] = name
        assert follower.current().name == name and follower.collection == name
    assert opened == ["A", "B", "C", "D"]  # the rollback reused the open A
    assert closed == ["B"] and pinned.name == "A"  # only sides retired 2 swaps ago close
    assert [side.name for side in follower.held()] == ["A", "C", "D"]  # the current last
    monkeypatch.setattr(stores, "configured_live", lambda settings: None)
    assert follower.current().name == "D"  # no pointer, no `missing`: the side held stays
