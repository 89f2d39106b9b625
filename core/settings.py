"""Settings: `RAGSTREAM_*` environment variables over an optional TOML file over defaults.

The TOML file is `ragstream.toml` in the working directory, or the path in
`RAGSTREAM_CONFIG`. Nested fields use `__` in env vars (`RAGSTREAM_CHUNK__MAX_TOKENS=200`).

Typos are refused: an unknown key in the file (at any level), an unknown `RAGSTREAM_*`
variable or an invalid value raises `SettingsError`, one line naming the key and the closest
valid name or what is expected. `settings_report` says where each effective value came from;
`env_var_help` lists every settable variable with its default.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as _SourceError

from ragstream.core.errors import SettingsError  # a setting that cannot be used; one line

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
        "RAGSTREAM_URL",  # CLI: a running server to talk to
        "RAGSTREAM_SHARED_DATA",  # tests: where the shared test data lives (tests/conftest.py)
        "RAGSTREAM_UPDATE_EVAL_BASELINE",  # tests: rewrite tests/eval_baseline.json
    }
)

# shown as '***' by `settings_report` unless left at their (harmless) defaults
SECRET_SETTINGS = frozenset({"generator.api_key", "api_keys", "admin_api_keys"})


class SettingRow(NamedTuple):
    """One leaf setting in `settings_report`: dotted name, JSON value, and where it came from."""

    name: str
    value: str
    source: str  # "env RAGSTREAM_X", "file <path>", "argument" or "default"


SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".docx", ".pptx", ".pdf")

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


class SourceConfig(BaseModel):
    """One watched root. Its name prefixes every doc_id; its tenant tags every point."""

    model_config = ConfigDict(extra="forbid")
    name: str
    root: Path
    tenant: str = ""


class ChunkSettings(BaseModel):
    """Every field here changes chunk text, so all of them are part of the chunker key."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int = Field(default=256, ge=16)
    min_tokens: int = Field(default=32, ge=0)
    boundary_modulus: int = Field(default=8, ge=1)  # content-defined cut: ~1 in N small units
    # contextual header (title > section path) embedded with each chunk, at most this many
    # tokens taken from the text budget; 0 = off. Never in the shown/cited text.
    header_tokens: int = Field(default=32, ge=0, le=64)
    # an LLM-written sentence situating each chunk in its document (needs generator.base_url),
    # embedded and BM25-indexed with the chunk, never shown or cited; paid once per content
    # hash (cached in the state dir). The model (default: generator.model), the prompt
    # version and the cap are in the chunker key; the cap comes out of the text budget.
    situate: bool = False
    situate_model: str | None = None
    situate_tokens: int = Field(default=48, ge=8, le=128)


class QuerySettings(BaseModel):
    """Query-time choices (DESIGN §6); none of them touches the index."""

    model_config = ConfigDict(extra="forbid")
    reranker: str | None = None  # any sentence-transformers CrossEncoder name or local path
    rerank_floor: float = 0.0
    dense_floor: float | None = None  # None: the calibrated default in query/gate.py
    budget_tokens: int = Field(default=1500, ge=64)
    order: Literal["score", "document"] = "score"
    expand_parent: bool = False
    min_grounding: float = Field(default=0.5, ge=0.0, le=1.0)
    on_low_grounding: Literal["refuse", "flag"] = "refuse"
    log_queries: bool = True  # append every query to <data_dir>/logs/retrieval.jsonl
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    # query transforms (issue 8): each needs `generator.base_url` and is off by default
    transform_keywords: bool = False  # LLM keywords added to the lexical leg's query only
    transform_hyde: bool = False  # the dense leg embeds question + a hypothetical answer
    transform_decompose: bool = False  # a compound question → sub-questions, fused by RRF
    max_subqueries: int = Field(default=3, ge=2, le=8)
    # texts whose vectors the generator and verifier share (LRU entries; size per entry:
    # docs/measurements.md, "Vector memo size"); 0 turns the memo off
    vector_memo: int = Field(default=8192, ge=0)


