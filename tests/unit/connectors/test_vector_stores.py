"""Congruence suite: the same scenario on Qdrant Edge and on qdrant-client (local mode).

Every test is parametrized over both backends with the same exact expectations, and
`test_backends_agree` replays one scripted scenario on both and compares the transcripts.
Vectors are small (dim 8) and random; the embedder is fake, so no model is ever loaded.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragstream.connectors import vector_stores
from ragstream.connectors.protocols import STALE_FINGERPRINT, SearchFilter, VectorStore
from ragstream.connectors.stores import live_collection, open_vector_store, set_live_collection
from ragstream.connectors.vector_stores import HasIds, StoreBusyError, collection_name
from ragstream.core.ids import doc_prefixes
from ragstream.core.models import EmbedderVersion, FileFingerprint, IndexedChunk

KINDS = ["edge", "qdrant"]
EMB = EmbedderVersion(name="test/Fake-Model", fingerprint="0123456789abcdef", dimension=8)
EMB2 = EmbedderVersion(name="test/fake-model-v2", fingerprint="fedcba9876543210", dimension=4)
DOCS = [  # doc_id, tenant, file_type, number of chunks
    ("src:a/x.md", "t1", "md", 3),
    ("src:a/b/y.md", "t1", "md", 2),
    ("src:c/z.txt", "t2", "txt", 3),
    ("other:a/w.md", "t2", "md", 2),
]
MISSING = "00000000-0000-0000-0000-000000000001"
ALL = SearchFilter()


def pid(doc_id: str, ordinal: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}#{ordinal}"))


def make_corpus(seed: int = 0) -> tuple[list[IndexedChunk], list[list[float]]]:
    rng = np.random.default_rng(seed)
    chunks = [
        IndexedChunk(
            point_id=pid(doc_id, i),
            doc_id=doc_id,
            source=doc_id.split(":")[0],
            path=f"/data/{doc_id}",
            file_type=ftype,
            ordinal=i,
            content_hash=f"h-{doc_id}-{i}",
            text=f"chunk {i} of {doc_id}",
            section_path=("Intro", f"S{i}"),
            char_start=10 * i,
            char_end=10 * i + 9,
            file_size=100,
            file_mtime_ns=5,
            tenant=tenant,
        )
        for doc_id, tenant, ftype, n in DOCS
        for i in range(n)
    ]
    vectors = rng.standard_normal((len(chunks), EMB.dimension)).tolist()
    return chunks, vectors


def stamped(chunk: IndexedChunk, **update: Any) -> IndexedChunk:
    return chunk.model_copy(update={"embedder": EMB.slug, **update})


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a)


def ids(hits: list[Any]) -> list[str]:
    return [h.chunk.point_id for h in hits]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[VectorStore]:
    s = open_vector_store(kind, tmp_path, "idx", EMB)
    chunks, vectors = make_corpus()
    s.upsert(chunks, vectors)
    yield s
    s.close()


def test_upsert_is_idempotent_and_get_is_exact(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    assert store.count("live") == len(chunks)
    store.upsert(chunks, vectors)
    assert store.count("live") == len(chunks)
    assert store.count("deleted") == 0
    got = store.get([chunks[4].point_id, MISSING, chunks[0].point_id, chunks[4].point_id])
    assert got == [stamped(chunks[4]), stamped(chunks[0])]
    assert store.get([]) == []


def test_search_nearest_live_only_and_tombstone(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    hits = store.search(vectors[5], 3, ALL)
    assert hits[0].chunk == stamped(chunks[5])
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    store.tombstone([chunks[5].point_id, MISSING], deleted_at=123.0)
    assert chunks[5].point_id not in ids(store.search(vectors[5], len(chunks), ALL))
    assert len(store.search(vectors[5], 100, ALL)) == len(chunks) - 1
    assert (store.count("live"), store.count("deleted")) == (len(chunks) - 1, 1)
    dead = store.get([chunks[5].point_id])[0]
    assert (dead.status, dead.deleted_at) == ("deleted", 123.0)
    store.tombstone([chunks[5].point_id], deleted_at=999.0)  # replay: deleted_at unchanged
    assert store.get([chunks[5].point_id])[0].deleted_at == 123.0
    store.upsert([chunks[5]], [vectors[5]])  # rewriting revives it
    assert store.search(vectors[5], 1, ALL)[0].chunk.point_id == chunks[5].point_id


def test_vectors_for_hashes_any_status(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    store.tombstone([chunks[1].point_id], deleted_at=1.0)
    got = store.vectors_for_hashes([chunks[1].content_hash, chunks[2].content_hash, "nope"])
    assert set(got) == {chunks[1].content_hash, chunks[2].content_hash}
    for i in (1, 2):  # cosine collections store unit vectors
        assert np.allclose(unit(got[chunks[i].content_hash]), unit(vectors[i]), atol=1e-5)
    assert store.vectors_for_hashes([]) == {}
    # a point tagged with another embedder (corruption `verify` reports) lends no vector
    store._set_payload([HasIds((chunks[2].point_id,))], {"embedder": "other-384-x"})  # type: ignore[attr-defined]
    assert set(store.vectors_for_hashes([chunks[2].content_hash])) == set()


def test_gc_purges_only_old_tombstones(store: VectorStore) -> None:
    chunks, _ = make_corpus()
    store.tombstone([chunks[0].point_id], deleted_at=100.0)
    store.tombstone([chunks[1].point_id, chunks[2].point_id], deleted_at=200.0)
    assert store.gc(older_than=150.0) == 1
    assert store.get([chunks[0].point_id]) == []
    assert store.count("deleted") == 2
    assert store.gc(older_than=200.0) == 0  # strictly older
    assert store.gc(older_than=1e12) == 2
    assert store.gc(older_than=1e12) == 0
    assert (store.count("live"), store.count("deleted")) == (len(chunks) - 3, 0)
    store.tombstone([chunks[0].point_id], deleted_at=1.0)  # already purged: a no-op
    store.set_fingerprint([chunks[0].point_id], FileFingerprint(size=1, mtime_ns=1), 1.0)


def test_tenant_filter_never_leaks(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    for tenant in ("t1", "t2"):
        hits = store.search(vectors[0], 100, SearchFilter(tenants=(tenant,)))
        assert {h.chunk.point_id for h in hits} == {
            c.point_id for c in chunks if c.tenant == tenant
        }
    assert store.search(vectors[0], 100, SearchFilter(tenants=("t3",))) == []
    assert store.search(vectors[0], 100, SearchFilter(tenants=())) == []
    both = store.search(vectors[0], 100, SearchFilter(tenants=("t1", "t2")))
    assert len(both) == len(chunks)


@pytest.mark.parametrize(
    ("flt", "docs"),
    [
        (SearchFilter(path_prefix="src:a/"), {"src:a/x.md", "src:a/b/y.md"}),
        (SearchFilter(path_prefix="src:a"), {"src:a/x.md", "src:a/b/y.md"}),
        (SearchFilter(path_prefix="src:a/b/"), {"src:a/b/y.md"}),
        (SearchFilter(path_prefix="src:"), {"src:a/x.md", "src:a/b/y.md", "src:c/z.txt"}),
        (SearchFilter(path_prefix="src:a/x"), set()),  # not a directory boundary
        (SearchFilter(path_prefix="other:a/", tenants=("t1",)), set()),
        (SearchFilter(doc_ids=("src:c/z.txt", "nope")), {"src:c/z.txt"}),
        (SearchFilter(file_types=("txt",)), {"src:c/z.txt"}),
        (SearchFilter(file_types=("md",), path_prefix="src:"), {"src:a/x.md", "src:a/b/y.md"}),
        (SearchFilter(doc_ids=()), set()),
    ],
)
def test_filters(store: VectorStore, flt: SearchFilter, docs: set[str]) -> None:
    _, vectors = make_corpus()
    assert {h.chunk.doc_id for h in store.search(vectors[0], 100, flt)} == docs


def test_doc_prefixes() -> None:
    assert doc_prefixes("src:a/b/c.md") == ["src:", "src:a/", "src:a/b/"]
    assert doc_prefixes("src:c.md") == ["src:"]


def test_fingerprints_positions_and_live_chunks(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    x = [c for c in chunks if c.doc_id == "src:a/x.md"]
    version = FileFingerprint(size=200, mtime_ns=7, digest="d" * 32)
    store.set_fingerprint([x[0].point_id, x[1].point_id], version, indexed_at=42.0)
    got = {c.point_id: c for c in store.live_chunks("src:a/x.md")}
    assert got[x[0].point_id].fingerprint == version and got[x[0].point_id].indexed_at == 42.0
    assert got[x[2].point_id].fingerprint == x[2].fingerprint  # only the named points
    store.tombstone([c.point_id for c in chunks if c.doc_id == "other:a/w.md"], 5.0)
    assert store.live_doc_fingerprints() == {
        "src:a/x.md": {"200:7", "100:5"},
        "src:a/b/y.md": {"100:5"},
        "src:c/z.txt": {"100:5"},
    }
    moved = x[2].model_copy(update={"ordinal": 0, "char_start": 0, "char_end": 5, "page": 2})
    store.set_positions([moved])
    assert stamped(moved) in store.live_chunks("src:a/x.md")
    assert [c.ordinal for c in store.live_chunks("src:a/x.md")] == [0, 0, 1]
    assert store.live_chunks("other:a/w.md") == []
    assert store.search(vectors[2], 1, ALL)[0].chunk.point_id == x[2].point_id  # vector kept


def test_a_point_parsed_under_another_parser_key_reads_stale(store: VectorStore) -> None:
    """The catch-up scan's view of OCR settings: a point whose parser key is not among the
    keys its path reads under now reports STALE_FINGERPRINT; an unrecorded key never does;
    `set_positions` carries the new key, after which the doc is current again."""
    chunks, _ = make_corpus()
    x = [c for c in chunks if c.doc_id == "src:a/x.md"]
    y = [c for c in chunks if c.doc_id == "src:a/b/y.md"]
    store.upsert([c.model_copy(update={"parser": "pdf:auto"}) for c in x], make_corpus()[1][:3])
    store.set_positions([stamped(y[0], parser="image:tesseract:eng")])
    keys = {"/data/src:a/x.md": {"pdf:auto", "pdf:auto:tesseract:eng:200dpi"}}

    def parser(path: str) -> set[str]:
        return keys.get(path, {"image:rapidocr:eng"})

    fresh = {"src:a/x.md": {"100:5"}, "src:a/b/y.md": {"100:5"}, "src:c/z.txt": {"100:5"}}
    fresh["other:a/w.md"] = {"100:5"}
    assert store.live_doc_fingerprints() == fresh  # not checked without `parser`
    got = store.live_doc_fingerprints("", parser)
    assert got["src:a/x.md"] == {"100:5"}  # its key is still one of its path's
    assert got["src:a/b/y.md"] == {"100:5", STALE_FINGERPRINT}  # y[0] read by tesseract
    assert got["src:c/z.txt"] == {"100:5"}  # no key recorded: never stale
    keys["/data/src:a/x.md"] = {"pdf:force:tesseract:eng:200dpi"}
    assert store.live_doc_fingerprints("", parser)["src:a/x.md"] == {STALE_FINGERPRINT}
    store.set_positions([stamped(c, parser="image:rapidocr:eng") for c in y])
    assert store.live_doc_fingerprints("", parser)["src:a/b/y.md"] == {"100:5"}
    assert {c.parser for c in store.live_chunks("src:a/b/y.md")} == {"image:rapidocr:eng"}


def test_batches_and_pages(store: VectorStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_stores, "BATCH", 3)
    monkeypatch.setattr(vector_stores, "PAGE", 2)
    chunks, vectors = make_corpus()
    store.upsert(chunks, vectors)
    store.tombstone([c.point_id for c in chunks[:7]], 9.0)
    assert store.count("deleted") == 7
    assert len(store.vectors_for_hashes(c.content_hash for c in chunks)) == len(chunks)
    assert len(store.live_chunks("src:c/z.txt")) == 1  # chunks[7]
    assert sum(len(v) for v in store.live_doc_fingerprints().values()) == 2
    paged: dict[str, set[str]] = {}  # the audit's cheap view agrees with the full pages
    for page in store.live_pages():
        for c in page:
            paged.setdefault(c.doc_id, set()).add(c.point_id)
    assert store.live_doc_points() == paged
    expected: dict[str, set[str]] = {}
    for c in chunks[7:]:  # the live ones
        expected.setdefault(c.doc_id, set()).add(c.point_id)
    assert paged == expected


def test_bad_input_is_rejected(store: VectorStore) -> None:
    chunks, vectors = make_corpus()
    with pytest.raises(ValueError):
        store.upsert(chunks[:2], vectors[:1])
    with pytest.raises(ValueError):
        store.upsert(chunks[:1], [[1.0, 2.0]])
    with pytest.raises(ValueError):
        store.search([1.0], 3, ALL)
    assert store.search(vectors[0], 0, ALL) == []


def test_persistence_and_live_pointer(kind: str, tmp_path: Path) -> None:
    chunks, vectors = make_corpus()
    assert live_collection(kind, tmp_path, "idx") is None
    s = open_vector_store(kind, tmp_path, "idx", EMB)
    s.upsert(chunks, vectors)
    s.tombstone([chunks[0].point_id], 50.0)
    before = s.search(vectors[3], 4, ALL)
    s.close()
    s.close()  # idempotent
    live = (collection_name("idx", EMB), EMB)
    assert live_collection(kind, tmp_path, "idx") == live
    s = open_vector_store(kind, tmp_path, "idx", EMB)
    assert (s.count("live"), s.count("deleted")) == (len(chunks) - 1, 1)
    assert ids(s.search(vectors[3], 4, ALL)) == ids(before)
    # blue/green: a second embedder's collection opens beside the live one, not live yet
    s2 = open_vector_store(kind, tmp_path, "idx", EMB2)
    assert live_collection(kind, tmp_path, "idx") == live
    assert s2.count("live") == 0
    set_live_collection(kind, tmp_path, "idx", collection_name("idx", EMB2))
    assert live_collection(kind, tmp_path, "idx") == (collection_name("idx", EMB2), EMB2)
    with pytest.raises(ValueError):
        set_live_collection(kind, tmp_path, "idx", "idx__nope")
    s.close()
    s2.close()
    assert live_collection(kind, tmp_path, "idx") == (collection_name("idx", EMB2), EMB2)


def test_embedded_edge_dir_is_owned_by_one_store(tmp_path: Path) -> None:
    s = open_vector_store("edge", tmp_path, "idx", EMB)
    with pytest.raises(StoreBusyError):
        open_vector_store("edge", tmp_path, "idx", EMB)
    s.close()
    with pytest.raises(ValueError):
        open_vector_store("edge", tmp_path, "idx", EMB, url="http://localhost:6333")
    with pytest.raises(ValueError):
        open_vector_store("nope", tmp_path, "idx", EMB)


def run_script(kind: str, base: Path) -> list[Any]:
    """One scripted history; the transcript must be the same on both backends."""
    chunks, vectors = make_corpus(seed=7)
    out: list[Any] = []
    s = open_vector_store(kind, base, "idx", EMB)
    s.upsert(chunks, vectors)
    s.tombstone([c.point_id for c in chunks[::3]], 10.0)
    s.tombstone([chunks[1].point_id], 30.0)
    s.set_fingerprint([chunks[4].point_id], FileFingerprint(size=9, mtime_ns=9), 9.0)
    s.set_positions([chunks[5].model_copy(update={"parser": "image:tesseract:eng"})])
    for i, flt in enumerate([ALL, SearchFilter(tenants=("t2",)), SearchFilter(path_prefix="src:")]):
        out.append([(h.chunk, round(h.score, 4)) for h in s.search(vectors[i], 5, flt)])
    out += [s.count("live"), s.count("deleted"), s.live_doc_fingerprints(), s.gc(20.0)]
    out.append(s.live_doc_fingerprints("", lambda path: {"plain"}))
    out += [s.live_chunks(d) for d, *_ in DOCS]
    out.append(s.get([c.point_id for c in chunks]))
    hashed = s.vectors_for_hashes(c.content_hash for c in chunks)
    out.append({h: np.round(v, 4).tolist() for h, v in hashed.items()})
    s.close()
    return out


def test_backends_agree(tmp_path: Path) -> None:
    assert run_script("edge", tmp_path / "e") == run_script("qdrant", tmp_path / "q")


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=1, max_value=30),
    seed=st.integers(min_value=0, max_value=2**16),
    limit=st.integers(min_value=1, max_value=10),
)
def test_search_matches_brute_force(n: int, seed: int, limit: int) -> None:
    rng = np.random.default_rng(seed)
    base, _ = make_corpus()
    chunks = [base[0].model_copy(update={"point_id": pid("p", i), "ordinal": i}) for i in range(n)]
    vectors = rng.standard_normal((n, EMB.dimension))
    query = rng.standard_normal(EMB.dimension)
    scores = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)) @ unit(query.tolist())
    expected = [chunks[i].point_id for i in np.argsort(-scores)[:limit]]
    for kind in KINDS:
        with tempfile.TemporaryDirectory() as tmp:
            s = open_vector_store(kind, Path(tmp), "idx", EMB)
            s.upsert(chunks, vectors.tolist())
            hits = s.search(query.tolist(), limit, ALL)
            s.close()
        assert ids(hits) == expected
        assert np.allclose([h.score for h in hits], np.sort(scores)[::-1][:limit], atol=1e-4)
