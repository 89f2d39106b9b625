"""The machinery behind `Settings`: typos refused, each value's source reported.

It lives apart from core/settings.py so that the settings themselves stay a short, readable
list. Everything here is written against a root settings class passed in (`root`); a
setting's env variable is the root's `env_prefix` plus its path, upper case, joined by `__`.
It never imports `Settings`, so settings.py can import it without a cycle; the table of
renamed settings (old dotted name -> new) is handed in too (`renamed`).
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import types
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from ragstream.core.errors import SettingsError


class SettingRow(NamedTuple):
    """One leaf setting in `report`: dotted name, JSON value, and where it came from."""

    name: str
    value: str
    source: str  # "env RAGSTREAM_X", "file <path>", "argument" or "default"


def report(
    settings: BaseSettings,
    root: type[BaseSettings],
    origins: Mapping[str, str],
    secrets: Collection[str],
) -> list[SettingRow]:
    """Every leaf setting's effective value and source (`origins`, by dotted name); the
    `secrets` are masked unless left at their defaults."""
    values = settings.model_dump(mode="json")
    defaults = _defaults(root)
    rows = []
    for path, _ in _leaves(root):
        name = ".".join(path)
        value = _lookup(values, path)
        shown = _json(value)
        if name in secrets and value != _lookup(defaults, path):
            shown = "***"
        rows.append(SettingRow(name, shown, origins.get(name, "default")))
    return rows


def env_help(root: type[BaseSettings], others: Sequence[tuple[str, Any, str]] = ()) -> str:
    """One line per settable env variable with its default; `others` (name, default, note)
    are variables that are not settings, listed first."""
    defaults = _defaults(root)
    lines = [(name, _json(default) + f"  ({note})") for name, default, note in others]
    for path, _ in _leaves(root):
        default = _json(_lookup(defaults, path))
        if len(default) > 60:
            default = default[:57] + "..."
        lines.append((_env_name(root, path), default))
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name:<{width}}  default {default}" for name, default in lines)


# --- what the settings are: their leaves, names and defaults ---------------------------------


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model a field nests (its own table of settings), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _item_model(annotation: Any, entry: Mapping[str, Any] | None = None) -> type[BaseModel] | None:
    """The model of a list-of-tables field's entries (`[[sources]]`), if any. Entries of a
    union of models (one per `kind`) are read as the member `entry` names by its `kind`, else
    the one that knows most of its keys (the first, without an entry)."""
    args = getattr(annotation, "__args__", ())
    models = _models_of(args[0]) if get_origin(annotation) is list and args else ()
    if not models:
        return None
    given = entry or {}

    def fit(model: type[BaseModel]) -> tuple[bool, int]:
        kind = model.model_fields.get("kind")
        named = kind is not None and given.get("kind") == kind.default
        return named, sum(key in model.model_fields for key in given)

    return max(models, key=fit)


def _models_of(annotation: Any) -> tuple[type[BaseModel], ...]:
    """The models an annotation names: one, or each member of a (tagged) union."""
    sub = _submodel(annotation)
    if sub is not None:
        return (sub,)
    if get_origin(annotation) is Annotated:
        return _models_of(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for arg in get_args(annotation) for m in _models_of(arg))
    return ()


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


def _prefix(root: type[BaseSettings]) -> str:
    return root.model_config.get("env_prefix", "")


def _env_name(root: type[BaseSettings], path: Sequence[str]) -> str:
    return _prefix(root) + "__".join(path).upper()


def _defaults(root: type[BaseSettings]) -> dict[str, Any]:
    return root.model_construct().model_dump(mode="json")


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


def read_file(path: Path, env_var: str) -> dict[str, Any]:
    """The TOML file's contents; a missing file is {} unless `env_var` (which names it) is set."""
    if not path.is_file():
        if env_var in os.environ:
            raise SettingsError(f"{env_var} names no file: {path}")
        return {}
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SettingsError(f"cannot read settings file {path}: {err}") from None


