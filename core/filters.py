"""The one filter language of every face: its JSON form, its `--where` text form, its check
against the catalogue of fields, and its meaning over one payload.

A filter is a tree. A leaf compares a field with a value (`==`, `!=`, `<`, `<=`, `>`, `>=`,
`in`, `not in`, `exists`); a node joins filters (`AND`, `OR`, `NOT`). Its JSON form follows
Haystack's: `{"field": "tags", "operator": "==", "value": "finance"}` and
`{"operator": "AND", "conditions": [...]}`. Its text form is what `--where` takes:

    tags = finance and date >= 2024-01-01 and not draft
    (author in ("Ada", "Grace") or year > 1990) and summary exists and updated >= -30d

`check` reads a filter against the fields the index knows and their types (`FieldSpec`) and
returns a `Where`: the same tree with each leaf's payload key and typed value, or raises
`InvalidRequestError` naming the field and the nearest known names — a field no document
carries, an operator its type does not take, a value it cannot read, a filter too deep or too
large. It never fails open: nothing here widens a filter or drops a leaf. Each store
translates a `Where` into its own filter and applies it inside the store (ANDed with the
tenant and permission filters); `matches` is the meaning in Python: the oracle the stores are
tested against and the in-memory back-end's filter.

Semantics: `=` on a list field matches a list holding the value; `!=` is `not =` (a document
without the field matches it); a range or `in` never matches a document without the field;
`exists` means present, not null and not an empty list. A bare field is `field = true`.
`date = 2024-01-05` (a bare date on a datetime field) means that whole day.

>>> w = check(parse_where("tags = finance and not draft"), {"tags": "keywords", "draft": "bool"})
>>> matches(w, {"meta": {"tags": ["finance", "q3"]}})
True
>>> matches(w, {"meta": {"tags": ["finance"], "draft": "true"}})
False
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import doc_prefixes, prefix_key
from ragstream.core.metadata import FieldType, instant_text, parse_instant, stored_as
from ragstream.core.models import IndexedChunk

Operator = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not in", "exists"]
MAX_DEPTH = 8  # nested AND / OR / NOT
MAX_LEAVES = 64
MAX_VALUES = 1000  # an `in` list's values
# fields of every chunk, kept at the payload's top level (the rest are `meta.<name>`)
FIXED_FIELDS: dict[str, FieldType] = {
    "doc_id": "keyword",
    "source": "keyword",
    "file_type": "keyword",
    "folder": "keyword",  # a directory of doc ids (`src:docs/`): every file under it
}
_FIXED_KEYS = {"folder": "doc_prefixes"}
_RANGE_TYPES = {"integer", "float", "datetime"}
_OPS_OF: dict[FieldType, set[str]] = {
    "keyword": {"==", "!=", "in", "not in", "exists"},
    "keywords": {"==", "!=", "in", "not in", "exists"},
    "bool": {"==", "!=", "exists"},
    "integer": {"==", "!=", "<", "<=", ">", ">=", "in", "not in", "exists"},
    "float": {"==", "!=", "<", "<=", ">", ">=", "exists"},
    "datetime": {"==", "!=", "<", "<=", ">", ">=", "exists"},
}
Scalar = str | int | float | bool


class Condition(BaseModel):
    """One comparison: `field operator value` (`exists` takes no value, or true / false)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    field: str = Field(min_length=1, max_length=128)
    operator: Operator
    value: Scalar | list[Scalar] | None = None


class Logic(BaseModel):
    """Filters joined: all of them (`AND`), any of them (`OR`), or none of them (`NOT`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    operator: Literal["AND", "OR", "NOT"]
    conditions: list[Filter] = Field(min_length=1)  # how many: `check` (MAX_LEAVES)


Filter = Annotated[Logic | Condition, Field(union_mode="left_to_right")]
Logic.model_rebuild()
_FILTER: TypeAdapter[Logic | Condition] = TypeAdapter(Filter)
_ALIASES = {"=": "==", "AND": "AND", "OR": "OR", "NOT": "NOT", "not_in": "not in"}


def _normal(data: Any, depth: int = 0) -> Any:
    """Accepted spellings: `=` for `==`, lowercase logic words."""
    if depth > MAX_DEPTH + 1 or not isinstance(data, dict):
        return data
    out = dict(data)
    op = out.get("operator")
    if isinstance(op, str):
        op = op.strip()
        out["operator"] = op.upper() if op.upper() in ("AND", "OR", "NOT") else _ALIASES.get(op, op)
    if isinstance(out.get("conditions"), list):
        out["conditions"] = [_normal(c, depth + 1) for c in out["conditions"]]
    return out


def filter_from_json(data: Any) -> Logic | Condition:
    """A filter from its JSON form (a dict), or `InvalidRequestError` saying what is wrong."""
    try:
        return _FILTER.validate_python(_normal(data))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequestError(f"filter: {first['msg']} (at {where or 'top'})") from None


# --- the text form (`--where`) --------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<op><=|>=|!=|==|=|<|>|\(|\)|,)"""
    r"""|(?P<word>[^\s()<>=!,"']+))"""
)
_WORDS = {"and", "or", "not", "in", "exists"}