class GeneratorSettings(BaseModel):
    """An OpenAI-compatible endpoint; with no base_url the offline extractive generator runs."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str = "not-needed"
    timeout_s: float = 60.0
    max_tokens: int = 512


# the checked contents of the TOML file, for `settings_customise_sources` during one
# `Settings.__init__` (a classmethod cannot be handed them otherwise)
_FILE_DATA: ContextVar[dict[str, Any] | None] = ContextVar("_FILE_DATA", default=None)


class Settings(BaseSettings):
    """Init arguments over `RAGSTREAM_*` env vars over the TOML file over defaults."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    data_dir: Path = Path(".ragstream")
    index_name: str = "ragstream"
    embedder: str = "minilm-l6"  # preset, sentence-transformers name, or local path
    vector_backend: Literal["edge", "qdrant"] = "edge"
    qdrant_url: str | None = None  # a server URL switches to qdrant-client
    lexical_backend: Literal["tantivy", "rank-bm25"] = "tantivy"
    sources: list[SourceConfig] = Field(default_factory=list)
    include: list[str] = Field(default_factory=lambda: [f"**/*{s}" for s in SUPPORTED_SUFFIXES])
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    max_file_bytes: int = 50 * 1024 * 1024
    debounce_ms: int = 300  # quiet time before a changed file is read
    settle_ms: int = 50  # … after a completed write (closed by its writer, or renamed in)
    parse_timeout_s: float = 120.0
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    # encode mini-batch (length-sorted). On CPU small is faster *and* smaller (padding and
    # activations grow with the batch's longest text); raise it on a GPU (figures:
    # docs/measurements.md, "Encode batch size")
    embed_batch_size: int = Field(default=8, ge=1)
    # documents per flow batch: all their new chunks are encoded in one length-sorted call
    ingest_batch_docs: int = 256
    gc_retention_s: float = 7 * 24 * 3600.0
    mass_delete_fraction: float = 0.5
    mass_delete_min_docs: int = 10
    query: QuerySettings = Field(default_factory=QuerySettings)
    generator: GeneratorSettings = Field(default_factory=GeneratorSettings)
    server_host: str = "127.0.0.1"
    server_port: int = 8765
    api_keys: dict[str, str] = Field(default_factory=dict)  # HTTP API key -> tenant
    telemetry_exporter: Literal["none", "console", "otlp"] = "none"
    otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"
    # qdrant-client (server path): transient store errors are retried with jittered
    # exponential backoff, at most this many calls and this many seconds of waiting in all
    store_retry_attempts: int = Field(default=8, ge=1)
    store_retry_max_wait_s: float = Field(default=30.0, ge=0.0)
    # blue/green reindex over HTTP: with `api_keys` set, only these keys may run reindex
    # commands (a tenant's query key never can); with no keys at all the local default is open
    admin_api_keys: list[str] = Field(default_factory=list)
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
        data = _FILE_DATA.get()
        if data is None:
            data = _read_file(config_path())
        return (init_settings, env_settings, InitSettingsSource(settings_cls, data))

    # dotted leaf name -> where its value came from (see settings_report)
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Check names before pydantic sees them; any problem is one `SettingsError` line."""
        path = config_path()
        file_data = _read_file(path)
        env = {k: v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        problems = [*_unknown_file_keys(file_data, path), *_unknown_env(env)]
        if problems:
            raise SettingsError("; ".join(problems))
        origins = _Origins(values, env, file_data, f"file {path}")
        _check_env_json(env)
        token = _FILE_DATA.set(file_data)
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise SettingsError(_describe(err, origins)) from None
        except _SourceError as err:  # a value pydantic-settings could not even decode
            raise SettingsError(str(err)) from None
        finally:
            _FILE_DATA.reset(token)
        self._origins = {".".join(p): origins.source(p) for p, _ in _leaves(Settings)}

    @property
    def vectors_dir(self) -> Path:
        return self.data_dir / "vectors"

    @property
    def lexical_dir(self) -> Path:
        return self.data_dir / "lexical"

    @property
    def retrieval_log_path(self) -> Path:
        return self.data_dir / "logs" / "retrieval.jsonl"

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "state"

    def with_paths(self, paths: list[Path]) -> Settings:
        """Settings whose sources are these folders (CLI arguments), named by folder name."""
        names: set[str] = set()
        sources = []
        for path in paths:
            root = path.expanduser().resolve()
            base = name = root.name or "root"
            n = 1
            while name in names:
                n += 1
                name = f"{base}-{n}"
            names.add(name)
            tenant = next((s.tenant for s in self.sources if s.root.resolve() == root), "")
            sources.append(SourceConfig(name=name, root=root, tenant=tenant))
        chosen = self.model_copy(update={"sources": sources or self.sources})
        if sources:
            chosen._origins = {**self._origins, "sources": "argument"}
        return chosen


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
    values = settings.model_dump(mode="json")
    defaults = _defaults()
    rows = []
    for path, _ in _leaves(Settings):
        name = ".".join(path)
        value = _lookup(values, path)
        shown = _json(value)
        if name in SECRET_SETTINGS and value != _lookup(defaults, path):
            shown = "***"
        rows.append(SettingRow(name, shown, settings._origins.get(name, "default")))
    return rows


def env_var_help() -> str:
    """One line per settable `RAGSTREAM_*` variable with its default (for `--help`)."""
    defaults = _defaults()
    lines = [(CONFIG_ENV, _json(DEFAULT_CONFIG) + "  (the TOML settings file)")]
    for path, _ in _leaves(Settings):
        default = _json(_lookup(defaults, path))
        if len(default) > 60:
            default = default[:57] + "..."
        lines.append((_env_name(path), default))
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name:<{width}}  default {default}" for name, default in lines)


# --- what the settings are: their leaves, names and defaults ---------------------------------


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model a field nests (its own table of settings), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a list-of-tables field's entries (`[[sources]]`), if any."""
    args = getattr(annotation, "__args__", ())
    return _submodel(args[0]) if get_origin(annotation) is list and args else None