def unknown_file_keys(
    data: Mapping[str, Any],
    path: Path,
    root: type[BaseSettings],
    renamed: Mapping[str, str],
) -> list[str]:
    """One message per key in the file (at any depth) that `root` lacks; a key `renamed`
    (old dotted name -> new) names its new name."""
    return [
        _moved(key, renamed[key], root, f" in {path}")
        if key in renamed
        else f"unknown setting '{key}' in {path}" + (f" (did you mean '{near}'?)" if near else "")
        for key, near in _unknown_keys(data, root)
    ]


def _moved(old: str, new: str, root: type[BaseSettings], where: str) -> str:
    """The one line for a setting that was renamed: its new dotted name and env variable."""
    return f"setting '{old}'{where} is now '{new}' ({_env_name(root, new.split('.'))})"


def _renamed_env(
    name: str, root: type[BaseSettings], renamed: Mapping[str, str]
) -> tuple[str, str] | None:
    """(new variable, new dotted name) for a variable that sets a renamed setting (or a key
    below one, as `RAGSTREAM_API_KEYS__k1`), else None."""
    parts = name[len(_prefix(root)) :].split("__")
    for n in range(len(parts), 0, -1):
        new = renamed.get(".".join(parts[:n]).lower())
        if new is not None:
            rest = "".join(f"__{part}" for part in parts[n:])
            return _env_name(root, new.split(".")) + rest, new
    return None


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
        sub = _submodel(field.annotation)
        if sub is not None and isinstance(value, Mapping):
            yield from _unknown_keys(value, sub, f"{at}{key}.")
        if isinstance(value, list):
            for i, entry in enumerate(value):
                item = _item_model(field.annotation, entry if isinstance(entry, Mapping) else {})
                if item is not None and isinstance(entry, Mapping):
                    yield from _unknown_keys(entry, item, f"{at}{key}[{i}].")


def _env_target(name: str, root: type[BaseSettings]) -> tuple[str, ...] | None:
    """The setting path an env variable sets (as pydantic-settings reads it: case-
    insensitive, `__` nests; a dict field takes any key below it), or None if none."""
    parts = tuple(name[len(_prefix(root)) :].lower().split("__"))
    model: type[BaseModel] = root
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


def unknown_env(
    env: Mapping[str, str],
    root: type[BaseSettings],
    allowed: Collection[str],
    renamed: Mapping[str, str],
) -> list[str]:
    """One message per variable in `env` that sets no setting and is not `allowed` (upper
    case); one for a `renamed` setting (old dotted name -> new) names the new variable."""
    prefix = _prefix(root)
    valid = [_env_name(root, p[:n]) for p, _ in _leaves(root) for n in range(1, len(p) + 1)]
    valid += allowed
    stems = {v[len(prefix) :] for v in valid}
    problems = []
    for name in sorted(env):
        if name.upper() in allowed or _env_target(name, root) is not None:
            continue
        moved = _renamed_env(name, root, renamed)
        if moved is not None:
            problems.append(f"environment variable {name} is now {moved[0]} (setting '{moved[1]}')")
            continue
        near = _closest(name[len(prefix) :].upper(), stems)
        hint = f" (did you mean {prefix}{near}?)" if near else ""
        problems.append(f"unknown environment variable {name}{hint}")
    return problems


def _is_table(annotation: Any) -> bool:
    """Lists, dicts and nested models: pydantic-settings reads their env vars as JSON."""
    return _submodel(annotation) is not None or get_origin(annotation) in (list, dict)


def check_env_json(
    env: Mapping[str, str], root: type[BaseSettings], secrets: Collection[str]
) -> None:
    """Refuse a variable for a table setting whose value is not JSON (`secrets` not shown)."""
    for name, value in sorted(env.items()):
        target = _env_target(name, root)
        field = _field_at(root, target) if target else None
        if target is None or field is None or not _is_table(field.annotation):
            continue
        try:
            json.loads(value)
        except ValueError as err:
            shown = "'***'" if ".".join(target) in secrets else _short(value)
            raise SettingsError(
                f"invalid value {shown} for setting '{'.'.join(target)}' (from env {name}): "
                f"expected JSON ({err})"
            ) from None


