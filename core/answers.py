"""Pydantic models of the query contract: what a caller sends and what it gets back.

They live on floor 1 so the query module, the HTTP server and the Python client all speak
exactly the same types (an embedded and an HTTP client return identical objects).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from ragstream.core.filters import Condition, Logic, filter_from_json, parse_where
from ragstream.core.models import FileFingerprint, IndexedChunk, PageBox, TextOrigin

Fusion = Literal["rrf", "dbsf"]
# RRF's k, chosen on SciFact train (k=5..100 swept: smaller is slightly better; k=10 is all
# but as good as the best and less extreme). Figures: docs/notes/retrieval-scifact.md.
DEFAULT_RRF_K = 10
MAX_QUESTION_CHARS = 4000


class QueryFilters(BaseModel):
    """Metadata filters applied inside both stores (never as a post-filter)."""

    model_config = ConfigDict(extra="forbid")

    path_prefix: str | None = Field(default=None, max_length=1024)
    file_types: list[str] | None = Field(default=None, max_length=16)
    doc_ids: list[str] | None = Field(default=None, max_length=1000)


def _filter_tree(value: object) -> object:
    """A filter's text form (`--where`) or JSON form (its accepted spellings: `=` for `==`,
    lowercase `and`) read into its tree."""
    if isinstance(value, str):
        return parse_where(value)
    return filter_from_json(value) if isinstance(value, dict) else value


# a filter's text form is accepted too (and said so in the JSON schema: an MCP host checks
# a tool's arguments against it), read into its tree before validation
MetadataFilter = Annotated[
    Logic | Condition | None,
    BeforeValidator(_filter_tree, json_schema_input_type=Logic | Condition | str | None),
]


class RecencyPreference(BaseModel):
    """A preference for recent documents: each candidate's score decays by half every
    `half_life` of age, read from the datetime field `field` (docs/guide/filters.md)."""

    model_config = ConfigDict(extra="forbid")

    half_life: str = Field(pattern=r"^\d{1,6}(\.\d{1,3})?[smhdwy]$", examples=["30d", "12h"])
    field: str = Field(default="mtime", min_length=1, max_length=128)


class QueryRequest(BaseModel):
    """A question and how to answer it: the body of `POST /v1/query` and `/v1/retrieve`, and
    the keyword options of `Client.query` / `Client.retrieve`.

    Attributes:
        query: The question (1 to 4,000 characters, with at least one non-blank one).
        k: Chunks kept after fusion and rerank (1 to 50): what the answer may cite.
        n: Candidates taken from each retrieval leg, dense and BM25, before fusion.
        fusion: `rrf` (reciprocal rank fusion) or `dbsf` (distribution-based score fusion).
        rrf_k: RRF's constant: how much a top rank outweighs a deep one.
        filters: Path prefix, file types and doc ids, applied inside both stores.
        filter: A metadata filter (docs/guide/filters.md), ANDed with `filters`: its JSON
            form (`{"field": "tags", "operator": "==", "value": "finance"}`, joined by
            `{"operator": "AND", "conditions": [...]}`) or its text form
            (`"tags = finance and date >= 2024-01-01"`); a field no document carries, an
            operator its type does not take or an unreadable value is a 422.
        prefer_recent: Off by default. `{"half_life": "30d", "field": "mtime"}` decays each
            candidate's score by half every half-life of its document's age (the fused score,
            and the reranker's probability when one reranks); `field` is a datetime field.
        generate: False: retrieve and rerank only, no answer (evaluation, debugging).
        stream: HTTP only: answer as Server-Sent Events (text deltas, then the `Answer`).
    """

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    k: int = Field(default=8, ge=1, le=50)  # chunks after rerank
    n: int = Field(default=100, ge=1, le=1000)  # candidates per retrieval leg
    fusion: Fusion = "rrf"
    rrf_k: int = Field(default=DEFAULT_RRF_K, ge=1)
    filters: QueryFilters = Field(default_factory=QueryFilters)
    filter: MetadataFilter = None  # a metadata filter, its JSON or text form
    prefer_recent: RecencyPreference | None = None  # off by default
    generate: bool = True  # False: retrieve + rerank only (evaluation, debugging)
    # HTTP only: answer as Server-Sent Events (text deltas, then the verified Answer)
    stream: bool = False

    @field_validator("query")
    @classmethod
    def _has_words(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("the question is blank")
        return query


# a conversation's bounds (`ChatRequest`): past them a request is rejected (422 over HTTP);
# within them `query.conversation` bounds how much history the rewrite reads
MAX_CHAT_MESSAGES = 1000
MAX_MESSAGE_CHARS = 32_000


class ChatMessage(BaseModel):
    """One message of a conversation (OpenAI-style): who said it and what was said."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)


class ChatRequest(BaseModel):
    """A conversation whose last message is the question: the body of `POST /v1/chat` and
    the options of `Client.chat`. It is answered exactly like a `QueryRequest` (citations,
    verification, refusals), with retrieval shaped by the history (`query/conversation.py`).

    Attributes:
        messages: The conversation, oldest first (1 to 1,000 messages, each at most 32,000
            characters); the last one is the user's question (at most 4,000 characters).
        k, n, fusion, rrf_k, filters, filter, prefer_recent, generate, stream: as in
            `QueryRequest`.
    """

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    k: int = Field(default=8, ge=1, le=50)
    n: int = Field(default=100, ge=1, le=1000)
    fusion: Fusion = "rrf"
    rrf_k: int = Field(default=DEFAULT_RRF_K, ge=1)
    filters: QueryFilters = Field(default_factory=QueryFilters)
    filter: MetadataFilter = None
    prefer_recent: RecencyPreference | None = None
    generate: bool = True
    stream: bool = False

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        last = messages[-1]
        if last.role != "user":
            raise ValueError("the last message must be the user's question (role 'user')")
        if not last.content.strip():
            raise ValueError("the question is blank")
        if len(last.content) > MAX_QUESTION_CHARS:
            raise ValueError(f"the question is over {MAX_QUESTION_CHARS} characters")
        return messages

    @property
    def question(self) -> str:
        """The last message: the question to answer."""
        return self.messages[-1].content

    @property
    def history(self) -> list[ChatMessage]:
        """Every message before the question, oldest first."""
        return self.messages[:-1]

    def as_query(self) -> QueryRequest:
        """The question with this request's options, as a `QueryRequest`."""
        options = self.model_dump(exclude={"messages"})
        return QueryRequest(query=self.question, **options)


class EffectiveQuery(BaseModel):
    """What retrieval ran for a conversation's question, per leg, and the question the
    answerability decision, the judge and the refusal rules read.

    Attributes:
        question: The effective question (the rewrite, or the question as asked).
        dense: The text the dense leg embedded.
        sparse: The text the BM25 leg searched with.
    """

    question: str
    dense: str
    sparse: str


class Conversation(BaseModel):
    """How a conversation's history shaped an answer (the answer's metadata of a chat).

    Attributes:
        history_messages: Messages of history the rewrite read.
        dropped_messages: The oldest messages left out (`query.conversation.max_turns` /
            `max_chars`); 0 when the whole history was read.
        standalone: The question stands alone: retrieval ran on it unchanged.
        reasons: Why it does not stand alone (`weak`: it retrieves weakly on its own;
            `deictic`, `short`, `no_topic`), else empty.
        rewrite: How the effective query was made: `none` (the question as asked),
            `offline` (topic terms of earlier turns carried into the BM25 leg) or `llm`.
        added_terms: The words the rewrite added that the question does not hold.
        llm_rejected: An LLM rewrite was rejected for terms no earlier turn holds (the
            offline rewrite ran instead); those terms.
    """

    history_messages: int
    dropped_messages: int = 0
    standalone: bool
    reasons: list[str] = Field(default_factory=list)
    rewrite: Literal["none", "offline", "llm"] = "none"
    added_terms: list[str] = Field(default_factory=list)
    llm_rejected: list[str] = Field(default_factory=list)


class ChunkView(BaseModel):
    """A chunk as a caller sees it: its id, where it came from, and its text."""

    point_id: str  # the chunk id
    doc_id: str
    path: str
    title: str = ""
    section_path: list[str] = Field(default_factory=list)
    page: int | None = None
    char_start: int
    char_end: int
    text: str
    # the file version this text was read from, and when it was indexed (None: unknown)
    file_version: FileFingerprint | None = None
    indexed_at: float | None = None
    # set on an answer's sources and citations: True when the file on disk changed (or was
    # deleted) since that version, None when it could not be checked from this process
    possibly_stale: bool | None = None
    # where the text came from: the file's own text, or OCR of a page image ("ocr": then
    # `bbox` is the box of its lines on `page`, as fractions of the page from its top-left
    # corner, and `ocr_confidence` the engine's mean confidence, 0..1)
    source: TextOrigin = "text"
    bbox: PageBox | None = None
    ocr_confidence: float | None = None

    @staticmethod
    def fields_of(chunk: IndexedChunk) -> dict[str, Any]:
        """A stored chunk's values for these fields (callers may widen span and text)."""
        return {
            "point_id": chunk.point_id,
            "doc_id": chunk.doc_id,
            "path": chunk.path,
            "title": chunk.title,
            "section_path": list(chunk.section_path),
            "page": chunk.page,
            "char_start": chunk.char_start,
            "char_end": chunk.char_end,
            "text": chunk.text,
            "file_version": chunk.fingerprint,
            "indexed_at": chunk.indexed_at or None,
            "source": chunk.origin,
            "bbox": chunk.bbox,
            "ocr_confidence": chunk.ocr_confidence,
        }


class SourceChunk(ChunkView):
    """A chunk as placed in the prompt, with its short stable citation id (e.g. "S1")."""

    cid: str
    score: float  # rerank score if reranked, else fused score


class Citation(BaseModel):
    """A source the answer cites, with where its text is and which file version it quotes.

    Attributes:
        cid: The citation id used in the answer's text (`S1`, `S2`, ...).
        point_id: The chunk id.
        doc_id: `<source>:<path relative to the source root>`.
        path: The file's path.
        section_path: The headings above the chunk, outermost first.
        page: The page number, for paged formats (PDF); None otherwise.
        char_start: Where the chunk starts in the document's text.
        char_end: Where it ends.
        file_version: The version the text was read from: size, mtime and xxh3-128 digest.
        indexed_at: When that version was indexed (Unix seconds).
        possibly_stale: True when the file changed or vanished since that version (one
            `stat` per citation at answer time); None when this process cannot see the folder.
        source: "ocr" when the cited text was read by OCR from a page image, else "text".
        bbox: OCR text: the box of the cited lines on `page`, as (left, top, right, bottom)
            fractions of the page's width and height from its top-left corner.
        ocr_confidence: OCR text: the engine's mean confidence over it, 0..1.
    """

    cid: str
    point_id: str
    doc_id: str
    path: str
    section_path: list[str] = Field(default_factory=list)
    page: int | None = None
    char_start: int
    char_end: int
    file_version: FileFingerprint | None = None  # the version quoted (size, mtime, digest)
    indexed_at: float | None = None
    possibly_stale: bool | None = None  # the file changed or vanished since that version
    source: TextOrigin = "text"
    bbox: PageBox | None = None
    ocr_confidence: float | None = None


class Claim(BaseModel):
    """One answer sentence and whether the chunk(s) it cites support it."""

    text: str
    cids: list[str]
    supported: bool
    score: float  # best support score over the cited chunks, 0..1
    support_cid: str | None = None
    support_span: tuple[int, int] | None = None  # char offsets inside that chunk's text
    # P(the support span entails the claim) from the trained judge; None when it did not run
    entailment: float | None = None
    contradicted: bool = False  # the claim says the opposite of its span (polarity rule or judge)
    # its best support is OCR text read with a mean confidence below
    # `query.ocr_min_confidence`: that support's score was scaled down (query/verify.py)
    weak_evidence: bool = False


class Verification(BaseModel):
    """What the verifier made of a generated answer: its claims and what it removed.

    Attributes:
        claims: One per answer sentence, with its support.
        grounding: Supported claims ÷ claims (1.0 for an empty answer).
        invented_cids: Cited ids that are not in the context: flagged and removed.
        injection_flags: Answer sentences that carry instructions taken from the sources.
        text: The answer with the invented citations removed.
    """

    claims: list[Claim]
    grounding: float  # supported claims / claims (1.0 for an empty answer)
    invented_cids: list[str]  # cited ids not in the context: flagged and removed
    injection_flags: list[str]  # answer sentences that carry instructions from sources
    text: str  # the answer with invented citations removed


RefusalCheck = Literal["gate", "decision", "generator", "grounding", "names"]


class Refusal(BaseModel):
    """A structured abstention: why there is no answer, and how close we came."""

    reason: Literal["insufficient_evidence", "not_answerable", "unsupported_answer", "no_index"]
    detail: str
    best_score: float | None = None
    # which check refused: the retrieval gate, the answerability decision, the generator
    # (it found or wrote no answer), the grounding check, or the names check (the cited
    # documents never name what is asked about); None where no check ran (no index)
    check: RefusalCheck | None = None


class Answerability(BaseModel):
    """Whether the retrieved chunks hold what the question asks about (`query.answerable`):
    the score, the floor it was held against, and the signals behind it."""

    # 0..1: the calibrated decision's P(the retrieved text answers the question) when the
    # answer judge ran with one (query/decision.py), else the answer judge's P(the best
    # sentence holds the answer), else the best chunk's IDF-weighted coverage
    score: float
    answerable: bool
    floor: float
    signals: dict[str, float] = Field(default_factory=dict)
    judge: str = ""  # the answer judge's version (operators/answer_judge.py), "" when none ran
    # which path decided: "decision" (the calibrated decision over the answer judge's
    # reading), "judge" (the judge's floor rule), "coverage" (no judge: the coverage rule),
    # or "other_language" (the question or its best chunk is in a language the trained
    # models do not read: coverage and the dense cosine alone)
    decided_by: str = "coverage"
    language: str = "en"  # the language it was read in (`core.language`, ISO 639-1)


class CandidateView(BaseModel):
    """One ranked candidate as the answer's "why" panel shows it: its fused score, its rank
    and raw score in each leg, and its rerank score.

    Attributes:
        point_id: The chunk id.
        doc_id: The document it belongs to.
        score: The rerank score if reranked, else the fused score.
        ranks: Leg (`dense`, `lexical`) → 1-based rank in that leg.
        scores: Leg → that leg's raw score.
        rerank_score: The cross-encoder's score; None without a reranker.
        embedder: The slug of the collection its dense hit came from; "" if lexical only.
    """

    point_id: str
    doc_id: str
    score: float
    ranks: dict[str, int]
    scores: dict[str, float]
    rerank_score: float | None = None
    embedder: str = ""  # slug of the collection its dense hit came from; "" if lexical only


class Answer(BaseModel):
    """An answer with verified citations, or a structured refusal: what `ragstream query`,
    `POST /v1/query` and `Client.query` return. A refusal is an answer (`refusal` set,
    `text` empty), never an exception.

    Attributes:
        query: The question as asked.
        text: The answer with `[S1]`-style citations; empty when refused.
        citations: The sources the answer cites.
        claims: One per answer sentence: its citations and whether they support it.
        grounding: Claims supported by their cited sources ÷ claims.
        answered: The answerability score (do the sources answer the question at all?);
            None when it was not judged.
        refusal: Why there is no answer, and which check refused; None when answered.
        answerability: The decision behind `answered`: score, floor and signals.
        invented_cids: Citation ids the generator made up (removed from `text`).
        injection_flags: Sentences that carried instructions from the sources.
        sources: The chunks placed in the prompt, with their citation ids.
        candidates: Every ranked candidate, with its per-leg ranks and scores.
        embedder: The embedder version of the live collection that answered.
        reranker: The reranker's name, or "none (no cross-encoder configured)".
        generator: `extractive`, or the endpoint's model.
        timings_ms: Milliseconds per stage (`retrieve.embed`, `retrieve.dense`, ..., `verify`).
        trace_id: The OpenTelemetry trace id of this answer's `ragstream.query` span.
        effective_query: A conversation's answer: what each retrieval leg ran, and the
            question the decision read; None for a single question.
        conversation: A conversation's answer: how much history was read (and dropped),
            whether the question stood alone, and how it was rewritten.
    """

    query: str
    text: str
    citations: list[Citation]
    claims: list[Claim]
    grounding: float  # claims supported by their cited sources ÷ claims
    # "question answered": the answerability score (do the sources answer the question at
    # all?), None when it was not judged; grounding alone cannot tell a faithful copy of a
    # nearby sentence from an answer
    answered: float | None = None
    refusal: Refusal | None = None
    answerability: Answerability | None = None  # do the sources answer the question at all?
    invented_cids: list[str] = Field(default_factory=list)
    injection_flags: list[str] = Field(default_factory=list)
    sources: list[SourceChunk] = Field(default_factory=list)
    candidates: list[CandidateView] = Field(default_factory=list)
    embedder: str
    reranker: str  # model name, or "none (no cross-encoder configured)"
    generator: str
    timings_ms: dict[str, float] = Field(default_factory=dict)
    trace_id: str
    # a conversation's answer (`QueryEngine.chat`): what retrieval ran and how the history
    # shaped it; None for a single question
    effective_query: EffectiveQuery | None = None
    conversation: Conversation | None = None


class RetrievedChunk(ChunkView):
    """One ranked candidate with its text: what `retrieve` returns (no generation)."""

    rank: int  # 1-based, after fusion and rerank
    score: float  # rerank score if reranked, else fused score
    ranks: dict[str, int]  # leg -> 1-based rank in that leg ("dense", "lexical")
    scores: dict[str, float]  # leg -> that leg's raw score
    rerank_score: float | None = None
    embedder: str = ""


class Retrieval(BaseModel):
    """Ranked candidates for a question, and the gate's verdict on them."""

    query: str
    results: list[RetrievedChunk]
    refusal: Refusal | None = None  # what the sufficiency gate would answer with
    effective_query: EffectiveQuery | None = None  # a conversation's: what retrieval ran
    embedder: str
    reranker: str
    timings_ms: dict[str, float] = Field(default_factory=dict)
    trace_id: str
