"""Settings refuse typos (file keys, env vars, values) and say where each value came from."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ragstream.cli.app import app
from ragstream.core.settings import (
    NON_SETTING_ENV,
    RENAMED,
    ChunkSettings,
    Settings,
    SettingsError,
    env_var_help,
    settings_report,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No RAGSTREAM_* variables from the caller's environment, no ragstream.toml in the cwd."""
    for name in list(os.environ):
        if name.upper().startswith("RAGSTREAM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf" / "settings.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    monkeypatch.setenv("RAGSTREAM_CONFIG", str(path))
    return path


def _error(**overrides: object) -> str:
    with pytest.raises(SettingsError) as info:
        Settings(**overrides)
    message = str(info.value)
    assert "\n" not in message and "errors.pydantic.dev" not in message
    return message


def test_file_typo_at_top_level(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _config(monkeypatch, tmp_path, 'embeder = "static"\n')
    assert _error() == f"unknown setting 'embeder' in {path} (did you mean 'embedder'?)"


def test_file_typo_in_nested_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _config(
        monkeypatch,
        tmp_path,
        '[query]\nrerank_flor = 0.3\n[[sources]]\nname = "a"\nroot = "/tmp"\ntenat = "x"\n',
    )
    message = _error()
    assert (
        f"unknown setting 'query.rerank_flor' in {path} (did you mean 'query.rerank_floor'?)"
        in (message)
    )
    assert "'sources[0].tenat'" in message and "'sources[0].tenant'" in message


def test_ragstream_toml_in_cwd_is_checked(tmp_path: Path) -> None:
    (tmp_path / "ragstream.toml").write_text("[chunk]\nmax_token = 100\n")
    assert _error() == (
        "unknown setting 'chunk.max_token' in ragstream.toml (did you mean 'chunk.max_tokens'?)"
    )


def test_file_typo_without_a_close_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _config(monkeypatch, tmp_path, "zzzzzz = 1\n")
    assert _error() == f"unknown setting 'zzzzzz' in {path}"


def test_missing_config_file_and_bad_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGSTREAM_CONFIG", str(tmp_path / "nope.toml"))
    assert "nope.toml" in _error()
    _config(monkeypatch, tmp_path, "embedder = \n")
    assert "cannot read settings file" in _error()


def test_env_typo_at_top_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_EMBEDER", "static")
    assert _error() == (
        "unknown environment variable RAGSTREAM_EMBEDER (did you mean RAGSTREAM_EMBEDDER?)"
    )


@pytest.mark.parametrize(
    ("name", "near"),
    [
        ("RAGSTREAM_CHUNK__MAX_TOKEN", "RAGSTREAM_CHUNK__MAX_TOKENS"),
        ("RAGSTREAM_CHUNK_MAX_TOKENS", "RAGSTREAM_CHUNK__MAX_TOKENS"),  # one `_` for `__`
        ("RAGSTREAM_QUERY__RERANK_FLOR", "RAGSTREAM_QUERY__RERANK_FLOOR"),
        ("ragstream_generator__modle", "RAGSTREAM_GENERATOR__MODEL"),
        ("RAGSTREAM_WORKER", "RAGSTREAM_WORKERS"),
    ],
)
def test_env_typo_nested(monkeypatch: pytest.MonkeyPatch, name: str, near: str) -> None:
    monkeypatch.setenv(name, "1")
    assert _error() == f"unknown environment variable {name} (did you mean {near}?)"


def test_env_typo_without_a_close_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_ZZZZZZ", "1")
    assert _error() == "unknown environment variable RAGSTREAM_ZZZZZZ"


def test_env_names_are_case_insensitive_and_nest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ragstream_chunk__max_tokens", "100")
    monkeypatch.setenv("RAGSTREAM_SERVER__API_KEYS__k1", "tenant-a")  # a dict takes any key
    monkeypatch.setenv("RAGSTREAM_QUERY", '{"rerank_floor": 0.25}')  # a whole table as JSON
    s = Settings()
    assert s.chunk.max_tokens == 100
    assert s.server.api_keys == {"k1": "tenant-a"}
    assert s.query.rerank_floor == 0.25


def test_non_setting_variables_are_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"RAGSTREAM_CONFIG", "RAGSTREAM_API_KEY", "RAGSTREAM_WORKERS"} <= NON_SETTING_ENV
    assert {"RAGSTREAM_SHARED_DATA", "RAGSTREAM_DEBUG", "RAGSTREAM_URL"} <= NON_SETTING_ENV
    for name in NON_SETTING_ENV - {"RAGSTREAM_CONFIG"}:
        monkeypatch.setenv(name, "1")
    assert Settings().embedder == "minilm-l6"


def test_unknown_keys_in_env_json_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _error(chnk={}) == (
        "unknown setting 'chnk' in the Settings() arguments (did you mean 'chunk'?)"
    )
    assert "'chunk.max_tokens'" in _error(chunk={"max_tokn": 100})
    monkeypatch.setenv("RAGSTREAM_CHUNK", '{"max_tokn": 100}')
    assert _error() == (
        "unknown setting 'chunk.max_tokn' in RAGSTREAM_CHUNK (did you mean 'chunk.max_tokens'?)"
    )


def test_invalid_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGSTREAM_CHUNK__MAX_TOKENS", "abc")
    message = _error()
    assert message.startswith(
        "invalid value 'abc' for setting 'chunk.max_tokens' "
        "(from env RAGSTREAM_CHUNK__MAX_TOKENS): "
    )
    assert "valid integer" in message
    monkeypatch.delenv("RAGSTREAM_CHUNK__MAX_TOKENS")

    path = _config(monkeypatch, tmp_path, '[store]\nvector_backend = "foo"\n')
    assert _error() == (
        f"invalid value 'foo' for setting 'store.vector_backend' (from file {path}): "
        "Input should be 'edge' or 'qdrant'"
    )
    monkeypatch.delenv("RAGSTREAM_CONFIG")
    message = _error(chunk={"max_tokens": 1})  # below its minimum
    assert message.startswith("invalid value 1 for setting 'chunk.max_tokens' (from argument): ")
    assert "'sources[0].name' is required" in _error(sources=[{"root": "/tmp"}])


def test_invalid_json_in_env_hides_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_INCLUDE", "*.md")
    message = _error()
    assert "'*.md'" in message and "'include'" in message and "expected JSON" in message
    monkeypatch.delenv("RAGSTREAM_INCLUDE")
    monkeypatch.setenv("RAGSTREAM_SERVER__ADMIN_API_KEYS", "secret-admin-key")
    message = _error()
    assert "secret-admin-key" not in message and "'server.admin_api_keys'" in message


def test_report_sources_and_masking(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _config(
        monkeypatch,
        tmp_path,
        'embedder = "from-file"\n[store]\nindex_name = "file-index"\n'
        '[server]\nadmin_api_keys = ["adm"]\n'
        '[chunk]\nmax_tokens = 100\nmin_tokens = 10\n[generator]\napi_key = "sk-file"\n',
    )
    monkeypatch.setenv("RAGSTREAM_EMBEDDER", "from-env")
    monkeypatch.setenv("RAGSTREAM_CHUNK__MIN_TOKENS", "20")
    monkeypatch.setenv("RAGSTREAM_SERVER__API_KEYS", '{"k1": "tenant-a"}')
    s = Settings(store={"index_name": "from-arg"})
    rows = {r.name: (r.value, r.source) for r in settings_report(s)}
    assert rows["embedder"] == ('"from-env"', "env RAGSTREAM_EMBEDDER")  # env beats file
    assert rows["store.index_name"] == ('"from-arg"', "argument")  # arguments beat everything
    assert rows["store.vector_backend"] == ('"edge"', "default")
    assert rows["chunk.max_tokens"] == ("100", f"file {path}")
    assert rows["chunk.min_tokens"] == ("20", "env RAGSTREAM_CHUNK__MIN_TOKENS")
    assert rows["chunk.header_tokens"] == ("32", "default")
    assert rows["query.dense_floor"] == ("null", "default")
    assert rows["generator.api_key"] == ("***", f"file {path}")
    assert rows["server.api_keys"] == ("***", "env RAGSTREAM_SERVER__API_KEYS")
    assert rows["server.admin_api_keys"] == ("***", f"file {path}")
    assert "sk-file" not in str(rows) and "k1" not in str(rows)
    # every leaf, once; an unset secret shows its harmless default
    assert len(rows) == len(settings_report(s)) and "chunk" not in rows
    assert settings_report(Settings())[0].source == "default"
    monkeypatch.delenv("RAGSTREAM_CONFIG")
    assert dict((r.name, r.value) for r in settings_report(Settings()))["generator.api_key"] == (
        '"not-needed"'
    )


def test_report_of_model_arguments_and_with_paths(tmp_path: Path) -> None:
    s = Settings(chunk=ChunkSettings(max_tokens=100))
    rows = {r.name: r.source for r in settings_report(s)}
    assert rows["chunk.max_tokens"] == rows["chunk.min_tokens"] == "argument"
    assert rows["sources"] == "default"
    chosen = s.with_paths([tmp_path])
    assert {r.name: r.source for r in settings_report(chosen)}["sources"] == "argument"


def test_env_var_help_lists_every_leaf() -> None:
    lines = env_var_help().splitlines()
    names = [line.split()[0] for line in lines]
    assert names[0] == "RAGSTREAM_CONFIG"
    assert "RAGSTREAM_CHUNK__MAX_TOKENS" in names and "RAGSTREAM_EMBEDDER" in names
    assert "RAGSTREAM_GENERATOR__BASE_URL" in names and "RAGSTREAM_CHUNK" not in names
    assert len(names) == len(set(names)) == len(settings_report(Settings())) + 1
    line = next(x for x in lines if x.startswith("RAGSTREAM_CHUNK__MAX_TOKENS "))
    assert line.split()[1:] == ["default", "256"]


# --- the grouped settings, and the flat names they had -------------------------------------


def _nested(dotted: str, value: object) -> dict[str, Any]:
    """'query.answerable.floor', 0.5 -> {'query': {'answerable': {'floor': 0.5}}}."""
    *groups, leaf = dotted.split(".")
    out: dict[str, Any] = {leaf: value}
    for group in reversed(groups):
        out = {group: out}
    return out


def _toml(dotted: str, value: str) -> str:
    *groups, leaf = dotted.split(".")
    return (f"[{'.'.join(groups)}]\n" if groups else "") + f"{leaf} = {value}\n"


def _env(dotted: str) -> str:
    return "RAGSTREAM_" + "__".join(dotted.split(".")).upper()


GROUPED = [  # (new dotted name, a TOML / env value, what it reads as)
    ("server.port", "9000", 9000),
    ("telemetry.exporter", '"console"', "console"),
    ("store.vector_backend", '"qdrant"', "qdrant"),
    ("sync.partition_count", "3", 3),
    ("verify.sample", "7", 7),
    ("query.answerable.floor", "0.4", 0.4),
    ("query.answerable.judge", '"none"', "none"),
]


def _value(s: Settings, dotted: str) -> object:
    found: object = s
    for part in dotted.split("."):
        found = getattr(found, part)
    return found


@pytest.mark.parametrize(("name", "raw", "want"), GROUPED)
def test_a_grouped_setting_is_set_by_env_file_and_argument(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, raw: str, want: object
) -> None:
    monkeypatch.setenv(_env(name), raw.strip('"'))
    s = Settings()
    assert _value(s, name) == want
    assert {r.name: r.source for r in settings_report(s)}[name] == f"env {_env(name)}"
    monkeypatch.delenv(_env(name))
    path = _config(monkeypatch, tmp_path, _toml(name, raw))
    s = Settings()
    assert _value(s, name) == want
    assert {r.name: r.source for r in settings_report(s)}[name] == f"file {path}"
    monkeypatch.delenv("RAGSTREAM_CONFIG")
    s = Settings(**_nested(name, want))
    assert _value(s, name) == want
    assert {r.name: r.source for r in settings_report(s)}[name] == "argument"


def test_every_renamed_setting_exists_under_its_new_name() -> None:
    leaves = {r.name for r in settings_report(Settings())}
    assert set(RENAMED.values()) <= leaves
    assert not set(RENAMED) & leaves  # no old name is still a setting


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_name_answers_with_the_new_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, old: str, new: str
) -> None:
    hint = f"is now '{new}' ({_env(new)})"
    assert _error(**_nested(old, 1)) == f"setting '{old}' in the Settings() arguments {hint}"
    monkeypatch.setenv(_env(old), "1")
    assert _error() == (f"environment variable {_env(old)} is now {_env(new)} (setting '{new}')")
    monkeypatch.delenv(_env(old))
    path = _config(monkeypatch, tmp_path, _toml(old, "1"))
    assert _error() == f"setting '{old}' in {path} {hint}"


def test_old_names_below_a_dict_and_inside_a_json_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_API_KEYS__k1", "acme")
    assert _error() == (
        "environment variable RAGSTREAM_API_KEYS__k1 is now RAGSTREAM_SERVER__API_KEYS__k1 "
        "(setting 'server.api_keys')"
    )
    monkeypatch.delenv("RAGSTREAM_API_KEYS__k1")
    monkeypatch.setenv("RAGSTREAM_QUERY", '{"named_floor": 0.2}')
    assert _error() == (
        "setting 'query.named_floor' in RAGSTREAM_QUERY is now 'query.answerable.named_floor' "
        "(RAGSTREAM_QUERY__ANSWERABLE__NAMED_FLOOR)"
    )


def test_config_rows_show_the_grouped_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_SERVER__PORT", "9000")
    monkeypatch.setenv("RAGSTREAM_QUERY__ANSWERABLE__DECISION", "rule")
    done = CliRunner().invoke(app, ["config", "--json"])
    assert done.exit_code == 0, done.output
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["server.port"] == {
        "name": "server.port", "value": "9000", "source": "env RAGSTREAM_SERVER__PORT"
    }  # fmt: skip
    assert rows["query.answerable.decision"]["source"] == (
        "env RAGSTREAM_QUERY__ANSWERABLE__DECISION"
    )
    groups = {"server", "telemetry", "store", "sync", "verify"}
    assert groups <= {name.split(".")[0] for name in rows}
    assert not set(RENAMED) & set(rows)
    text = CliRunner().invoke(app, ["config", "--env"]).stdout
    assert "RAGSTREAM_SYNC__DEBOUNCE_MS" in text and "RAGSTREAM_DEBOUNCE_MS" not in text