@dataclass
class _Tokens:
    items: list[tuple[str, str]]  # (kind, text): kind is "str", "op", "word"
    at: int = 0

    def peek(self) -> tuple[str, str] | None:
        return self.items[self.at] if self.at < len(self.items) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise InvalidRequestError("--where: the filter ends too soon")
        self.at += 1
        return token

    def word(self, *words: str) -> bool:
        token = self.peek()
        if token and token[0] == "word" and token[1].lower() in words:
            self.at += 1
            return True
        return False

    def op(self, symbol: str) -> bool:
        if self.peek() == ("op", symbol):
            self.at += 1
            return True
        return False


def _lex(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    at, text = 0, text.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise InvalidRequestError(f"--where: cannot read {text[at : at + 20]!r}")
        kind = m.lastgroup or "word"
        value = m.group(kind)
        if kind == "str":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value))
        at = m.end()
    return out


def parse_where(text: str) -> Logic | Condition:
    """The text form of a filter as its tree (its fields and values are checked by `check`)."""
    tokens = _Tokens(_lex(text))
    if not tokens.items:
        raise InvalidRequestError("--where: the filter is empty")
    tree = _or(tokens, 0)
    if tokens.peek() is not None:
        raise InvalidRequestError(f"--where: unexpected {tokens.peek()[1]!r}")  # type: ignore[index]
    return tree


def _join(op: Literal["AND", "OR"], parts: list[Logic | Condition]) -> Logic | Condition:
    return parts[0] if len(parts) == 1 else Logic(operator=op, conditions=parts)


def _or(tokens: _Tokens, depth: int) -> Logic | Condition:
    parts = [_and(tokens, depth)]
    while tokens.word("or"):
        parts.append(_and(tokens, depth))
    return _join("OR", parts)


def _and(tokens: _Tokens, depth: int) -> Logic | Condition:
    parts = [_unary(tokens, depth)]
    while tokens.word("and"):
        parts.append(_unary(tokens, depth))
    return _join("AND", parts)


def _unary(tokens: _Tokens, depth: int) -> Logic | Condition:
    if depth > MAX_DEPTH:
        raise InvalidRequestError(f"--where: the filter nests deeper than {MAX_DEPTH}")
    if tokens.word("not"):
        return Logic(operator="NOT", conditions=[_unary(tokens, depth + 1)])
    if tokens.op("("):
        inner = _or(tokens, depth + 1)
        if not tokens.op(")"):
            raise InvalidRequestError("--where: a '(' is never closed")
        return inner
    return _comparison(tokens)


def _value(tokens: _Tokens) -> str:
    kind, text = tokens.take()
    if kind == "op":
        raise InvalidRequestError(f"--where: expected a value, found {text!r}")
    return text


def _comparison(tokens: _Tokens) -> Condition:
    kind, name = tokens.take()
    if kind != "word" or name.lower() in _WORDS:
        raise InvalidRequestError(f"--where: expected a field name, found {name!r}")
    if tokens.word("exists"):
        return Condition(field=name, operator="exists", value=True)
    negated = tokens.word("not")
    if tokens.word("in"):
        if not tokens.op("("):
            raise InvalidRequestError(f"--where: {name} in takes a list: in (a, b)")
        values: list[Scalar] = [_value(tokens)]
        while tokens.op(","):
            values.append(_value(tokens))
        if not tokens.op(")"):
            raise InvalidRequestError(f"--where: the list after {name} in is never closed")
        return Condition(field=name, operator="not in" if negated else "in", value=values)
    if negated:
        raise InvalidRequestError(f"--where: expected 'in' after '{name} not'")
    token = tokens.peek()
    if token is None or token[0] != "op" or token[1] in "(),":
        return Condition(field=name, operator="==", value=True)  # a bare field: field = true
    tokens.take()
    op = "==" if token[1] == "=" else token[1]
    return Condition(field=name, operator=op, value=_value(tokens))


