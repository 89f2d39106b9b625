"""Random-filter congruence: every store applies a `SearchFilter` exactly as the pure oracle does.

One fixed corpus (several sources, nested folders, near-miss names such as `src:a/x` beside
`src:a/xy/` and `src:a/x.md`, a `:` inside a file name, the empty tenant, some tombstones) is
written once per module into every vector backend and every lexical backend. Hypothesis then
draws `SearchFilter`s (any mix of doc ids, tenants, readers, a path prefix and file types: None,
empty, subsets, unknown values, prefixes cut at any character of a real doc id) and each backend's
search with a limit above the corpus size must return exactly the live points that
`connectors.lexical.matches` accepts: nothing leaks, nothing live and matching is lost; and
each backend's `count` of live and of tombstoned points under the filter (what a tenant's or
a principal's `status` counts) is the number of points the oracle accepts.
The oracle itself is checked against an independent restatement of the documented rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragstream.connectors.lexical import filter_clauses, matches
from ragstream.connectors.protocols import Hit, SearchFilter
from ragstream.connectors.stores import open_lexical_index, open_vector_store
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import prefix_key
from ragstream.core.models import IndexedChunk
from tests.unit.connectors.test_lexical import chunk as make_chunk
from tests.unit.connectors.test_vector_stores import EMB, pid

WORD = "congruence"  # in every chunk's text: the lexical query that matches the whole corpus
DOCS = [  # doc_id, tenant, file_type, chunks, ordinals tombstoned
    ("src:top.md", "", "md", 2, ()),
    ("src:a/x", "t1", "txt", 2, ()),  # a file named like a sibling folder's prefix
    ("src:a/x.md", "t1", "md", 3, (1,)),
    ("src:a/xy/z.md", "t2", "md", 2, ()),
    ("src:a/x/inner.txt", "", "txt", 1, ()),
    ("src:a/b/c/deep.pdf", "t1", "pdf", 3, (0, 2)),
    ("src:a/b:c.md", "acme", "md", 1, ()),  # ':' inside a file name
    ("src:ab/z.md", "t2", "md", 2, ()),
    ("src:docs/ü ber.html", "", "html", 2, ()),
    ("src:gone/dead.md", "t1", "md", 2, (0, 1)),  # every chunk tombstoned
    ("src2:a/x.md", "t1", "md", 2, ()),  # a source whose name extends another's
    ("other:a/x.md", "t2", "docx", 2, (0,)),
    ("other:src/a.md", "", "md", 1, ()),  # a folder named like another source
]
# each doc's `readers` stamp (core.permissions), by its position in DOCS: principals with a
# source token, a file nobody may read, and a chunk never stamped
READER_STAMPS = [
    ("everyone", "source:src"),
    ("group:eng", "user:alice", "source:src"),
    ("user:bob", "source:src"),
    ("source:src",),
    (),
    ("group:ops", "group:eng", "source:src2"),
    ("user:alice", "source:other"),
]
READERS = sorted({r for stamp in READER_STAMPS for r in stamp})
UNKNOWN_READERS = ["user:Alice", "group:", "source:sr", "everyone "]
DOC_IDS = [d for d, *_ in DOCS]
TENANTS = sorted({t for _, t, *_ in DOCS})
FILE_TYPES = sorted({f for _, _, f, *_ in DOCS})
UNKNOWN_DOCS = ["src:a/x.m", "src:a/x.md/", "src:A/x.md", "nope:x.md", ""]
UNKNOWN_TENANTS = ["t3", "T1", " "]
UNKNOWN_TYPES = ["MD", "doc", ""]
LIMIT = 1000  # above the corpus size: every match comes back


def build_corpus() -> tuple[list[IndexedChunk], list[str], list[list[float]]]:
    """(live chunks as written, point ids tombstoned afterwards, one vector per chunk)."""
    chunks: list[IndexedChunk] = []
    dead: list[str] = []
    for d, (doc_id, tenant, ftype, n, tombstoned) in enumerate(DOCS):
        for i in range(n):
            point = pid(doc_id, i)
            chunks.append(
                make_chunk(
                    point,
                    f"{WORD} chunk {i} of {doc_id}",
                    doc_id,
                    ordinal=i,
                    tenant=tenant,
                    readers=READER_STAMPS[d % len(READER_STAMPS)],
                    file_type=ftype,
                    content_hash=f"h-{doc_id}-{i}",
                )
            )
            if i in tombstoned:
                dead.append(point)
    vectors = np.random.default_rng(3).standard_normal((len(chunks), EMB.dimension)).tolist()
    return chunks, dead, vectors


CHUNKS, DEAD, VECTORS = build_corpus()
# the corpus as the stores hold it after the tombstones
STORED = [
    c.model_copy(update={"status": "deleted", "deleted_at": 1.0}) if c.point_id in DEAD else c
    for c in CHUNKS
]
DOC_OF = {c.point_id: c.doc_id for c in CHUNKS}
QUERY_VECTOR = np.random.default_rng(4).standard_normal(EMB.dimension).tolist()


def oracle(flt: SearchFilter, status: str = "live") -> set[str]:
    clauses = filter_clauses(flt, status)
    return {c.point_id for c in STORED if matches(c, clauses)}


def in_folder(doc_id: str, path_prefix: str) -> bool:
    """The documented prefix rule, restated without `doc_prefixes`: the (normalized) prefix
    is the source (`src:`) or a folder of it (`src:a/`), never a partial name."""
    key = prefix_key(path_prefix)
    source = doc_id.partition(":")[0] + ":"
    if key.endswith(":"):
        return key == source
    return key.startswith(source) and doc_id.startswith(key)


def by_spec(flt: SearchFilter) -> set[str]:
    return {
        c.point_id
        for c in STORED
        if c.status == "live"
        and (flt.doc_ids is None or c.doc_id in flt.doc_ids)
        and (flt.tenants is None or c.tenant in flt.tenants)
        and (flt.readers is None or bool(set(c.readers) & set(flt.readers)))
        and (flt.file_types is None or c.file_type in flt.file_types)
        and (flt.path_prefix is None or in_folder(c.doc_id, flt.path_prefix))
    }


# --- random filters ---------------------------------------------------------------------------


def allow_list(known: list[str], unknown: list[str]) -> st.SearchStrategy[tuple[str, ...] | None]:
    """None (no restriction), () (allows nothing) or a subset, sometimes with unknown values."""
    return st.none() | st.lists(st.sampled_from(known + unknown), unique=True, max_size=5).map(
        tuple
    )


def cut(doc_id: str) -> st.SearchStrategy[str]:
    """A prefix of a real doc id cut at any character: a source, a folder with or without its
    slash, part of a segment (`src:a/x` of `src:a/xy/z.md`), a whole file name."""
    return st.integers(0, len(doc_id)).map(lambda k: doc_id[:k])


PREFIXES = st.none() | st.sampled_from(DOC_IDS + UNKNOWN_DOCS).flatmap(cut)
FILTERS = st.builds(
    SearchFilter,
    doc_ids=allow_list(DOC_IDS, UNKNOWN_DOCS),
    tenants=allow_list(TENANTS, UNKNOWN_TENANTS),
    readers=allow_list(READERS, UNKNOWN_READERS),
    path_prefix=PREFIXES,
    file_types=allow_list(FILE_TYPES, UNKNOWN_TYPES),
)
EXAMPLES = [  # the edge cases every run checks, whatever hypothesis draws
    SearchFilter(),
    SearchFilter(tenants=("",)),
    SearchFilter(tenants=()),
    SearchFilter(doc_ids=()),
    SearchFilter(file_types=()),
    SearchFilter(path_prefix="src:a/x"),  # the folder src:a/x/, not the file src:a/x(.md)
    SearchFilter(path_prefix="src:a/xy"),
    SearchFilter(path_prefix="src:a/b:"),
    SearchFilter(path_prefix="src"),
    SearchFilter(path_prefix="src:"),
    SearchFilter(path_prefix=""),
    SearchFilter(doc_ids=("src:gone/dead.md",)),
    SearchFilter(doc_ids=("src:a/x", "src2:a/x.md"), path_prefix="src:a", tenants=("t1",)),
    SearchFilter(readers=()),
    SearchFilter(readers=("everyone", "source:src2")),
    SearchFilter(readers=("user:alice", "group:eng"), tenants=("t1",)),
]


def with_examples(test: Callable[..., None]) -> Callable[..., None]:
    for flt in EXAMPLES:
        test = example(flt=flt)(test)
    return test


# --- every backend, opened once per module ----------------------------------------------------

Search = Callable[[SearchFilter], list[Hit] | None]  # None: refused, as documented
Count = Callable[[str, SearchFilter], int | None]  # None: refused, as documented


class Backend(NamedTuple):
    search: Search
    count: Count


VECTOR_BACKENDS = {  # name -> (kind, url)
    "edge": ("edge", None),
    "qdrant-local": ("qdrant", None),
    "qdrant-memory": ("qdrant", ":memory:"),
}
LEXICAL_BACKENDS = ["tantivy", "rank-bm25"]
SPARSE_BACKENDS = {  # the BM25 leg as sparse vectors in the vector store's own points
    "sparse-edge": ("edge", None),
    "sparse-qdrant-local": ("qdrant", None),
}


@pytest.fixture(scope="module", params=[*VECTOR_BACKENDS, *LEXICAL_BACKENDS, *SPARSE_BACKENDS])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    name = str(request.param)
    base = tmp_path_factory.mktemp(name)
    if name in VECTOR_BACKENDS:
        kind, url = VECTOR_BACKENDS[name]
        store = open_vector_store(kind, base, "idx", EMB, url=url)
        store.upsert(CHUNKS, VECTORS)
        store.tombstone(DEAD, deleted_at=1.0)
        yield Backend(lambda flt: store.search(QUERY_VECTOR, LIMIT, flt), store.count)
        store.close()
    elif name in SPARSE_BACKENDS:
        kind, url = SPARSE_BACKENDS[name]
        store = open_vector_store(kind, base, "idx", EMB, url=url, sparse=True)
        store.upsert(CHUNKS, VECTORS)
        store.tombstone(DEAD, deleted_at=1.0)
        yield Backend(lambda flt: store.search_text(WORD, LIMIT, flt), store.count)
        store.close()
    else:
        index = open_lexical_index(name, base / "lex")
        index.upsert(CHUNKS)
        index.commit()
        index.tombstone(DEAD, deleted_at=1.0)
        index.commit()

        def lexical(flt: SearchFilter) -> list[Hit] | None:
            if name == "tantivy" and flt.readers is not None:  # its schema has no readers
                with pytest.raises(InvalidRequestError, match="sparse"):
                    index.search(WORD, LIMIT, flt)
                return None
            return index.search(WORD, LIMIT, flt)

        def count(status: str, flt: SearchFilter) -> int | None:
            if name == "tantivy" and flt.readers is not None:
                with pytest.raises(InvalidRequestError, match="sparse"):
                    index.count(status, flt)
                return None
            return index.count(status, flt)

        yield Backend(lexical, count)
        index.close()


def test_the_corpus_is_what_the_stores_hold(backend: Backend) -> None:
    """Guards the premise: the unfiltered search returns every live point (nothing dropped by
    the query itself), so a filtered result can be compared with the oracle as a set."""
    hits = backend.search(SearchFilter())
    assert hits is not None
    assert [h.chunk.point_id for h in hits if h.chunk.status != "live"] == []
    assert {h.chunk.point_id for h in hits} == {c.point_id for c in STORED if c.status == "live"}
    assert len(hits) == len({h.chunk.point_id for h in hits})  # no duplicates
    assert 0 < len(DEAD) < len(CHUNKS) < LIMIT


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@with_examples
@given(flt=FILTERS)
def test_search_returns_exactly_what_the_oracle_accepts(
    backend: Backend, flt: SearchFilter
) -> None:
    hits = backend.search(flt)
    if hits is None:
        return
    got = [h.chunk.point_id for h in hits]
    assert len(got) == len(set(got)), "a point came back twice"
    assert set(got) == oracle(flt), flt
    for hit in hits:  # a hit carries the payload of its own point
        assert hit.chunk.doc_id == DOC_OF[hit.chunk.point_id]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@with_examples
@given(flt=FILTERS)
def test_count_is_the_number_of_points_the_oracle_accepts(
    backend: Backend, flt: SearchFilter
) -> None:
    for status in ("live", "deleted"):
        counted = backend.count(status, flt)
        assert counted is None or counted == len(oracle(flt, status)), (status, flt)
    assert backend.count("live", SearchFilter()) == len(CHUNKS) - len(DEAD)


@settings(max_examples=400, deadline=None)
@with_examples
@given(flt=FILTERS)
def test_the_oracle_follows_the_documented_rules(flt: SearchFilter) -> None:
    assert oracle(flt) == by_spec(flt)


def test_the_random_filters_cover_every_filter_field() -> None:
    """A field added to `SearchFilter` must be drawn by `FILTERS` (and known to `by_spec`)."""
    fields = {"doc_ids", "tenants", "readers", "path_prefix", "file_types"}
    assert set(SearchFilter.model_fields) == fields
