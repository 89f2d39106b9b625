"""The filter language: its text and JSON forms, its check against the catalogue (errors that
name the field and never fail open), and its meaning over one payload."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.answers import QueryRequest
from ragstream.core.errors import InvalidRequestError
from ragstream.core.filters import (
    MAX_DEPTH,
    MAX_LEAVES,
    AllOf,
    Between,
    Condition,
    Equals,
    Logic,
    NoneOf,
    Present,
    check,
    filter_from_json,
    matches,
    parse_where,
)
from ragstream.core.metadata import FieldType

TYPES: dict[str, FieldType] = {
    "tags": "keywords",
    "author": "keyword",
    "year": "integer",
    "score": "float",
    "date": "datetime",
    "draft": "bool",
}
NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)


def where(text: str) -> object:
    return check(parse_where(text), TYPES, now=NOW)


def test_the_issue_example_reads_as_three_conditions() -> None:
    got = where("tags = finance and date >= 2024-01-01 and not draft")
    assert got == AllOf(
        (
            Equals("meta.tags", ("finance",)),
            Between("meta.date", gte="2024-01-01T00:00:00Z", instant=True),
            NoneOf((Equals("meta.draft", ("true",)),)),
        )
    )


def test_precedence_parentheses_in_lists_and_quotes() -> None:
    tree = parse_where("a = 1 or b = 2 and not (c in ('x y', \"z\") or d exists)")
    assert isinstance(tree, Logic) and tree.operator == "OR"
    right = tree.conditions[1]
    assert isinstance(right, Logic) and right.operator == "AND"
    inner = right.conditions[1]
    assert isinstance(inner, Logic) and inner.operator == "NOT"
    either = inner.conditions[0]
    assert isinstance(either, Logic) and either.operator == "OR"
    assert either.conditions[0] == Condition(field="c", operator="in", value=["x y", "z"])
    assert either.conditions[1] == Condition(field="d", operator="exists", value=True)


def test_relative_dates_count_back_from_now() -> None:
    assert where("date >= -30d") == Between("meta.date", gte="2026-11-07T12:00:00Z", instant=True)
    assert where("date < +2h") == Between("meta.date", lt="2026-12-07T14:00:00Z", instant=True)


def test_a_bare_date_equal_means_that_whole_day_in_the_configured_zone() -> None:
    got = check(parse_where("date = 2024-01-05"), TYPES, now=NOW, zone="Europe/Berlin")
    assert got == Between(
        "meta.date", gte="2024-01-04T23:00:00Z", lt="2024-01-05T23:00:00Z", instant=True
    )
    assert matches(got, {"meta": {"date": "2024-01-05T22:59:59Z"}})
    assert not matches(got, {"meta": {"date": "2024-01-05T23:00:00Z"}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tgas = finance", "no document carries the field 'tgas'; nearest: tags"),
        ("auther = Ada", "nearest: author"),
        ("tags > finance", "'tags' is a keywords field; it takes"),
        ("draft in (true)", "'draft' is a bool field"),
        ("date >= yesterday", "'date' takes a date"),
        ("date >= 2024-13-45", "'date' takes a date"),
        ("year = soon", "'year' takes a integer"),
        ("score < many", "'score' takes a float"),
        ("draft = perhaps", "'draft' takes a bool"),
        ("tags = ", "ends too soon"),
        ("(tags = a", "never closed"),
        ("tags = a )", "unexpected ')'"),
        ("and = 1", "expected a field name"),
        ("", "empty"),
    ],
)
def test_a_bad_filter_is_an_error_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        where(text)


def test_too_deep_or_too_large_is_refused() -> None:
    deep = "not " * (MAX_DEPTH + 2) + "draft"
    with pytest.raises(InvalidRequestError, match="deeper"):
        where(deep)
    wide = " or ".join(f"year = {i}" for i in range(MAX_LEAVES + 1))
    with pytest.raises(InvalidRequestError, match="comparisons"):
        where(wide)
    nested: dict[str, object] = {"field": "draft", "operator": "==", "value": True}
    for _ in range(MAX_DEPTH + 2):
        nested = {"operator": "NOT", "conditions": [nested]}
    with pytest.raises(InvalidRequestError, match="deeper"):
        check(filter_from_json(nested), TYPES)


def test_the_json_form_is_the_text_form() -> None:
    body = {
        "operator": "and",
        "conditions": [
            {"field": "tags", "operator": "=", "value": "finance"},
            {
                "operator": "NOT",
                "conditions": [{"field": "draft", "operator": "==", "value": True}],
            },
        ],
    }
    assert check(filter_from_json(body), TYPES) == where("tags = finance and not draft")
    request = QueryRequest(query="q", filter=body)
    assert request.filter == filter_from_json(body)
    assert QueryRequest(query="q", filter="tags = finance").filter == parse_where("tags = finance")
    with pytest.raises(ValueError, match="ends too soon"):
        QueryRequest(query="q", filter="tags =")
    with pytest.raises(InvalidRequestError, match="filter"):
        filter_from_json({"field": "tags", "operator": "~", "value": "x"})


def test_the_meaning_of_missing_fields_lists_and_text_values() -> None:
    has_list = {"meta": {"tags": ["finance", "q3"], "year": 2024}}
    empty = {"meta": {"tags": [], "year": "soon"}}  # a value kept as text against `integer`
    nothing: dict[str, object] = {}
    assert matches(where("tags = q3"), has_list)
    assert matches(where("tags != ops"), nothing)  # not (=)
    assert not matches(where("tags in (ops, x)"), nothing)
    assert matches(where("tags not in (ops, x)"), nothing)
    assert not matches(where("tags exists"), empty)
    assert not matches(where("year >= 0"), empty)
    assert matches(where("year >= 2024 and year <= 2024"), has_list)
    assert isinstance(where("tags exists"), Present)


@given(st.text(max_size=60))
def test_any_text_is_a_filter_or_a_clear_error(text: str) -> None:
    try:
        where(text)
    except InvalidRequestError as err:
        assert str(err)
