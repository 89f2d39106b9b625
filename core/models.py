"""Pydantic models that travel on every arrow of the ingest and query pipelines.

Every stage boundary carries one of these, so a malformed value is rejected where it is
produced instead of corrupting a store three stages later.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ragstream.core.metadata import FieldType, MetaOrigin, RawValue, StoredValue

# "permissions": only who may read it changed (a chmod, chown, setfacl, a folder's mode)
EventKind = Literal["upsert", "delete", "permissions"]
# "link": a text that is one hyperlink and nothing else (a table-of-contents entry)
BlockKind = Literal["heading", "paragraph", "list_item", "table_row", "code", "caption", "link"]
# where a text came from: the file's own text (layer), or OCR of a page image
TextOrigin = Literal["text", "ocr"]
# a region of a page as fractions of its width and height from the top-left corner:
# (left, top, right, bottom), each in 0..1, whatever the page's resolution
PageBox = tuple[float, float, float, float]
PointStatus = Literal["live", "deleted"]
Stage = Literal["source", "read", "parse", "chunk", "embed", "write", "guard"]


class Frozen(BaseModel):
    """The base of the immutable models: frozen (hashable, never changed in place) and strict
    (an unknown field is an error, not ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class FileFingerprint(Frozen):
    """A document's version: what the catch-up scan compares before it reads a byte (its
    `token`), plus the xxh3-128 of the bytes that were read, once they were: a touched file
    with the same bytes is not a changed one (`ragstream verify`), and a citation names the
    bytes it quotes.

    A folder's file has a size and an mtime, and its token is `size:mtime`. A source that
    names its versions itself gives them as `digest` with a `commit`: a git blob id with the
    commit it was read at, an S3 object's ETag (its `commit` too); the token is then that
    name, and `mtime_ns` is 0 (a git blob's size is only known once it is read, so `size`
    is 0 there too)."""

    size: int
    mtime_ns: int
    digest: str = ""  # "" until the file was read (a scan event), or for points indexed before
    commit: str = ""  # the version a source named (git: the commit read at); "" for a folder

    @property
    def token(self) -> str:
        """The opaque version token the scan, the stores' fingerprints and the audit compare."""
        return version_token(self.size, self.mtime_ns, self.digest, self.commit)


def version_token(size: int, mtime_ns: int, digest: str, commit: str) -> str:
    """A version's token: the name a source gave it (`digest`, given with a `commit`), else
    `size:mtime` (a folder's file).

    >>> version_token(12, 34, "", ""), version_token(0, 0, "9f2c", "a1b2")
    ('12:34', '9f2c')
    """
    return digest if digest and commit else f"{size}:{mtime_ns}"


class FileEvent(Frozen):
    """A change to one document of a source (or its disappearance)."""

    source: str
    root: str  # the folder, or the git repository
    path: str  # the document's locator: an absolute path, or `git+file://repo@ref:path`
    doc_id: str
    kind: EventKind
    fingerprint: FileFingerprint | None = None  # None for deletes


# (start, end, kind) in a chunk's `text` of a block that is no sentence of prose: a heading
# or title, a caption, a table row, a lone link (docling's labels, `Block.kind`); code may
# answer ("which command installs it?"), and docling reads an indented note as code
NonProse = tuple[int, int, BlockKind]
NON_PROSE_KINDS: frozenset[str] = frozenset({"heading", "caption", "table_row", "link"})


class Block(Frozen):
    """One structural unit of a parsed document: a heading, paragraph, list item, table row."""

    kind: BlockKind
    text: str
    section_path: tuple[str, ...] = ()
    page: int | None = None
    origin: TextOrigin = "text"
    bbox: PageBox | None = None  # OCR text: the box of its lines on `page`
    confidence: float | None = None  # OCR text: the engine's mean confidence, 0..1


class ParsedDocument(Frozen):
    """A file after parsing: its identity, file version and structural blocks in reading
    order; what the chunker reads."""

    doc_id: str
    source: str
    path: str
    file_type: str
    title: str
    fingerprint: FileFingerprint
    blocks: tuple[Block, ...]
    pages: int | None = None  # paged formats (PDF, TIFF, images): how many pages it has
    ocr_pages: tuple[int, ...] = ()  # the pages whose text came from OCR
    parser: str = ""  # the parser key: what its reading depended on besides the bytes
    # its own metadata as read (front matter, the file's properties, the source, the
    # filesystem), each field from the strongest place that names it (`core.metadata`)
    metadata: dict[str, RawValue] = Field(default_factory=dict)
    metadata_origin: dict[str, MetaOrigin] = Field(default_factory=dict)
    metadata_notes: tuple[str, ...] = ()  # what could not be read (a front matter that is no YAML)


class Chunk(Frozen):
    """A token-bounded piece of a document; identity = (doc_id, content_hash, occurrence)."""

    point_id: str
    doc_id: str
    ordinal: int
    occurrence: int
    content_hash: str
    text: str
    context: str = ""  # contextual header: embedded with `text`, never shown or cited
    section_path: tuple[str, ...] = ()
    page: int | None = None
    char_start: int
    char_end: int
    origin: TextOrigin = "text"  # "ocr" when any of its text was read by OCR
    bbox: PageBox | None = None  # OCR text: the box of its lines on `page`
    confidence: float | None = None  # OCR text: mean engine confidence, 0..1
    non_prose: tuple[NonProse, ...] = ()


class EmbedderVersion(Frozen):
    """Everything that decides a vector: a change in any field means a different vector space."""

    name: str
    fingerprint: str
    dimension: int
    normalize: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""

    @property
    def slug(self) -> str:
        return f"{name_slug(self.name)}-{self.dimension}-{self.fingerprint[:8]}"


def name_slug(name: str) -> str:
    """The part of a version's slug its model name gives (the slug goes on with the
    dimension and the fingerprint).

    >>> name_slug("sentence-transformers/all-MiniLM-L6-v2")
    'all-minilm-l6-v2'
    """
    base = "".join(c if c.isalnum() else "-" for c in name.rsplit("/", 1)[-1].lower())
    return base.strip("-")


VectorOrigin = Literal["", "embedded", "reused", "kept"]


class IndexedChunk(Frozen):
    """A chunk as both stores hold it: the chunk plus where it came from and its status."""

    point_id: str
    doc_id: str
    source: str
    path: str
    file_type: str
    title: str = ""
    ordinal: int
    content_hash: str
    text: str
    context: str = ""  # the contextual header embedded with `text` (empty when off)
    section_path: tuple[str, ...] = ()
    page: int | None = None
    char_start: int
    char_end: int
    # the spans of `text` that are no prose (headings, captions, table rows, links); empty
    # for a chunk indexed before they were recorded (`query.answerable.prose_spans` reads
    # its heading from `section_path` then)
    non_prose: tuple[NonProse, ...] = ()
    chunker: str = ""  # ChunkerConfig.key that cut it (empty: indexed before it was recorded)
    parser: str = ""  # its file's parser key (operators.parse.parser_key; empty: not recorded)
    # BM25 only (never in a vector payload): its section neighbours' text, see
    # connectors.lexical.section_contexts
    lexical_context: str = ""
    embedder: str = ""  # EmbedderVersion.slug; empty in the lexical index (embedder-free)
    status: PointStatus = "live"
    deleted_at: float | None = None
    file_size: int = 0
    file_mtime_ns: int = 0
    file_digest: str = ""  # xxh3-128 of the file's bytes as read for this version (git: blob id)
    file_commit: str = ""  # a git source's commit this version was read at ("" for a folder)
    indexed_at: float = 0.0  # when this file version was written (0: before it was recorded)
    tenant: str = ""
    # who may read it (core.permissions): its file's principals where its source mirrors
    # permissions, and its source's token (`source:<name>`); empty: not stamped
    readers: tuple[str, ...] = ()
    readers_fp: str = ""  # the fingerprint of the stamp (`off`: its source mirrors none)
    readers_reason: str = ""  # why the stamp fell back to the owner alone
    # how the vector got here at the file's last change: encoded then ("embedded"), copied
    # from a point with the same content hash ("reused"), or left as it was ("kept": the
    # chunk was unchanged or only moved); empty before it was recorded
    vector_origin: VectorOrigin = ""
    origin: TextOrigin = "text"  # "ocr": (some of) its text was read by OCR from a page image
    bbox: PageBox | None = None  # OCR text: the box of its lines on `page`
    ocr_confidence: float | None = None  # OCR text: the engine's mean confidence, 0..1
    pages: int | None = None  # the file's page count (paged formats and images)
    ocr_pages: int = 0  # how many of the file's pages were read by OCR
    # its document's metadata fields in their stored form (`core.metadata`), where each came
    # from, and what could not be read as its field's type (kept as text)
    meta: dict[str, StoredValue] = Field(default_factory=dict)
    meta_origin: dict[str, MetaOrigin] = Field(default_factory=dict)
    meta_notes: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> FileFingerprint:
        return FileFingerprint(
            size=self.file_size,
            mtime_ns=self.file_mtime_ns,
            digest=self.file_digest,
            commit=self.file_commit,
        )


class DeadLetter(Frozen):
    """A file that could not be indexed, why, and at which stage; retried when it changes."""

    doc_id: str
    path: str
    stage: Stage
    reason: str
    at: float
    fingerprint: FileFingerprint | None = None
    parser: str = ""  # the parser key it was read under (empty: not recorded)


class Redaction(Frozen):
    """Secrets found in a document and replaced before chunking (visible in status)."""

    doc_id: str
    path: str
    kinds: tuple[str, ...]


class DocOutcome(Frozen):
    """What one pass did to one document (emitted by the index step, summed into SyncReport)."""

    doc_id: str
    changed: bool = False
    deleted: bool = False
    chunks_live: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_moved: int = 0
    chunks_tombstoned: int = 0
    chunks_restamped: int = 0  # chunks that took a new permission stamp, payload only
    dead_letter: DeadLetter | None = None
    # why nothing was written for it this pass though it is good input (the embedding
    # endpoint is down): the next pass, or `watch` once the endpoint answers, indexes it
    pending: str = ""
    redactions: tuple[str, ...] = ()
    at: float = 0.0  # when the batch holding it was written (0: no write, e.g. a dead letter)
    # save → searchable: `at` minus the file's mtime, for a changed document
    lag_s: float | None = None


class DeadLetterView(Frozen):
    """A file a sync pass could not index, as `SyncReport.dead_letters` lists it.

    Attributes:
        path: The file's path.
        stage: Where it failed: `source`, `read`, `parse`, `chunk`, `embed`, `write` or `guard`.
        reason: Why, in words.
    """

    path: str
    stage: str
    reason: str


class GuardReport(Frozen):
    """Why the mass-delete guard stopped a pass."""

    source: str
    would_delete: int
    docs_indexed: int
    max_fraction: float
    reason: str


class SyncReport(BaseModel):
    """Totals of one `sync` pass (or of a `watch` run so far): what `sync --json` prints and
    `ragstream.sync` returns.

    Attributes:
        docs_seen: Files looked at.
        docs_changed: Files re-indexed.
        docs_deleted: Documents whose file is gone from disk.
        chunks_live: Live chunks of the changed documents after the pass.
        chunks_embedded: Chunks encoded now.
        chunks_reused: Chunks whose vector was copied from a stored chunk with the same text.
        chunks_moved: Chunks whose position changed only.
        chunks_tombstoned: Chunks soft-deleted in this pass.
        chunks_restamped: Chunks whose payload alone was rewritten, nothing re-embedded: their
            file's permissions changed (their stamp of who may read them), or its metadata
            (front matter edited, the file touched) or title.
        dead_letters: Files that could not be indexed: path, stage, reason.
        docs_pending: Good files left for the next pass: the embedding endpoint did not
            answer, or the model behind its name changed (`pending` names them,
            `pending_reason` says why). Not dead letters: nothing is wrong with them.
        embed_tokens: Tokens sent to a remote embedding endpoint (its `usage`); 0 for a
            local model. `chunks_reused` beside it are the chunks not sent at all.
        guard: Set when the mass-delete guard held deletions back (the CLI exits 3).
        secrets_redacted: Documents in which secrets were found and replaced before chunking.
        seconds: Wall time of the pass.
    """

    docs_seen: int = 0
    docs_changed: int = 0
    docs_deleted: int = 0
    chunks_live: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_moved: int = 0
    chunks_tombstoned: int = 0
    chunks_restamped: int = 0
    dead_letters: list[DeadLetterView] = Field(default_factory=list)
    docs_pending: int = 0
    pending: list[str] = Field(default_factory=list)
    pending_reason: str = ""
    embed_tokens: int = 0
    guard: GuardReport | None = None
    secrets_redacted: int = 0
    seconds: float = 0.0

    def add(self, outcome: DocOutcome) -> None:
        """Count one document's outcome into these totals."""
        self.docs_changed += int(outcome.changed)
        self.docs_deleted += int(outcome.deleted)
        self.chunks_embedded += outcome.chunks_embedded
        self.chunks_reused += outcome.chunks_reused
        self.chunks_moved += outcome.chunks_moved
        self.chunks_tombstoned += outcome.chunks_tombstoned
        self.chunks_restamped += outcome.chunks_restamped
        self.secrets_redacted += len(outcome.redactions)
        if outcome.pending:
            self.docs_pending += 1
            self.pending.append(outcome.doc_id)
            self.pending_reason = outcome.pending
        if outcome.dead_letter is not None:
            d = outcome.dead_letter
            self.dead_letters.append(DeadLetterView(path=d.path, stage=d.stage, reason=d.reason))


# --- blue/green reindex (docs/architecture.md, "Blue/green reindex") ----------------------

ReindexPhase = Literal["backfilling", "ready", "promoted", "rolled_back"]


class ReindexSide(Frozen):
    """One collection of a reindex and how to load its embedder (`load_embedder` spec)."""

    collection: str
    embedder: EmbedderVersion
    spec: str


class ReindexProgress(Frozen):
    """Backfill progress of the new side, as the process running the backfill last saw it."""

    done: int = 0  # live chunks of the old side checked so far in this pass
    total: int = 0  # live chunks of the old side when the pass started
    embedded: int = 0  # encoded by the new embedder (cumulative over restarts)
    pass_embedded: int = 0  # encoded in this pass alone (a resumed pass re-encodes nothing)
    reused: int = 0  # vectors found already written (resumed) or shared by content hash
    rate: float = 0.0  # chunks per second in this pass
    eta_s: float | None = None
    updated_at: float = 0.0


class GateResult(Frozen):
    """Why a promote was allowed or refused."""

    passed: bool
    missing: int  # live on the old side, not live (or different) on the new one
    stale: int  # live on the new side, not live on the old one
    eval_metric: str | None = None
    eval_old: float | None = None
    eval_new: float | None = None
    eval_margin: float | None = None
    reason: str
    at: float


class ReindexRecord(Frozen):
    """An open blue/green reindex, persisted in `<state_dir>/reindex.json`.

    `old` is the side that was live when it started, `new` the one being built; which of them
    serves is the live pointer's business, never this record's. While a record exists every
    change is written to both sides, so promote and rollback are each one pointer swap.
    """

    old: ReindexSide
    new: ReindexSide
    phase: ReindexPhase
    started_at: float
    promoted_at: float | None = None
    progress: ReindexProgress = ReindexProgress()
    gate: GateResult | None = None


class SideCounts(Frozen):
    """One side of a blue/green reindex as `reindex status` shows it.

    Attributes:
        collection: The side's collection, `<index>__<embedder slug>`.
        embedder: The embedder version its vectors were encoded with.
        live: Live chunks on this side.
        deleted: Tombstoned chunks on this side (until `gc`).
        serving: True for the side queries use now.
    """

    collection: str
    embedder: EmbedderVersion
    live: int
    deleted: int
    serving: bool


class ReindexStatus(BaseModel):
    """`reindex status`: the record (None = no reindex open) plus counts read from the stores."""

    open: bool
    embedder: EmbedderVersion | None  # the embedder queries use right now
    collection: str | None  # the live collection
    record: ReindexRecord | None = None
    sides: list[SideCounts] = Field(default_factory=list)
    lag: int | None = None  # live chunks of the serving side that the other side lacks
    message: str = ""


class StartOptions(BaseModel):
    """The body of `reindex start`: the embedder whose side opens."""

    model_config = ConfigDict(extra="forbid")

    embedder: str


class PromoteOptions(BaseModel):
    """The optional eval gate of a promote (a BEIR dataset indexed in this data dir)."""

    model_config = ConfigDict(extra="forbid")

    eval_dataset: str | None = None
    eval_split: str = "test"
    eval_margin: float | None = None  # default: settings.reindex_eval_margin
    eval_limit_queries: int | None = None


class CleanupOptions(BaseModel):
    """The body of `reindex cleanup`: `confirm` must be True to drop the retired side."""

    model_config = ConfigDict(extra="forbid")

    confirm: bool = False


class EndpointStatus(Frozen):
    """A remote embedding endpoint as this process sees it (`status`, `/v1/ready`).

    Attributes:
        base_url: Where it is (no key, no header is ever shown).
        model: The model name sent.
        state: "unknown" (not asked yet), "ok", "down" (no answer after the retries: queries
            that need a new vector get 503, files wait as pending) or "drifted" (the model
            behind the name changed: nothing is written, queries are refused).
        detail: Why it is down or drifted, and what to do.
        since: When it entered this state (Unix seconds).
        tokens_sent: Tokens sent since this process started (the endpoint's `usage`).
        requests: Requests answered.
        retried: Retries they took.
    """

    base_url: str
    model: str
    state: Literal["unknown", "ok", "down", "drifted"]
    detail: str = ""
    since: float = 0.0
    tokens_sent: int = 0
    requests: int = 0
    retried: int = 0


class StatusReport(BaseModel):
    """What `ragstream status`, `GET /v1/status` and `Client.status` report; loads no model.

    Attributes:
        docs: Documents with live chunks.
        chunks_live: Live chunks in the vector store.
        chunks_deleted: Tombstoned chunks waiting for `gc`.
        lexical_live: Live chunks in the BM25 leg.
        embedder: The embedder version of the live collection (what queries use).
        collection: The live collection.
        last_sync: When the last sync pass finished (Unix seconds).
        dead_letters: Files that could not be indexed, with stage and reason.
        reranker: The configured cross-encoder, or that none is configured.
        redactions: Documents indexed with secrets replaced, and which kinds.
        reindex: An open blue/green reindex (see `reindex status`).
        drift: Documents per drift class found by the last audit.
        verified_at: When that audit ran.
        embedding_endpoint: The remote embedding endpoint of the live collection, as the
            process that serves queries sees it (None: a local model, or no model open).
        warnings: What a person should act on, in words.
    """

    docs: int
    chunks_live: int
    chunks_deleted: int
    lexical_live: int
    embedder: EmbedderVersion | None
    collection: str | None
    last_sync: float | None
    dead_letters: list[DeadLetter]
    reranker: str = ""  # the configured cross-encoder, or that none is configured
    redactions: list[Redaction] = Field(default_factory=list)
    reindex: ReindexRecord | None = None  # an open blue/green reindex (see `reindex status`)
    # documents per drift class found by the last `verify` (or `watch`'s scheduled audit)
    drift: dict[str, int] | None = None
    verified_at: float | None = None
    embedding_endpoint: EndpointStatus | None = None
    # what a person should act on, in words: an answerability decision fitted on another
    # embedder's cosines than the live one's, or one that cannot be read
    warnings: list[str] = Field(default_factory=list)


# --- the index audit: `ragstream verify` and the per-file ledger (`ragstream files`) --------

DriftKind = Literal[
    "stale",  # the file changed on disk since the version the index holds
    "orphan",  # the file is gone (or now excluded) but chunks are live
    "missing",  # the file is present and indexable but no chunk is live
    "leg_mismatch",  # the doc's live point ids differ between the vector store and BM25
    "foreign_embedder",  # live points tagged with another embedder than the live one
    "duplicate",  # live points beyond the one derived id per (doc, content hash, occurrence)
    "retry_due",  # a dead letter whose file has changed (or vanished) since
]
DRIFT_KINDS: tuple[DriftKind, ...] = (
    "stale",
    "orphan",
    "missing",
    "leg_mismatch",
    "foreign_embedder",
    "duplicate",
    "retry_due",
)


class DriftExample(Frozen):
    """One drifted document and what is wrong with it, in words."""

    doc_id: str
    detail: str


class DriftClass(Frozen):
    """One drift class of a `VerifyReport`: how many documents, and the first few."""

    count: int = 0  # documents in this class
    examples: tuple[DriftExample, ...] = ()  # the first few, sorted by doc id


class VerifyReport(BaseModel):
    """What `ragstream verify` found: each drift class with its documents."""

    ok: bool  # no drift at all
    drift: dict[DriftKind, DriftClass]
    drifted: list[str] = Field(default_factory=list)  # every drifted doc (--repair re-queues)
    docs_checked: int = 0
    files_on_disk: int = 0
    chunks_checked: int = 0
    sampled: bool = False  # `--sample N`: N random documents, not all
    embedder: str = ""  # the live embedder slug the points were checked against
    seconds: float = 0.0
    at: float = 0.0
    repaired: VerifyReport | None = None  # with --repair: the report *before* the repair

    def counts(self) -> dict[str, int]:
        """Documents per drift class (what `status` shows as `drift`)."""
        return {kind: c.count for kind, c in self.drift.items()}


FileState = Literal[
    "indexed", "owner-only", "redacted", "dead", "excluded", "stale", "missing", "orphan"
]
FILE_STATES: tuple[FileState, ...] = (
    "indexed",
    "owner-only",  # indexed, its permissions unreadable: readable by its owner alone
    "redacted",
    "dead",
    "excluded",
    "stale",
    "missing",
    "orphan",
)


class FieldInfo(Frozen):
    """One metadata field of the catalogue (`ragstream fields`, `GET /v1/fields`): its type,
    how many of the caller's documents carry it, and its commonest values.

    Attributes:
        name: What a filter names it (`tags`; `meta.tags` names it too).
        type: keyword, keywords, integer, float, datetime or bool (fixed by its first reading).
        docs: The documents that carry it, among those the caller may read.
        examples: Up to five of its values, commonest first.
        origins: Where it was read (front_matter, properties, source, file), by document count.
    """

    name: str
    type: FieldType
    docs: int
    examples: tuple[str, ...] = ()
    origins: dict[str, int] = Field(default_factory=dict)


class FileRecord(Frozen):
    """One file of a watched source (or a document still live whose file is gone)."""

    doc_id: str
    source: str
    path: str
    state: FileState
    chunks: int = 0  # live chunks in the vector store
    embedder: str = ""  # slug(s) of those chunks, "," joined if several
    fingerprint: FileFingerprint | None = None  # of the version the index holds
    indexed_at: float | None = None
    reason: str = ""  # why it is not (fully) indexed: dead letter, exclusion, redaction, drift
    pages: int | None = None  # paged formats and images: the indexed version's page count
    ocr_pages: int = 0  # how many of those pages were read by OCR


class ChunkRecord(Frozen):
    """One live chunk of a file, as the console's file page lists it (in reading order)."""

    point_id: str
    ordinal: int
    content_hash: str
    section_path: tuple[str, ...] = ()
    page: int | None = None
    char_start: int
    char_end: int
    text: str
    vector_origin: VectorOrigin = ""
    in_bm25: bool  # the lexical leg holds it live too (false: `verify` reports leg_mismatch)
    indexed_at: float = 0.0
    origin: TextOrigin = "text"  # "ocr": read by OCR from a page image
    ocr_confidence: float | None = None  # OCR text: the engine's mean confidence, 0..1
    # where its source mirrors file permissions: who may read it (`core.permissions`), and
    # why that fell back to the file's owner alone (the permissions could not be read)
    readers: tuple[str, ...] = ()
    readers_reason: str = ""


class FileDetail(Frozen):
    """A file's ledger record and its live chunks in order (`GET /v1/files/{doc_id}`)."""

    record: FileRecord
    chunks: list[ChunkRecord]