# --- the checked form (`Where`) -------------------------------------------------------------


@dataclass(frozen=True)
class Equals:
    """The payload `key` holds (one of) `values`; a list payload holds one of them."""

    key: str
    values: tuple[str | int | float, ...]


@dataclass(frozen=True)
class Between:
    """A number (or, with `instant`, an ISO instant) within the bounds (None: unbounded)."""

    key: str
    gt: float | str | None = None
    gte: float | str | None = None
    lt: float | str | None = None
    lte: float | str | None = None
    instant: bool = False


@dataclass(frozen=True)
class Present:
    key: str


@dataclass(frozen=True)
class AllOf:
    items: tuple[Where, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Where, ...]


@dataclass(frozen=True)
class NoneOf:
    items: tuple[Where, ...]


Where = Equals | Between | Present | AllOf | AnyOf | NoneOf


def meta_key(name: str) -> str:
    """Where a metadata field sits in every payload (and which key its payload index is on)."""
    return f"meta.{name}"


def payload_key(name: str) -> str:
    """Where a field sits in every payload: a fixed field at the top, metadata in `meta`."""
    return _FIXED_KEYS.get(name, name) if name in FIXED_FIELDS else meta_key(name)


def nearest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name.lower(), list(known), n=3, cutoff=0.5)
    return f"; nearest: {', '.join(close)}" if close else ""


def check(
    tree: Logic | Condition,
    fields: Mapping[str, FieldType],
    now: dt.datetime | None = None,
    zone: str = "UTC",
) -> Where:
    """The filter against the known metadata `fields` (the fixed fields are always known),
    as a `Where`; `InvalidRequestError` on the first thing wrong with it."""
    leaves = _count_leaves(tree, 0)
    if leaves > MAX_LEAVES:
        raise InvalidRequestError(f"filter: {leaves} comparisons, more than {MAX_LEAVES}")
    return _check(tree, fields, now or dt.datetime.now(dt.UTC), zone)


def _count_leaves(tree: Logic | Condition, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise InvalidRequestError(f"filter: nests deeper than {MAX_DEPTH}")
    if isinstance(tree, Condition):
        return 1
    return sum(_count_leaves(c, depth + 1) for c in tree.conditions)


def _check(
    tree: Logic | Condition,
    fields: Mapping[str, FieldType],
    now: dt.datetime,
    zone: str,
) -> Where:
    known = {**fields, **FIXED_FIELDS}
    if isinstance(tree, Logic):
        items = tuple(_check(c, fields, now, zone) for c in tree.conditions)
        if tree.operator == "NOT":  # none of them: not (all of them), as Haystack reads it
            return NoneOf((AllOf(items),) if len(items) > 1 else items)
        return AllOf(items) if tree.operator == "AND" else AnyOf(items)
    explicit = tree.field.lower().startswith("meta.")  # `meta.source`: the metadata field
    name = tree.field.lower().removeprefix("meta.")
    field_type = (fields if explicit else known).get(name)
    if field_type is None:
        raise InvalidRequestError(
            f"filter: no document carries the field {tree.field!r}{nearest(name, sorted(known))}"
        )
    if tree.operator not in _OPS_OF[field_type]:
        raise InvalidRequestError(
            f"filter: {tree.field!r} is a {field_type} field; it takes "
            f"{', '.join(sorted(_OPS_OF[field_type]))}, not {tree.operator!r}"
        )
    key = meta_key(name) if explicit else payload_key(name)
    return _leaf(tree, key, field_type, now, zone)


def _leaf(tree: Condition, key: str, field_type: FieldType, now: dt.datetime, zone: str) -> Where:
    op, value = tree.operator, tree.value
    if op == "exists":
        present: Where = Present(key)
        return present if value in (None, True, "true") else NoneOf((present,))
    if value is None:
        raise InvalidRequestError(f"filter: {tree.field!r} {op} takes a value")
    if op in ("in", "not in"):
        values = value if isinstance(value, list) else [value]
        if not values or len(values) > MAX_VALUES:
            raise InvalidRequestError(f"filter: {tree.field!r} {op} takes 1 to {MAX_VALUES} values")
        either = Equals(key, tuple(_typed(tree.field, v, field_type, now, zone) for v in values))
        return either if op == "in" else NoneOf((either,))
    if isinstance(value, list):
        raise InvalidRequestError(f"filter: {tree.field!r} {op} takes one value")
    if field_type in ("float", "datetime") and op in ("==", "!="):
        same = _same(tree.field, key, value, field_type, now, zone)
        return same if op == "==" else NoneOf((same,))
    typed = _typed(tree.field, value, field_type, now, zone)
    if key == "doc_prefixes":  # a folder is matched at a directory boundary (`prefix_key`)
        typed = prefix_key(str(typed))
    if op in ("==", "!="):
        equal = Equals(key, (typed,))
        return equal if op == "==" else NoneOf((equal,))
    bound = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}[op]
    return Between(key, **{bound: typed}, instant=field_type == "datetime")


