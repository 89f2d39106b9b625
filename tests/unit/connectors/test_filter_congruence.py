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

Every doc also carries metadata fields of each type (some missing, a tag list, a bool, dates
with and without a time, a value kept as text against its field's type), and the drawn filters
carry a random metadata filter (`core.filters`: any tree of comparisons under AND / OR / NOT,
checked against the catalogue) that each store must apply exactly as `core.filters.matches`.
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
from ragstream.core.filters import Condition, Logic, Where, check
from ragstream.core.filters import matches as where_matches
from ragstream.core.ids import doc_prefixes, prefix_key
from ragstream.core.metadata import FieldType
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
# each doc's metadata, by its position in DOCS (cycled): every type, missing fields, a list,
# bools, instants with and without a time, a value its field's type could not read (text)
METAS: list[dict[str, object]] = [
    {
        "tags": ["finance", "q3"],
        "year": 2024,
        "score": 0.5,
        "draft": "true",
        "date": "2024-01-05T00:00:00Z",
        "author": "Ada",
    },
    {
        "tags": ["ops"],
        "year": 2023,
        "score": 1.25,
        "draft": "false",
        "date": "2023-12-31T23:59:59Z",
        "author": "Grace",
    },
    {},
    {"tags": ["finance"], "year": 1999, "date": "2024-01-05T12:30:00Z", "author": "Ada"},
    {"tags": [], "score": -3.0, "draft": "true", "date": "not a date", "year": "soon"},
    {"author": "Grace Hopper", "date": "2022-06-01T08:00:00Z", "year": 2024, "score": 0.5},
    {"tags": ["q3", "ops", "finance"], "draft": "false"},
]
META_TYPES: dict[str, FieldType] = {
    "tags": "keywords",
    "year": "integer",
    "score": "float",
    "draft": "bool",
    "date": "datetime",
    "author": "keyword",
}
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
                    meta=METAS[d % len(METAS)],
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
        and (flt.where is None or where_matches(flt.where, chunk_payload_view(c)))
    }


def chunk_payload_view(c: IndexedChunk) -> dict[str, object]:
    """The payload keys a metadata filter reads, restated from the stored payload's layout."""
    return {
        "doc_id": c.doc_id,
        "source": c.doc_id.partition(":")[0],
        "file_type": c.file_type,
        "doc_prefixes": doc_prefixes(c.doc_id),
        "meta": dict(c.meta),
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
VALUES: dict[str, list[object]] = {  # what a comparison with each field may draw
    "tags": ["finance", "ops", "q3", "none"],
    "year": [1999, 2023, 2024, "2024", 0],
    "score": [0.5, 1.25, -3, 0, "0.5"],
    "draft": [True, False, "true", "false"],
    "date": [
        "2024-01-05",
        "2024-01-05T12:30:00Z",
        "2023-12-31T23:59:59+00:00",
        "2022-06-01",
        "-30d",
        "+1d",
    ],
    "author": ["Ada", "Grace", "Grace Hopper", "ada"],
    "doc_id": [*DOC_IDS[:4], "nope:x"],
    "file_type": [*FILE_TYPES, "MD"],
    "source": ["src", "src2", "other", "x"],
}
ORDERED = {"year", "score", "date"}


@st.composite
def comparison(draw: st.DrawFn) -> Condition:
    name = draw(st.sampled_from(sorted(VALUES)))
    ops = ["==", "!=", "exists"]
    ops += ["<", "<=", ">", ">="] if name in ORDERED else []
    ops += ["in", "not in"] if name not in ("score", "date", "draft") else []
    op = draw(st.sampled_from(ops))
    if op == "exists":
        return Condition(field=name, operator="exists", value=draw(st.booleans()))
    if op in ("in", "not in"):
        values = draw(st.lists(st.sampled_from(VALUES[name]), min_size=1, max_size=3))
        return Condition(field=name, operator=op, value=values)
    return Condition(field=name, operator=op, value=draw(st.sampled_from(VALUES[name])))


TREES = st.recursive(
    comparison(),
    lambda inner: st.builds(
        Logic,
        operator=st.sampled_from(["AND", "OR", "NOT"]),
        conditions=st.lists(inner, min_size=1, max_size=3),
    ),
    max_leaves=6,
)
WHERES: st.SearchStrategy[Where | None] = st.none() | TREES.map(
    lambda tree: check(tree, META_TYPES)
)
FILTERS = st.builds(
    SearchFilter,
    doc_ids=allow_list(DOC_IDS, UNKNOWN_DOCS),
    tenants=allow_list(TENANTS, UNKNOWN_TENANTS),
    readers=allow_list(READERS, UNKNOWN_READERS),
    path_prefix=PREFIXES,
    file_types=allow_list(FILE_TYPES, UNKNOWN_TYPES),
    where=WHERES,
)


def where(text: str) -> Where:
    from ragstream.core.filters import parse_where

    return check(parse_where(text), META_TYPES)


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
    SearchFilter(where=where("tags = finance and not draft")),
    SearchFilter(where=where("date = 2024-01-05")),  # the whole day, either time
    SearchFilter(where=where("year >= 2024")),  # "soon" (text) never matches a range
    SearchFilter(where=where("year != 2024")),  # a doc without `year` matches
    SearchFilter(where=where("tags exists")),  # an empty list is not there
    SearchFilter(where=where("not tags exists")),
    SearchFilter(where=where("score = 0.5 or author in (Grace, 'Grace Hopper')")),
    SearchFilter(where=where("date < 2024-01-01 and date exists")),
    SearchFilter(where=where("folder = src:a/"), tenants=("t1",)),
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
        store.index_fields(META_TYPES)
        store.upsert(CHUNKS, VECTORS)
        store.tombstone(DEAD, deleted_at=1.0)
        yield Backend(lambda flt: store.search(QUERY_VECTOR, LIMIT, flt), store.count)
        store.close()
    elif name in SPARSE_BACKENDS:
        kind, url = SPARSE_BACKENDS[name]
        store = open_vector_store(kind, base, "idx", EMB, url=url, sparse=True)
        store.index_fields(META_TYPES)
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
            # its schema has neither readers nor metadata
            if name == "tantivy" and (flt.readers is not None or flt.where is not None):
                with pytest.raises(InvalidRequestError, match="sparse"):
                    index.search(WORD, LIMIT, flt)
                return None
            return index.search(WORD, LIMIT, flt)

        def count(status: str, flt: SearchFilter) -> int | None:
            if name == "tantivy" and (flt.readers is not None or flt.where is not None):
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
    fields = {"doc_ids", "tenants", "readers", "path_prefix", "file_types", "where"}
    assert set(SearchFilter.model_fields) == fields
