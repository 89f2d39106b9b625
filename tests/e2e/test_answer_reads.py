"""What a user reads: the offline answer says the answer and stops. No heading, title or
caption is ever an answer sentence (docling's labels, recorded per chunk), a sentence
from another file joins only when read as answering on its own, a table row answers when
the question names what it holds, and a follow-up leads with what it asked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.core.answers import Answer, ChatMessage
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.query.verify import sentence_spans

FILES = {
    "pumps.md": """# Pump station P-7

The pump station P-7 runs at 40 litres per second. It was built in 1998 and serves the
eastern district of the town.

## Why the pumps stop at night

The pumps stop between midnight and four in the morning, when demand is lowest. The
reservoir covers the town's needs during those hours.
""",
    "kestrels.md": """# Kestrels

The common kestrel hovers over open fields while hunting voles. Kestrels nest in old crow
nests and on cliff ledges, and they lay four to six eggs in spring.
""",
    "vesuvius.md": """# Mount Vesuvius

Mount Vesuvius is a volcano on the Gulf of Naples in Italy. Its eruption in AD 79 buried
the Roman towns of Pompeii and Herculaneum under ash.

## Height

The volcano is 1,281 metres high. Its summit crater is about 300 metres deep.
""",
    "plans.md": """# Subscription plans

The service is sold in three plans. Every plan includes email support.

| Plan | Monthly price | Storage |
|---|---|---|
| Basic | 5 EUR | 10 GB |
| Pro | 20 EUR | 100 GB |
| Team | 60 EUR | 1 TB |
""",
}
HEADINGS = {
    "Pump station P-7",
    "Why the pumps stop at night",
    "Kestrels",
    "Mount Vesuvius",
    "Height",
    "Subscription plans",
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    root = tmp_path_factory.mktemp("reads")
    docs = root / "docs"
    docs.mkdir()
    for name, text in FILES.items():
        (docs / name).write_text(text)
    s = Settings(data_dir=root / "data", query={"log_queries": False})
    api.sync([docs], settings=s)
    yield s.with_paths([docs])


def sentences(answer: Answer) -> list[str]:
    return [answer.text[a:b] for a, b in sentence_spans(answer.text)]


def cited_files(answer: Answer) -> set[str]:
    return {Path(c.path).name for c in answer.citations}


def test_headings_and_table_rows_are_recorded_as_no_prose(settings: Settings) -> None:
    with open_runtime(settings) as rt:
        chunks = [c for d in rt.vectors.live_doc_fingerprints() for c in rt.vectors.live_chunks(d)]
    labelled = {(c.text[a:b], kind) for c in chunks for a, b, kind in c.non_prose}
    assert {h for h, kind in labelled if kind == "heading"} == HEADINGS
    rows = {text for text, kind in labelled if kind == "table_row"}
    assert len(rows) == 3 and all("Monthly price" in r for r in rows)


def test_an_answer_is_the_sentence_that_answers_and_no_heading(settings: Settings) -> None:
    with Client(settings=settings) as client:
        pump = client.query("How fast does pump P-7 run?")
        night = client.query("Why do the pumps stop at night?")
    assert pump.refusal is None and "40 litres per second" in sentences(pump)[0]
    assert cited_files(pump) == {"pumps.md"}  # nothing about kestrels joins it
    assert len(sentences(pump)) <= 2
    assert night.refusal is None and "demand is lowest" in sentences(night)[0]
    for answer in (pump, night):
        said = {s.rsplit(" [S", 1)[0] for s in sentences(answer)}
        assert not said & HEADINGS, answer.text


def test_a_table_row_answers_when_the_question_names_what_it_holds(settings: Settings) -> None:
    with Client(settings=settings) as client:
        answer = client.query("What does the Pro plan cost?")
    assert answer.refusal is None
    assert "20 EUR" in sentences(answer)[0] and cited_files(answer) == {"plans.md"}


def test_a_follow_up_leads_with_what_it_did_not_hear_yet(settings: Settings) -> None:
    first_question = "What is Mount Vesuvius?"
    with Client(settings=settings) as client:
        first = client.query(first_question)
        lead = sentences(first)[0].rsplit(" [S", 1)[0]
        history = [
            ChatMessage(role="user", content=first_question),
            ChatMessage(role="assistant", content=first.text),
        ]
        more = client.chat(
            [*history, ChatMessage(role="user", content="Tell me more about Vesuvius.")]
        )
        again = client.chat([*history, ChatMessage(role="user", content=first_question)])
    assert first.refusal is None and more.refusal is None and again.refusal is None
    assert lead not in more.text  # nothing the first answer said is said again
    assert sentences(again)[0].rsplit(" [S", 1)[0] == lead  # asked again: answered again