def _same(
    name: str, key: str, value: Scalar, field_type: FieldType, now: dt.datetime, zone: str
) -> Where:
    """`==` on a float (a range of one point) or a datetime (a bare date: that whole day)."""
    typed = _typed(name, value, field_type, now, zone)
    if (
        field_type == "datetime"
        and isinstance(value, str)
        and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip())
    ):
        start = parse_instant(value, zone)
        assert start is not None
        return Between(key, gte=typed, lt=instant_text(start + dt.timedelta(days=1)), instant=True)
    return Between(key, gte=typed, lte=typed, instant=field_type == "datetime")


_RELATIVE = re.compile(r"^([+-])(\d{1,6})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _typed(
    name: str, value: Scalar, field_type: FieldType, now: dt.datetime, zone: str
) -> str | int | float:
    """A filter value in its field's stored form, or `InvalidRequestError` naming the field."""
    if field_type == "datetime" and isinstance(value, str):
        rel = _RELATIVE.match(value.strip())
        if rel:
            delta = dt.timedelta(seconds=int(rel.group(2)) * _UNIT_S[rel.group(3)])
            return instant_text(now - delta if rel.group(1) == "-" else now + delta)
    if field_type in ("keyword", "keywords") and isinstance(value, bool):
        value = "true" if value else "false"
    # a list field is matched one value at a time
    stored = stored_as(value, "keyword" if field_type == "keywords" else field_type, zone)
    if stored is None or isinstance(stored, list):
        what = {"datetime": "a date (2024-01-05, 2024-01-05T10:00:00Z, or -30d)"}.get(
            field_type, f"a {field_type}"
        )
        raise InvalidRequestError(f"filter: {name!r} takes {what}; cannot read {value!r}")
    return stored


# --- the meaning over one payload -----------------------------------------------------------


def _lookup(payload: Mapping[str, Any], key: str) -> Any:
    head, _, rest = key.partition(".")
    value = payload.get(head)
    return (
        _lookup(value, rest)
        if rest and isinstance(value, Mapping)
        else (value if not rest else None)
    )


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _in_bounds(value: Any, node: Between) -> bool:
    if node.instant:
        at = parse_instant(value) if isinstance(value, str) else None
        if at is None:
            return False
        point: Any = at
        bounds: list[Any] = [
            parse_instant(b) if isinstance(b, str) else None
            for b in (node.gt, node.gte, node.lt, node.lte)
        ]
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        point, bounds = value, [node.gt, node.gte, node.lt, node.lte]
    gt, gte, lt, lte = bounds
    return (
        (gt is None or point > gt)
        and (gte is None or point >= gte)
        and (lt is None or point < lt)
        and (lte is None or point <= lte)
    )


def chunk_fields(chunk: IndexedChunk) -> dict[str, Any]:
    """What a filter reads of a chunk: the keys its stored payload has."""
    return {
        "doc_id": chunk.doc_id,
        "source": chunk.source,
        "file_type": chunk.file_type,
        "doc_prefixes": doc_prefixes(chunk.doc_id),
        "meta": chunk.meta,
    }


def matches(where: Where, payload: Mapping[str, Any]) -> bool:
    """Whether one payload (a stored point's) passes the filter: the stores' oracle."""
    match where:
        case Equals(key, values):
            held = _items(_lookup(payload, key))
            return any(type(v) is not bool and v in values for v in held)
        case Between(key):
            return any(_in_bounds(v, where) for v in _items(_lookup(payload, key)))
        case Present(key):
            return bool(_items(_lookup(payload, key)))
        case AllOf(items):
            return all(matches(i, payload) for i in items)
        case AnyOf(items):
            return any(matches(i, payload) for i in items)
        case NoneOf(items):
            return not any(matches(i, payload) for i in items)
    raise TypeError(where)


def fields_named(where: Where) -> set[str]:
    """The payload keys a filter reads."""
    match where:
        case Equals(key) | Between(key) | Present(key):
            return {key}
        case AllOf(items) | AnyOf(items) | NoneOf(items):
            return set().union(*(fields_named(i) for i in items))
    raise TypeError(where)