def _leaves(
    model: type[BaseModel], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    """(path, field) for every setting that holds a value; nested models are walked into."""
    for name, field in model.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is None:
            yield (*prefix, name), field
        else:
            yield from _leaves(sub, (*prefix, name))


def _env_name(path: Sequence[str]) -> str:
    return ENV_PREFIX + "__".join(path).upper()


def _defaults() -> dict[str, Any]:
    return Settings.model_construct().model_dump(mode="json")


def _lookup(data: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        data = data[part]
    return data


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _closest(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1)
    return found[0] if found else None


def _dotted(loc: Sequence[str | int]) -> str:
    """('sources', 0, 'root') -> 'sources[0].root'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# --- the checks ---------------------------------------------------------------------------


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        if CONFIG_ENV in os.environ:
            raise SettingsError(f"{CONFIG_ENV} names no file: {path}")
        return {}
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SettingsError(f"cannot read settings file {path}: {err}") from None


def _unknown_file_keys(data: Mapping[str, Any], path: Path) -> list[str]:
    return [
        f"unknown setting '{key}' in {path}" + (f" (did you mean '{near}'?)" if near else "")
        for key, near in _unknown_keys(data, Settings)
    ]


def _unknown_keys(
    data: Mapping[str, Any], model: type[BaseModel], at: str = ""
) -> Iterator[tuple[str, str | None]]:
    """(dotted key, closest valid key) for each key in `data`, at any depth, `model` lacks."""
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            near = _closest(key, model.model_fields)
            yield at + key, at + near if near else None
            continue
        sub, item = _submodel(field.annotation), _item_model(field.annotation)
        if sub is not None and isinstance(value, Mapping):
            yield from _unknown_keys(value, sub, f"{at}{key}.")
        if item is not None and isinstance(value, list):
            for i, entry in enumerate(value):
                if isinstance(entry, Mapping):
                    yield from _unknown_keys(entry, item, f"{at}{key}[{i}].")


def _env_target(name: str) -> tuple[str, ...] | None:
    """The setting path a `RAGSTREAM_*` variable sets (as pydantic-settings reads it: case-
    insensitive, `__` nests; a dict field takes any key below it), or None if none."""
    parts = tuple(name[len(ENV_PREFIX) :].lower().split("__"))
    model: type[BaseModel] = Settings
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return None
        rest = parts[i + 1 :]
        if not rest or (get_origin(field.annotation) is dict and all(rest)):
            return parts
        sub = _submodel(field.annotation)
        if sub is None:
            return None
        model = sub
    return None  # pragma: no cover (the loop always returns)


def _unknown_env(env: Mapping[str, str]) -> list[str]:
    valid = [_env_name(p[:n]) for p, _ in _leaves(Settings) for n in range(1, len(p) + 1)]
    valid += NON_SETTING_ENV
    stems = {v[len(ENV_PREFIX) :] for v in valid}
    problems = []
    for name in sorted(env):
        if name.upper() in NON_SETTING_ENV or _env_target(name) is not None:
            continue
        near = _closest(name[len(ENV_PREFIX) :].upper(), stems)
        hint = f" (did you mean {ENV_PREFIX}{near}?)" if near else ""
        problems.append(f"unknown environment variable {name}{hint}")
    return problems


def _is_table(annotation: Any) -> bool:
    """Lists, dicts and nested models: pydantic-settings reads their env vars as JSON."""
    return _submodel(annotation) is not None or get_origin(annotation) in (list, dict)


def _check_env_json(env: Mapping[str, str]) -> None:
    for name, value in sorted(env.items()):
        target = _env_target(name)
        field = _field_at(target) if target else None
        if target is None or field is None or not _is_table(field.annotation):
            continue
        try:
            json.loads(value)
        except ValueError as err:
            shown = "'***'" if ".".join(target) in SECRET_SETTINGS else _short(value)
            raise SettingsError(
                f"invalid value {shown} for setting '{'.'.join(target)}' (from env {name}): "
                f"expected JSON ({err})"
            ) from None


def _field_at(path: Sequence[str]) -> FieldInfo | None:
    """The field a setting path ends at; None when it goes on into a dict's keys."""
    model: type[BaseModel] | None = Settings
    field = None
    for part in path:
        if model is None:
            return None
        field = model.model_fields[part]
        model = _submodel(field.annotation)
    return field


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- where values come from ---------------------------------------------------------------


def _given(data: Any, path: Sequence[str | int]) -> bool:
    """Whether `data` (init kwargs, the file, a JSON env value) sets `path`; a non-table value
    on the way (a model instance, a bad scalar) sets everything below it."""
    for part in path:
        if isinstance(data, Mapping):
            if part not in data:
                return False
            data = data[part]
        elif isinstance(data, list):
            if not isinstance(part, int) or part >= len(data):
                return False
            data = data[part]
        else:
            return True
    return True


class _Origins:
    """Where a setting path gets its value: argument > env > file > default (as in Settings)."""

    def __init__(
        self,
        arguments: Mapping[str, Any],
        env: Mapping[str, str],
        file: Mapping[str, Any],
        file_label: str,
    ) -> None:
        self.arguments, self.file, self.file_label = arguments, file, file_label
        targets = [(t, name, value) for name, value in env.items() if (t := _env_target(name))]
        # the most specific variable first: RAGSTREAM_CHUNK__MAX_TOKENS beats RAGSTREAM_CHUNK
        self.env = sorted(targets, key=lambda t: (-len(t[0]), t[1]))

    def source(self, path: Sequence[str | int]) -> str:
        if _given(self.arguments, path):
            return "argument"
        for target, name, value in self.env:
            n = min(len(target), len(path))
            if tuple(target[:n]) != tuple(path[:n]):
                continue
            rest = path[len(target) :]
            if not rest or _given(_loads(value), rest):
                return f"env {name}"
        if _given(self.file, path):
            return self.file_label
        return "default"


def _loads(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return None


def _describe(err: ValidationError, origins: _Origins) -> str:
    """pydantic's errors as one line: unknown keys with a suggestion, else the first error."""
    errors = err.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return "; ".join(_describe_unknown(e["loc"], origins) for e in unknown)
    first = errors[0]
    key = _dotted(first["loc"])
    where = _phrase(origins.source(first["loc"]))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "missing":
        where = _phrase(origins.source(first["loc"][:-1]))
        return f"setting '{key}' is required{where}{more}"
    secret = any(key == s or key.startswith(s + ".") for s in SECRET_SETTINGS)
    shown = "'***'" if secret else _short(first["input"])
    return f"invalid value {shown} for setting '{key}'{where}: {first['msg']}{more}"


def _describe_unknown(loc: Sequence[str | int], origins: _Origins) -> str:
    key = _dotted(loc)
    parent: type[BaseModel] | None = Settings
    for part in loc[:-1]:
        if parent is None or isinstance(part, int):
            continue
        field = parent.model_fields.get(part)
        annotation = field.annotation if field else None
        parent = _submodel(annotation) or _item_model(annotation)
    near = _closest(str(loc[-1]), parent.model_fields) if parent else None
    hint = f" (did you mean '{_dotted([*loc[:-1], near])}'?)" if near else ""
    return f"unknown setting '{key}'{_place(origins.source(loc))}{hint}"


def _phrase(source: str) -> str:
    """' (from env RAGSTREAM_X)' for a value's message; '' for a default."""
    return "" if source == "default" else f" (from {source})"


def _place(source: str) -> str:
    """' in ragstream.toml' / ' in RAGSTREAM_CHUNK' for an unknown key's message."""
    if source == "argument":
        return " in the Settings() arguments"
    if source == "default":
        return ""
    return " in " + source.removeprefix("file ").removeprefix("env ")
