"""A document's own metadata as typed fields: the types, how a value is read as one, and
which reading wins when two places name the same field.

A field has one of six types. What every chunk's payload holds (`IndexedChunk.meta`) is the
stored form, the same in every store:

- `keyword`: a string; `keywords`: a list of strings (`tags = a` matches a list holding `a`);
- `integer`, `float`: numbers;
- `datetime`: an ISO 8601 instant in UTC (`2024-01-05T10:00:00Z`); a bare date is its
  midnight, and a time without a zone is read in the configured zone (`metadata.timezone`);
- `bool`: the keyword `"true"` or `"false"` (an engine that cannot match a JSON bool
  matches a keyword).

A field's type is fixed by its first reading in a data dir (`connectors.fields`); a later value
that cannot be read as that type is kept as text and reported, never dropped and never fatal.

>>> infer_type(["a", "b"]), infer_type(3), infer_type(dt.date(2024, 1, 5))
('keywords', 'integer', 'datetime')
>>> stored_as(dt.date(2024, 1, 5), "datetime")
'2024-01-05T00:00:00Z'
>>> stored_as("yes", "bool"), stored_as("soon", "integer") is None
('true', True)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Literal
from zoneinfo import ZoneInfo

FieldType = Literal["keyword", "keywords", "integer", "float", "datetime", "bool"]
FIELD_TYPES: tuple[FieldType, ...] = ("keyword", "keywords", "integer", "float", "datetime", "bool")
# where a field was read, strongest first: front matter over the file's own properties (DOCX
# core properties, PDF info and XMP, HTML <meta>, EPUB OPF) over the source (git: the last
# commit) over the filesystem
MetaOrigin = Literal["front_matter", "properties", "source", "file"]
PRECEDENCE: tuple[MetaOrigin, ...] = ("front_matter", "properties", "source", "file")
StoredValue = str | int | float | list[str]
RawValue = str | int | float | bool | list[str] | dt.date | dt.datetime
MAX_TEXT = 512  # a stored keyword's length cap (a front matter essay is no filter value)
MAX_ITEMS = 64  # a list's item cap
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
FIELD_NAME = re.compile(r"^[a-z_][a-z0-9_\-]{0,63}$")


def field_name(key: str) -> str | None:
    """The filterable name of a metadata key (lowercase; spaces and dots become `_`), or None
    for a key no filter could name."""
    name = re.sub(r"[\s.]+", "_", key.strip().lower())
    return name if FIELD_NAME.match(name) else None


def infer_type(value: RawValue) -> FieldType:
    """The type a first reading fixes."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, dt.date):  # datetime is a date too
        return "datetime"
    if isinstance(value, list):
        return "keywords"
    return "keyword"


_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def stored_type(value: StoredValue) -> FieldType:
    """The type a value in stored form was most likely stored as (an import rebuilds the
    catalogue so): a UTC instant is a datetime, `"true"` / `"false"` a bool.

    >>> stored_type("2024-01-05T00:00:00Z"), stored_type("false"), stored_type("Ada")
    ('datetime', 'bool', 'keyword')
    """
    if isinstance(value, str):
        if _INSTANT.match(value):
            return "datetime"
        return "bool" if value in ("true", "false") else "keyword"
    return infer_type(value)


def parse_instant(text: str, zone: str = "UTC") -> dt.datetime | None:
    """An ISO 8601 date or date-time (a trailing `Z` allowed) as an aware datetime; a bare
    date is its midnight and a zoneless time is read in `zone`; None when unreadable."""
    text = text.strip()
    try:
        if _DATE.match(text):
            parsed = dt.datetime.combine(dt.date.fromisoformat(text), dt.time())
        else:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=ZoneInfo(zone))


def instant_text(value: dt.datetime) -> str:
    """The stored form of an aware instant: UTC, `Z`, microseconds only when present."""
    utc = value.astimezone(dt.UTC).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds") + "Z"


def _as_instant(value: RawValue, zone: str) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=ZoneInfo(zone))
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time(), tzinfo=ZoneInfo(zone))
    if isinstance(value, str):
        return parse_instant(value, zone)
    return None


def _as_number(value: RawValue, integer: bool) -> int | float | None:
    if isinstance(value, bool | list | dt.date):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not integer:
        return number if number == number and abs(number) != float("inf") else None
    return int(number) if number.is_integer() and abs(number) < 2**63 else None


def _as_text(value: RawValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return instant_text(value) if value.tzinfo else value.isoformat()
    if isinstance(value, list):
        return ", ".join(value)
    return str(value)


def stored_as(value: RawValue, field_type: FieldType, zone: str = "UTC") -> StoredValue | None:
    """`value` in the stored form of `field_type`, or None when it cannot be read so."""
    if field_type in ("keyword", "keywords"):
        items = value if isinstance(value, list) else [_as_text(value)]
        items = [item[:MAX_TEXT] for item in items[:MAX_ITEMS] if item]
        if not items:
            return None
        return items if field_type == "keywords" or isinstance(value, list) else items[0]
    if field_type in ("integer", "float"):
        return _as_number(value, field_type == "integer")
    if field_type == "datetime":
        instant = _as_instant(value, zone)
        return None if instant is None else instant_text(instant)
    text = _as_text(value).strip().lower()
    return "true" if text in _TRUE else "false" if text in _FALSE else None


def as_text(value: RawValue) -> str:
    """A value that its field's type cannot hold, kept as text."""
    return _as_text(value)[:MAX_TEXT]


def merge_readings(
    readings: Mapping[MetaOrigin, Mapping[str, RawValue]],
) -> dict[str, tuple[RawValue, MetaOrigin]]:
    """Each field's value from the strongest place that names it (`PRECEDENCE`), with that
    place; keys are read as field names (`field_name`), and a key no filter could name is
    left out.

    >>> merge_readings({"file": {"size": 3}, "front_matter": {"Title": "A"},
    ...                 "properties": {"title": "B"}})
    {'title': ('A', 'front_matter'), 'size': (3, 'file')}
    """
    out: dict[str, tuple[RawValue, MetaOrigin]] = {}
    for origin in PRECEDENCE:
        for key, value in readings.get(origin, {}).items():
            name = field_name(key)
            if name is not None and name not in out and value not in (None, "", []):
                out[name] = (value, origin)
    return out