def _field_at(root: type[BaseModel], path: Sequence[str]) -> FieldInfo | None:
    """The field a setting path ends at; None when it goes on into a dict's keys."""
    model: type[BaseModel] | None = root
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


class Origins:
    """Where a setting path gets its value: argument > env > file > default (the order of the
    root's sources)."""

    def __init__(
        self,
        arguments: Mapping[str, Any],
        env: Mapping[str, str],
        file: Mapping[str, Any],
        file_label: str,
        root: type[BaseSettings],
    ) -> None:
        self.arguments, self.file, self.file_label, self.root = arguments, file, file_label, root
        targets = [
            (t, name, value) for name, value in env.items() if (t := _env_target(name, root))
        ]
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

    def of_leaves(self) -> dict[str, str]:
        """Dotted name -> source, for every leaf setting of `root`."""
        return {".".join(p): self.source(p) for p, _ in _leaves(self.root)}


def _loads(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return None


def describe(
    err: ValidationError,
    origins: Origins,
    root: type[BaseSettings],
    secrets: Collection[str],
    renamed: Mapping[str, str],
) -> str:
    """pydantic's errors as one line: unknown keys with a suggestion (a `renamed` one with its
    new name), else the first error (a value under one of `secrets` shown as '***')."""
    errors = err.errors()
    for e in errors:
        e["loc"] = _untagged(e["loc"], root)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return "; ".join(_describe_unknown(e["loc"], origins, root, renamed) for e in unknown)
    first = errors[0]
    key = _dotted(first["loc"])
    where = _phrase(origins.source(first["loc"]))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "missing":
        where = _phrase(origins.source(first["loc"][:-1]))
        return f"setting '{key}' is required{where}{more}"
    secret = any(key == s or key.startswith(s + ".") for s in secrets)
    shown = "'***'" if secret else _short(first["input"])
    return f"invalid value {shown} for setting '{key}'{where}: {first['msg']}{more}"


def _untagged(loc: Sequence[str | int], root: type[BaseModel]) -> tuple[str | int, ...]:
    """An error location without the tag pydantic puts after a tagged union's index
    (`sources.0.folder.name` -> `sources.0.name`)."""
    out: list[str | int] = []
    parent: type[BaseModel] | None = root
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            continue
        if out and isinstance(out[-1], int) and len(_models_of(_list_item(annotation))) > 1:
            annotation = None  # the tag: the entry's own fields follow
            continue
        field = parent.model_fields.get(part) if parent is not None else None
        annotation = field.annotation if field else None
        parent = _submodel(annotation)
        out.append(part)
    return tuple(out)


def _list_item(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", ())
    return args[0] if get_origin(annotation) is list and args else None


def _describe_unknown(
    loc: Sequence[str | int],
    origins: Origins,
    root: type[BaseSettings],
    renamed: Mapping[str, str],
) -> str:
    key = _dotted(loc)
    if key in renamed:
        return _moved(key, renamed[key], root, _place(origins.source(loc), root))
    parents: tuple[type[BaseModel], ...] = (root,)
    for part in loc[:-1]:
        if not parents or isinstance(part, int):
            continue
        field = parents[0].model_fields.get(part)
        annotation = field.annotation if field else None
        parents = _models_of(annotation) or _models_of(_list_item(annotation))
    names = {name for model in parents for name in model.model_fields}
    near = _closest(str(loc[-1]), sorted(names)) if names else None
    hint = f" (did you mean '{_dotted([*loc[:-1], near])}'?)" if near else ""
    return f"unknown setting '{key}'{_place(origins.source(loc), root)}{hint}"


def _phrase(source: str) -> str:
    """' (from env RAGSTREAM_X)' for a value's message; '' for a default."""
    return "" if source == "default" else f" (from {source})"


def _place(source: str, root: type[BaseModel]) -> str:
    """' in ragstream.toml' / ' in RAGSTREAM_CHUNK' for an unknown key's message."""
    if source == "argument":
        return f" in the {root.__name__}() arguments"
    if source == "default":
        return ""
    return " in " + source.removeprefix("file ").removeprefix("env ")
