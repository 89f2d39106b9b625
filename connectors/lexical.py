"""Persistent BM25 over chunk text: tantivy by default, rank-bm25 as the oracle.

Both backends share everything that decides *what* is indexed and *which* chunks may match:
the tokenizer, the keyword terms of a chunk, the filter clauses of a query, and the
soft-delete / GC / batching semantics (`_BatchedIndex`). A backend only supplies storage
primitives, so the congruence tests compare two BM25 engines rather than two sets of rules.

Writes are staged in an in-memory overlay and applied once per `commit()`: tantivy then does
one delete-by-term + add per point and a single commit per batch, `get`/`tombstone` see the
batch's own writes, and search sees only committed state, identically in both backends.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import tantivy
from rank_bm25 import BM25Okapi

from ragstream.connectors.protocols import Hit, SearchFilter
from ragstream.core.errors import InvalidRequestError
from ragstream.core.filters import Where, chunk_fields
from ragstream.core.filters import matches as matches_where
from ragstream.core.ids import doc_prefixes, prefix_key
from ragstream.core.language import bigrams, cjk_runs, join_spans, normalized, word_spans
from ragstream.core.models import IndexedChunk

# One analyzer for every backend and the query (`tokenize`): full-width forms folded, its
# runs of CJK characters cut into overlapping bigrams (`core.language`), and the rest cut
# into words by tantivy's own parts (a Python regex disagrees on combining marks, e.g.
# Devanagari vowel signs): SimpleTokenizer (split on non-alphanumerics) + RemoveLongFilter(40
# bytes) + LowerCaser + English stop words + English (Snowball) stemmer. Stemming and stop
# words are what standard BM25 baselines use; they leave the words of other languages
# whole (a question matches documents in any language on the words they share).
# `ANALYZER_KEY` names the pipeline so an index built with another one is detected instead
# of silently mis-matching terms (a data dir's storage format migrates it: 2 -> 3).
# `WORD_ANALYZER` alone is what an index of storage format 2 analyzed all text with.
WORD_ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.stopword("english"))
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)
# tantivy indexes the analyzed tokens as they are: the text field reads them space-separated
_PRETOKENIZED = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
ANALYZER_NAME = "ragstream"
# what BM25 indexes per chunk is part of the key too: its section neighbours (see below)
SECTION_CONTEXT_WORDS = 256
ANALYZER_KEY = (
    "cjk_width+cjk_bigram+simple+remove_long40+lowercase+stop_en+stem_en+own2"
    f"+section{SECTION_CONTEXT_WORDS}"
)

# (field, any of values), all of them; a user's filter (`core.filters.Where`) rides along whole
Clauses = list[tuple[str, tuple[str, ...]] | Where]


def tokenize(text: str) -> list[str]:
    """The one tokenizer of both backends (documents and queries).

    Query text becomes plain terms, so user input can never be a query-syntax error.

    >>> tokenize("The Ｒｕｓｔ engines of 扁豆汤")
    ['rust', 'engin', '扁豆', '豆汤']
    """
    tokens: list[str] = []
    for piece, cjk in cjk_runs(normalized(text)):
        tokens.extend(bigrams(piece) if cjk else WORD_ANALYZER.analyze(piece))
    return tokens


def leading_words(text: str, budget: int) -> tuple[str, int]:
    """The first `budget` word-sized units of `text` (`core.language.word_spans`: a CJK
    character counts as one), space-separated where the text had space, and how many."""
    spans = word_spans(text)[:budget]
    return join_spans(text, spans), len(spans)


def lexical_text(chunk: IndexedChunk) -> str:
    """What BM25 indexes: the document title and section path, the chunk's situating
    sentence if it has one, then the chunk text.

    A chunk of a long paragraph rarely repeats its document's title; indexing the title and
    headings with every chunk (not in the displayed or cited text, and never in a vector,
    so moving text between files still reuses its vectors) lets the lexical leg match a
    query on the topic words that only the title carries. The LLM-written situating
    sentence (`chunk.situate`) does the same with the words of the whole document;
    in `context` it follows the header line (`operators.situate`), and the header itself is
    not indexed again: its words are the title and section path above.
    """
    parts: list[str] = []
    for header in (chunk.title, *chunk.section_path):
        if header and header not in parts and not chunk.text.startswith(header):
            parts.append(header)
    situation = chunk.context.partition("\n")[2]  # `operators.situate.situation_of`
    # the chunk's own words twice, its section neighbours once (see `section_contexts`)
    body = [chunk.text, chunk.text, chunk.lexical_context]
    return "\n".join([*parts, *([situation] if situation else []), *filter(None, body)])


class Sectioned(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def section_path(self) -> tuple[str, ...]: ...


def section_contexts(
    chunks: Sequence[Sectioned], budget_words: int = SECTION_CONTEXT_WORDS
) -> list[str]:
    """For each chunk of one document (in document order): the text of its section
    neighbours, nearest first, up to `budget_words` words (pure).

    Why: a chunk of one or two sentences is a poor BM25 document — the query's words are
    spread over the whole passage, and BM25 on the section around it ranks better on SciFact
    train (figures: docs/notes/retrieval-scifact.md). So BM25 scores each chunk on its section,
    with the chunk's own words counted twice so the chunk that holds the words still ranks
    first within its section; the dense leg stays chunk-precise, and nothing here is
    embedded, so an edit re-embeds as before and only re-indexes its neighbours' BM25 text.
    """
    sections: dict[tuple[str, ...], list[int]] = {}
    place: list[int] = []  # chunk index -> its position within its section
    for i, chunk in enumerate(chunks):
        members = sections.setdefault(chunk.section_path, [])
        place.append(len(members))
        members.append(i)
    out: list[str] = []
    for i, chunk in enumerate(chunks):
        members, at = sections[chunk.section_path], place[i]
        picked: dict[int, str] = {}
        left, step = budget_words, 1
        while left > 0 and (at - step >= 0 or at + step < len(members)):
            for k in (at - step, at + step):  # nearest first, the earlier one on a tie
                if 0 <= k < len(members) and left > 0:
                    picked[members[k]], used = leading_words(chunks[members[k]].text, left)
                    left -= used
            step += 1
        out.append(" ".join(picked[j] for j in sorted(picked)))
    return out


def chunk_terms(chunk: IndexedChunk) -> dict[str, tuple[str, ...]]:
    """The keyword values a chunk is filtered on (one source of truth for both backends)."""
    return {
        "status": (chunk.status,),
        "doc_id": (chunk.doc_id,),
        "tenant": (chunk.tenant,),
        "readers": chunk.readers if chunk.status == "live" else (),  # a tombstone: nobody's
        "file_type": (chunk.file_type,),
        "doc_prefixes": tuple(doc_prefixes(chunk.doc_id)),
    }


def filter_clauses(flt: SearchFilter, status: str = "live") -> Clauses:
    """Conjunction of (field, any-of values); `status` (a search's: live) is the first
    clause unless the filter implies it (`SearchFilter.status_condition`)."""
    held = flt.status_condition(status)
    clauses: Clauses = [] if held is None else [("status", (held,))]
    for field, values in (
        ("doc_id", flt.doc_ids),
        ("tenant", flt.tenants),
        ("readers", flt.readers),
        ("file_type", flt.file_types),
        ("doc_prefixes", None if flt.path_prefix is None else (prefix_key(flt.path_prefix),)),
    ):
        if values is not None:
            clauses.append((field, tuple(values)))
    if flt.where is not None:
        clauses.append(flt.where)
    return clauses


def matches(chunk: IndexedChunk, clauses: Clauses) -> bool:
    """`filter_clauses` evaluated on one chunk: the rank-bm25 mask, tantivy's query in Python."""
    terms = chunk_terms(chunk)
    return all(
        not set(terms[c[0]]).isdisjoint(c[1])
        if isinstance(c, tuple)
        else matches_where(c, chunk_fields(chunk))
        for c in clauses
    )


def _total(result: tantivy.SearchResult) -> int:
    """Total matches of a `count=True` search (tantivy 0.27's stub omits `.count`)."""
    return int(getattr(result, "count", None) or 0)


class _BatchedIndex(ABC):
    """Soft-delete, GC and per-batch commit semantics shared by both backends."""

    shares_points = False  # a separate index: it is written (and searched) on its own

    def __init__(self) -> None:
        # point_id -> staged chunk, or None for a staged hard delete (GC).
        self._pending: dict[str, IndexedChunk | None] = {}

    # -- storage primitives a backend supplies (all on committed state) --
    @abstractmethod
    def _apply(self, upserts: list[IndexedChunk], removals: list[str]) -> None:
        """Durably replace/remove points by id; afterwards search sees them."""

    @abstractmethod
    def _lookup(self, point_ids: list[str]) -> dict[str, IndexedChunk]: ...

    @abstractmethod
    def _expired(self, older_than: float) -> list[str]:
        """Committed tombstones with deleted_at < older_than."""

    @abstractmethod
    def _search(self, tokens: list[str], limit: int, clauses: Clauses) -> list[Hit]: ...

    @abstractmethod
    def _count(self, clauses: Clauses) -> int:
        """Committed chunks matching every clause."""

    @abstractmethod
    def _doc_live_ids(self, doc_id: str) -> set[str]:
        """Committed live point ids of one document."""

    @abstractmethod
    def _live_chunks(self) -> Iterator[IndexedChunk]:
        """Every committed live chunk."""

    # -- the LexicalIndex protocol --
    def upsert(self, chunks: Sequence[IndexedChunk]) -> None:
        for chunk in chunks:
            self._pending[chunk.point_id] = chunk

    def tombstone(self, point_ids: Sequence[str], deleted_at: float) -> None:
        """Keep the text, flip status and clear the readers (as the vector store's
        `tombstone`); an existing tombstone keeps its original deleted_at."""
        for chunk in self.get(point_ids):
            if chunk.status == "live":
                update = {"status": "deleted", "deleted_at": deleted_at, "readers": ()}
                self._pending[chunk.point_id] = chunk.model_copy(update=update)

    def live_doc_ids(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for chunk in self._live_chunks():
            out.setdefault(chunk.doc_id, set()).add(chunk.point_id)
        return out

    def live_ids(self, doc_id: str) -> set[str]:
        ids = self._doc_live_ids(doc_id)
        for pid, chunk in self._pending.items():
            if chunk is not None and chunk.doc_id == doc_id and chunk.status == "live":
                ids.add(pid)
            else:
                ids.discard(pid)
        return ids

    def gc(self, older_than: float) -> int:
        """Hard-delete old tombstones (staged like any write); never touches a live point."""
        doomed = [p for p in self._expired(older_than) if p not in self._pending]
        doomed += [
            pid
            for pid, c in self._pending.items()
            if c is not None and c.status == "deleted" and (c.deleted_at or 0.0) < older_than
        ]
        for pid in doomed:
            self._pending[pid] = None
        return len(doomed)

    def commit(self) -> None:
        if self._pending:
            upserts = [c for c in self._pending.values() if c is not None]
            removals = [pid for pid, c in self._pending.items() if c is None]
            self._apply(upserts, removals)
            self._pending.clear()

    def get(self, point_ids: Sequence[str]) -> list[IndexedChunk]:
        """Points in any status, in request order; staged writes win over committed ones."""
        wanted = list(dict.fromkeys(point_ids))
        found = self._lookup([p for p in wanted if p not in self._pending])
        staged = {p: c for p in wanted if (c := self._pending.get(p)) is not None}
        found.update(staged)
        return [found[p] for p in wanted if p in found]

    def search(self, query: str, limit: int, flt: SearchFilter) -> list[Hit]:
        tokens = tokenize(query)
        if not tokens or limit <= 0:
            return []
        return self._search(tokens, limit, filter_clauses(flt))

    def count(self, status: str, flt: SearchFilter | None = None) -> int:
        return self._count(filter_clauses(flt or SearchFilter(), status))


class LexicalIndexMismatch(RuntimeError):
    """The on-disk index was built with another analyzer or layout."""


def _check_analyzer(path: Path) -> None:
    marker = path / "ANALYZER"
    if marker.exists():
        built = marker.read_text().strip()
        if built != ANALYZER_KEY:
            raise LexicalIndexMismatch(
                f"lexical index in {path} was built with analyzer {built!r}, this version uses "
                f"{ANALYZER_KEY!r}: run `ragstream rebuild-lexical --data-dir ...`"
            )
    elif any(path.iterdir()):
        raise LexicalIndexMismatch(
            f"lexical index in {path} predates analyzer versioning: run `ragstream rebuild-lexical`"
        )
    else:
        marker.write_text(ANALYZER_KEY + "\n")


class TantivyIndex(_BatchedIndex):
    """On-disk tantivy index: native BM25 (k1=1.2, b=0.75), filters as terms in the query.

    The writer stays open (it holds the directory lock: one owning process).
    BM25 statistics include tombstones until GC; a negligible drift for a retention window.
    `heap_size` is the writer's indexing budget, not an allocation: its arena grows with what
    one commit stages (a flow batch), and the whole index's RSS stays flat as it grows
    (figures: docs/measurements.md, "tantivy commit and memory").
    Its schema has no `readers` field (a new field would not open an existing index): a
    search filtered by file permissions is refused (docs/guide/permissions.md).
    """

    _KEYWORDS = ("doc_id", "status", "tenant", "file_type", "doc_prefixes")

    def __init__(self, path: Path, heap_size: int = 64_000_000, threads: int = 1) -> None:
        super().__init__()
        path.mkdir(parents=True, exist_ok=True)
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("point_id", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_text_field("text", stored=False, tokenizer_name=ANALYZER_NAME)
        for name in self._KEYWORDS:
            sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
        sb.add_float_field("deleted_at", indexed=True)
        sb.add_bytes_field("chunk", stored=True)  # the IndexedChunk JSON, for `get`
        self._schema = sb.build()
        _check_analyzer(path)
        self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        self._index.register_tokenizer(ANALYZER_NAME, _PRETOKENIZED)
        self._writer = self._index.writer(heap_size=heap_size, num_threads=threads)
        self._closed = False

    def _terms(self, field: str, values: Iterable[str]) -> tantivy.Query:
        """A non-scoring any-of term filter (raw fields would otherwise add BM25 score)."""
        return tantivy.Query.const_score_query(
            tantivy.Query.term_set_query(self._schema, field, list(values)), 0.0
        )

    def _must(self, *queries: tantivy.Query) -> tantivy.Query:
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in queries])

    def _run(
        self, query: tantivy.Query, limit: int | None = None
    ) -> list[tuple[float, tantivy.Document]]:
        """(score, stored doc) pairs; limit None = every match (tantivy panics on limit 0)."""
        searcher = self._index.searcher()
        if limit is None:
            limit = _total(searcher.search(query, 1, count=True))
        limit = min(limit, searcher.num_docs)  # TopDocs preallocates `limit` slots
        if limit <= 0:
            return []
        hits = searcher.search(query, limit, count=False).hits
        return [(score, searcher.doc(addr)) for score, addr in hits]

    @staticmethod
    def _chunk(doc: tantivy.Document) -> IndexedChunk:
        return IndexedChunk.model_validate_json(doc["chunk"][0])

    def _apply(self, upserts: list[IndexedChunk], removals: list[str]) -> None:
        for pid in removals:
            self._writer.delete_documents_by_term("point_id", pid)
        for chunk in upserts:
            self._writer.delete_documents_by_term("point_id", chunk.point_id)
            doc = tantivy.Document()
            doc.add_text("point_id", chunk.point_id)
            doc.add_text("text", " ".join(tokenize(lexical_text(chunk))))
            for field, values in chunk_terms(chunk).items():
                for value in values if field in self._KEYWORDS else ():
                    doc.add_text(field, value)
            if chunk.deleted_at is not None:
                doc.add_float("deleted_at", chunk.deleted_at)
            doc.add_bytes("chunk", chunk.model_dump_json().encode())
            self._writer.add_document(doc)
        self._writer.commit()
        self._index.reload()  # the reader's own reload is asynchronous

    def _lookup(self, point_ids: list[str]) -> dict[str, IndexedChunk]:
        if not point_ids:
            return {}
        docs = self._run(self._terms("point_id", point_ids), len(point_ids))
        return {(c := self._chunk(doc)).point_id: c for _, doc in docs}

    def _expired(self, older_than: float) -> list[str]:
        old = tantivy.Query.range_query(
            self._schema,
            "deleted_at",
            tantivy.FieldType.Float,
            upper_bound=older_than,
            include_upper=False,
        )
        docs = self._run(self._must(old, self._terms("status", ["deleted"])))
        return [doc["point_id"][0] for _, doc in docs]

    def _filters(self, clauses: Clauses) -> list[tantivy.Query]:
        """The clauses as term filters; one on a field this schema lacks is refused."""
        terms = [c for c in clauses if isinstance(c, tuple)]
        if len(terms) < len(clauses):
            raise InvalidRequestError(
                "a metadata filter needs the BM25 leg inside the vector store "
                "(store.lexical_backend = 'sparse', the default of a new data dir); this data "
                "dir's tantivy index cannot filter by metadata (docs/guide/filters.md)"
            )
        if any(field not in self._KEYWORDS for field, _ in terms):
            raise InvalidRequestError(
                "file permissions are mirrored (a source with permissions = 'posix'), which "
                "needs the BM25 leg inside the vector store (store.lexical_backend = "
                "'sparse'); this data dir's tantivy index cannot filter by them"
            )
        return [self._terms(field, values) for field, values in terms]

    def _search(self, tokens: list[str], limit: int, clauses: Clauses) -> list[Hit]:
        filters = self._filters(clauses)
        text = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", t))
                for t in tokens
            ]
        )
        query = self._must(text, *filters)
        return [Hit(chunk=self._chunk(doc), score=score) for score, doc in self._run(query, limit)]

    def _count(self, clauses: Clauses) -> int:
        searcher = self._index.searcher()
        return _total(searcher.search(self._must(*self._filters(clauses)), 1, count=True))

    def doc_freqs(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """From the segment statistics (tombstoned chunks count until GC: IDF drifts
        slightly, which a coverage weight tolerates)."""
        searcher = self._index.searcher()
        return searcher.num_docs, {t: searcher.doc_freq("text", t) for t in set(terms)}

    def _doc_live_ids(self, doc_id: str) -> set[str]:
        query = self._must(self._terms("doc_id", [doc_id]), self._terms("status", ["live"]))
        return {doc["point_id"][0] for _, doc in self._run(query)}

    def _live_chunks(self) -> Iterator[IndexedChunk]:
        for _, doc in self._run(self._terms("status", ["live"])):
            yield self._chunk(doc)

    def close(self) -> None:
        """Commit what is staged and let background merges finish (releases the lock)."""
        if not self._closed:
            self.commit()
            self._writer.wait_merging_threads()  # consumes the writer: close only once
            self._closed = True


def retokenize_tantivy(path: Path) -> int:
    """Rebuild the tantivy index at `path` with this analyzer from the chunks it stores,
    tombstones included (an analyzer change: the storage format 3 migration); how many.

    The stored chunks are read through tantivy's own schema on disk, written to a sibling
    directory, and swapped in whole, so a failure leaves the old index as it was."""
    if not (path / "meta.json").exists():
        return 0
    old = tantivy.Index.open(str(path))
    searcher = old.searcher()
    found = searcher.search(tantivy.Query.all_query(), max(1, searcher.num_docs)).hits
    chunks = [TantivyIndex._chunk(searcher.doc(addr)) for _, addr in found]
    fresh = path.with_name(path.name + ".retokenized")
    shutil.rmtree(fresh, ignore_errors=True)
    index = TantivyIndex(fresh)
    try:
        for start in range(0, len(chunks), 2000):  # bounded writer memory: one commit a slice
            index.upsert(chunks[start : start + 2000])
            index.commit()
    finally:
        index.close()
    del old, searcher
    retired = path.with_name(path.name + ".retired")
    shutil.rmtree(retired, ignore_errors=True)
    path.rename(retired)
    fresh.rename(path)
    shutil.rmtree(retired, ignore_errors=True)
    return len(chunks)


class RankBM25Index(_BatchedIndex):
    """Exact Okapi BM25 (rank_bm25, k1=1.2, b=0.75 as tantivy) over live chunks; the oracle.

    Persisted as one JSONL file rewritten atomically per commit, the model rebuilt lazily
    after a change: fine for small corpora and tests, not for 100k chunks.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        path.mkdir(parents=True, exist_ok=True)
        self._file = path / "chunks.jsonl"
        self._chunks: dict[str, IndexedChunk] = {}
        if self._file.exists():
            for line in self._file.read_text(encoding="utf-8").splitlines():
                chunk = IndexedChunk.model_validate_json(line)
                self._chunks[chunk.point_id] = chunk
        self._model: tuple[BM25Okapi, list[IndexedChunk]] | None = None

    def _apply(self, upserts: list[IndexedChunk], removals: list[str]) -> None:
        for pid in removals:
            self._chunks.pop(pid, None)
        self._chunks.update((c.point_id, c) for c in upserts)
        tmp = self._file.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.writelines(c.model_dump_json() + "\n" for c in self._chunks.values())
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self._file)
        self._model = None

    def _lookup(self, point_ids: list[str]) -> dict[str, IndexedChunk]:
        return {p: self._chunks[p] for p in point_ids if p in self._chunks}

    def _expired(self, older_than: float) -> list[str]:
        return [
            c.point_id
            for c in self._chunks.values()
            if c.status == "deleted" and (c.deleted_at or 0.0) < older_than
        ]

    def _bm25(self) -> tuple[BM25Okapi, list[IndexedChunk]] | None:
        if self._model is None:
            live = [c for c in self._chunks.values() if c.status == "live"]
            corpus = [tokenize(lexical_text(c)) for c in live]
            if not any(corpus):  # BM25Okapi divides by the corpus's token count
                return None
            self._model = (BM25Okapi(corpus, k1=1.2, b=0.75), live)
        return self._model

    def doc_freqs(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        model = self._bm25()
        wanted = set(terms)
        if model is None:
            return 0, dict.fromkeys(wanted, 0)
        per_doc = model[0].doc_freqs
        return len(per_doc), {t: sum(t in doc for doc in per_doc) for t in wanted}

    def _search(self, tokens: list[str], limit: int, clauses: Clauses) -> list[Hit]:
        model = self._bm25()
        if model is None:
            return []
        bm25, live = model
        wanted = set(tokens)
        # Mask before ranking: only filtered chunks sharing a term are candidates (as tantivy).
        candidates = [
            i
            for i, chunk in enumerate(live)
            if not wanted.isdisjoint(bm25.doc_freqs[i]) and matches(chunk, clauses)
        ]
        if not candidates:
            return []
        scores = bm25.get_batch_scores(tokens, candidates)
        ranked = sorted(zip(scores, candidates, strict=True), key=lambda s: -s[0])[:limit]
        return [Hit(chunk=live[i], score=float(score)) for score, i in ranked]

    def _count(self, clauses: Clauses) -> int:
        return sum(matches(c, clauses) for c in self._chunks.values())

    def _doc_live_ids(self, doc_id: str) -> set[str]:
        return {p for p, c in self._chunks.items() if c.doc_id == doc_id and c.status == "live"}

    def _live_chunks(self) -> Iterator[IndexedChunk]:
        return (c for c in self._chunks.values() if c.status == "live")

    def close(self) -> None:
        self.commit()
