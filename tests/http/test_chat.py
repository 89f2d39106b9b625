"""A conversation through every face: `POST /v1/chat` (JSON and Server-Sent Events), the
embedded and the HTTP `Client`, `AsyncClient`, the `ragstream ask --chat` loop fed on its
stdin, and the console's Ask thread in headless Chromium.

One small real folder (four notes written here, synced by the real ingest, answered by the
real engine on a real uvicorn server) where the follow-up "How high is it?" only means
something with its history: with it, the answer cites the Vesuvius note and says 1,281
metres; without it (asked alone, or after a new conversation), it is refused or cites
something else. Bad conversations are typed 4xx with a short body, and the server keeps
answering after them. The terminal loop and the browser are marked slow (a subprocess, a
browser); the rest runs in `make test-fast`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from ragstream import api
from ragstream.client import AsyncClient, ChatMessage, Client
from ragstream.core.answers import Answer, ChatRequest
from ragstream.core.settings import ServerSettings, Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex
from tests.e2e.test_docs_browser import SCREENSHOT_DIR, browser  # noqa: F401 (the fixture)
from tests.unit.query.test_conversation import FOLLOW_UP, HISTORY, VOLCANOES

REPO = Path(__file__).resolve().parents[2]
IGNORE = {"trace_id", "timings_ms"}
FIRST = HISTORY[0]["content"]
CONVERSATION = [*HISTORY, {"role": "user", "content": FOLLOW_UP}]
VESUVIUS = "notes:vesuvius.md"


@dataclass(frozen=True)
class Served:
    settings: Settings
    engine: QueryEngine
    url: str


@pytest.fixture(scope="module")
def volcanoes(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The four notes, synced into a fresh data dir (nothing holds it open yet)."""
    root = tmp_path_factory.mktemp("chat") / "notes"
    root.mkdir()
    for name, text in VOLCANOES.items():
        (root / name).write_text(text, encoding="utf-8")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        sources=[FolderConfig(name="notes", root=root, tenant="geo")],
    )
    settings.query.log_queries = False
    report = api.sync([root], settings=settings)
    assert report.docs_changed == len(VOLCANOES) and not report.dead_letters
    return settings


@pytest.fixture(scope="module")
def served(volcanoes: Settings) -> Iterator[Served]:
    """The index open in this process and served over HTTP on 127.0.0.1."""
    with (
        QueryEngine.open(volcanoes) as engine,
        serving(Serving(volcanoes, ServedIndex(engine)), "127.0.0.1", 0) as url,
    ):
        yield Served(volcanoes, engine, url)


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    """Status, the JSON body (or the raw text of an event stream) and its content type."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request) as r:
            kind, raw = r.headers.get("content-type", ""), r.read().decode()
            return r.status, raw if kind.startswith("text/event-stream") else json.loads(raw), kind
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("content-type", "")


def cited(answer: Answer) -> set[str]:
    return {c.doc_id for c in answer.citations}


def assert_answered_from_history(answer: Answer) -> None:
    assert answer.refusal is None, answer.refusal
    assert cited(answer) == {VESUVIUS} and "1,281" in answer.text
    assert answer.query == FOLLOW_UP
    eq, conv = answer.effective_query, answer.conversation
    assert eq is not None and conv is not None
    assert "Vesuvius" in eq.sparse and conv.history_messages == 2 and not conv.standalone


def assert_not_answered_alone(answer: Answer) -> None:
    assert answer.refusal is not None or VESUVIUS not in cited(answer) or "1,281" not in answer.text


# ---- the embedded Client: first, while no other part of this process holds the data dir ----


def streamed(events: list[Any]) -> tuple[str, Answer]:
    """A `chat_stream`'s text deltas joined, and the `Answer` that ends it (and nothing
    after it)."""
    *pieces, last = events
    assert isinstance(last, Answer) and pieces and all(isinstance(p, str) for p in pieces)
    return "".join(pieces), last


def test_the_embedded_client_carries_the_history(volcanoes: Settings) -> None:
    with Client(settings=volcanoes) as client:
        assert client.mode == "embedded"
        with_history = client.chat(CONVERSATION)
        as_models = client.chat([ChatMessage.model_validate(m) for m in CONVERSATION])
        alone = client.chat([{"role": "user", "content": FOLLOW_UP}])
        text, streamed_answer = streamed(list(client.chat_stream(CONVERSATION)))
    assert_answered_from_history(with_history)
    assert as_models.model_dump(exclude=IGNORE) == with_history.model_dump(exclude=IGNORE)
    assert_not_answered_alone(alone)
    assert "1,281" in text
    assert streamed_answer.model_dump(exclude=IGNORE) == with_history.model_dump(exclude=IGNORE)


# ---- HTTP, SSE and the remote clients ----------------------------------------------------


def test_post_chat_answers_the_follow_up_with_its_history(served: Served) -> None:
    status, body, _ = post(f"{served.url}/v1/chat", {"messages": CONVERSATION})
    assert status == 200
    answer = Answer.model_validate(body)
    assert_answered_from_history(answer)
    local = served.engine.chat(ChatRequest.model_validate({"messages": CONVERSATION}))
    assert answer.model_dump(exclude=IGNORE) == local.model_dump(exclude=IGNORE)
    status, alone, _ = post(f"{served.url}/v1/query", {"query": FOLLOW_UP})
    assert status == 200
    assert_not_answered_alone(Answer.model_validate(alone))
    assert alone["effective_query"] is None and alone["conversation"] is None


def test_a_streamed_chat_ends_with_the_same_answer(served: Served) -> None:
    status, raw, kind = post(f"{served.url}/v1/chat", {"messages": CONVERSATION, "stream": True})
    assert status == 200 and kind.startswith("text/event-stream")
    frames = [f for f in raw.split("\n\n") if f]
    events = [f.split("\n", 1)[0].removeprefix("event: ") for f in frames]
    assert events[-1] == "answer" and set(events[:-1]) == {"text"} and events[:-1]
    streamed = Answer.model_validate_json(frames[-1].split("data: ", 1)[1])
    text = "".join(json.loads(f.split("data: ", 1)[1])["delta"] for f in frames[:-1])
    assert_answered_from_history(streamed)
    assert "1,281" in text
    _, plain, _ = post(f"{served.url}/v1/chat", {"messages": CONVERSATION})
    assert streamed.model_dump(exclude=IGNORE) == Answer.model_validate(plain).model_dump(
        exclude=IGNORE
    )


def test_both_remote_clients_carry_the_history(served: Served) -> None:
    with Client(url=served.url) as client:
        assert client.mode == "http"
        remote = client.chat(CONVERSATION, k=5)
        alone = client.chat(CONVERSATION[-1:], k=5)

    async def chat() -> Answer:
        async with AsyncClient(served.url) as client:
            return await client.chat([ChatMessage.model_validate(m) for m in CONVERSATION], k=5)

    awaited = asyncio.run(chat())
    assert_answered_from_history(remote)
    assert awaited.model_dump(exclude=IGNORE) == remote.model_dump(exclude=IGNORE)
    assert_not_answered_alone(alone)


def test_both_remote_clients_stream_a_chat(served: Served) -> None:
    with Client(url=served.url) as client:
        text, answer = streamed(list(client.chat_stream(CONVERSATION, k=5)))
        plain = client.chat(CONVERSATION, k=5)
        with pytest.raises(ValidationError, match="the last message must be the user's"):
            client.chat_stream(HISTORY)  # checked before anything is sent

    async def chat_stream() -> list[Any]:
        async with AsyncClient(served.url) as client:
            return [e async for e in client.chat_stream(CONVERSATION, k=5)]

    awaited_text, awaited = streamed(asyncio.run(chat_stream()))
    assert_answered_from_history(answer)
    assert "1,281" in text and awaited_text == text
    assert answer.model_dump(exclude=IGNORE) == plain.model_dump(exclude=IGNORE)
    assert awaited.model_dump(exclude=IGNORE) == plain.model_dump(exclude=IGNORE)


BAD = [
    ([], "messages"),
    ([*HISTORY], "messages"),  # the last message is the assistant's
    ([{"role": "user", "content": "q"}] * 10_000, "messages"),
    ([{"role": "user", "content": "x" * 1_000_000}], "messages.0.content"),
    ([{"role": "system", "content": "be brief"}, *CONVERSATION[-1:]], "messages.0.role"),
    ([{"role": "user"}], "messages.0.content"),
]
BAD_IDS = ["empty", "assistant-last", "10k-turns", "1MB-message", "system-role", "no-content"]


@pytest.mark.parametrize(("messages", "where"), BAD, ids=BAD_IDS)
def test_a_bad_conversation_is_a_typed_422_with_a_short_body(
    served: Served, messages: list[Any], where: str
) -> None:
    status, body, _ = post(f"{served.url}/v1/chat", {"messages": messages})
    assert status == 422 and body["code"] == "invalid_request", body
    first = body["details"][0]
    assert ".".join(str(p) for p in first["loc"] if p != "body") == where and first["msg"]
    assert len(json.dumps(body)) < 2000  # the offending input is not echoed back
    with Client(url=served.url) as client, pytest.raises(ValidationError):
        client.chat(messages)  # checked before sending: the same rule, the same words


def test_a_body_past_the_limit_is_413_and_the_server_keeps_answering(served: Served) -> None:
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * (1 << 20)}]}).encode()
    status, body, _ = post(f"{served.url}/v1/chat", huge)
    assert status == 413 and body["code"] == "invalid_request"
    status, body, _ = post(f"{served.url}/v1/chat", {"messages": CONVERSATION})
    assert status == 200 and "1,281" in body["text"]


def test_a_long_history_is_cut_from_the_oldest_turn_and_said(served: Served) -> None:
    bounded = served.settings.model_copy(deep=True)
    bounded.query.conversation.max_turns = 2
    engine = QueryEngine(bounded, served.engine.retriever, served.engine.models)
    chatter = [{"role": "user", "content": "Tell me about sourdough."}] * 6
    with serving(Serving(bounded, ServedIndex(engine)), "127.0.0.1", 0) as url:
        status, body, _ = post(f"{url}/v1/chat", {"messages": [*chatter, *CONVERSATION]})
    assert status == 200
    answer = Answer.model_validate(body)
    assert answer.conversation is not None
    assert answer.conversation.dropped_messages == 6
    assert answer.conversation.history_messages == 2
    assert cited(answer) == {VESUVIUS}


def test_chat_has_the_keys_tenants_and_rate_of_query(served: Served) -> None:
    keyed = served.settings.model_copy(
        update={"server": ServerSettings(api_keys={"k-geo": "geo", "k-other": "other"})}
    )
    engine = QueryEngine(keyed, served.engine.retriever, served.engine.models)
    chat = {"messages": CONVERSATION}
    with serving(Serving(keyed, ServedIndex(engine)), "127.0.0.1", 0) as url:
        assert post(f"{url}/v1/chat", chat)[0] == 401
        status, own, _ = post(f"{url}/v1/chat", chat, {"Authorization": "Bearer k-geo"})
        assert status == 200 and "1,281" in own["text"]
        status, other, _ = post(f"{url}/v1/chat", chat, {"Authorization": "Bearer k-other"})
        assert status == 200 and other["citations"] == [] and other["refusal"] is not None
    limited = keyed.model_copy(
        update={"server": ServerSettings(api_keys={"k-geo": "geo"}, rate_per_key=1)}
    )
    engine = QueryEngine(limited, served.engine.retriever, served.engine.models)
    with serving(Serving(limited, ServedIndex(engine)), "127.0.0.1", 0) as url:
        key = {"Authorization": "Bearer k-geo"}
        assert post(f"{url}/v1/chat", chat, key)[0] == 200
        status, body, _ = post(f"{url}/v1/chat", chat, key)
        assert status == 429 and body["code"] == "rate_limited"


# ---- the terminal: `ragstream ask --chat` ------------------------------------------------


def ask_chat(url: str, lines: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "ask", "--chat", "--url", url, *args],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.slow  # the CLI in a subprocess
def test_the_chat_loop_keeps_the_history_until_reset(served: Served) -> None:
    lines = [FIRST, FOLLOW_UP, "/reset", FOLLOW_UP]
    done = ask_chat(served.url, lines, "--json")
    assert done.returncode == 0, done.stderr
    first, follow_up, after_reset = (
        Answer.model_validate_json(a) for a in done.stdout.splitlines()
    )
    assert first.refusal is None and cited(first) == {VESUVIUS}
    assert_answered_from_history(follow_up)
    assert_not_answered_alone(after_reset)
    assert after_reset.conversation is not None and after_reset.conversation.history_messages == 0
    assert "new conversation" in done.stderr


@pytest.mark.slow  # the CLI in subprocesses
def test_the_chat_loop_prints_citations_and_the_effective_query(served: Served) -> None:
    done = ask_chat(served.url, ["", FOLLOW_UP, "/quit", "never asked"], FIRST)
    assert done.returncode == 0, done.stderr
    first, follow_up = done.stdout.split("trace ")[:2]
    assert "vesuvius.md" in first and "effective query" not in first
    assert "1,281" in follow_up and "vesuvius.md" in follow_up
    assert "effective query (BM25): How high is it?" in follow_up and "Vesuvius" in follow_up
    assert done.stdout.count("trace ") == 2  # /quit ended it: the last line was not asked
    bad = ask_chat(served.url, ["x" * 40_000, FIRST])
    assert bad.returncode == 0 and "error" in bad.stderr and "32000" in bad.stderr
    assert "vesuvius.md" in bad.stdout  # the conversation went on after the bad line


@pytest.mark.slow  # the CLI in subprocesses
def test_ask_without_chat_answers_one_question_as_query_does(served: Served) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ragstream.cli", *args, "--url", served.url, "--json"]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)

    asked, queried = run("ask", FIRST), run("query", FIRST)
    assert asked.returncode == queried.returncode == 0, asked.stderr
    one, same = (Answer.model_validate_json(p.stdout) for p in (asked, queried))
    assert one.model_dump(exclude=IGNORE) == same.model_dump(exclude=IGNORE)
    nothing = run("ask")
    assert nothing.returncode == 2 and "--chat" in nothing.stderr


# ---- the console: the Ask tab's thread -------------------------------------------------


def ask_in_console(browser: webdriver.Chrome, wait: WebDriverWait, question: str) -> None:  # noqa: F811
    turns = len(browser.find_elements(By.CSS_SELECTOR, "#thread .turn"))
    browser.find_element(By.ID, "question").send_keys(question)
    browser.find_element(By.CSS_SELECTOR, "#ask-form button").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#thread .turn")) == turns + 1)
    wait.until(lambda b: b.find_element(By.ID, "answer").get_attribute("data-state") == "done")


@pytest.mark.slow  # a browser
def test_the_console_keeps_a_thread_and_starts_over(
    served: Served,
    browser: webdriver.Chrome,  # noqa: F811
    tmp_path: Path,
) -> None:
    wait = WebDriverWait(browser, 120)
    browser.get(f"{served.url}/#ask")
    wait.until(ready.presence_of_element_located((By.ID, "question")))
    ask_in_console(browser, wait, FIRST)
    ask_in_console(browser, wait, FOLLOW_UP)
    turns = browser.find_elements(By.CSS_SELECTOR, "#thread .turn")
    assert [t.find_element(By.CSS_SELECTOR, ".asked").text for t in turns] == [FIRST, FOLLOW_UP]
    first, follow_up = turns
    assert first.find_elements(By.CSS_SELECTOR, "button.cite")  # each answer keeps its citations
    assert not first.find_element(By.CSS_SELECTOR, ".effective").is_displayed()
    assert "1,281" in follow_up.find_element(By.CSS_SELECTOR, ".answer").text
    effective = follow_up.find_element(By.CSS_SELECTOR, ".effective")
    assert effective.is_displayed() and "Vesuvius" in effective.text
    first.find_element(By.CSS_SELECTOR, "button.cite").click()  # an earlier turn's source
    source = browser.find_element(By.ID, "source")
    wait.until(lambda b: source.is_displayed())
    assert "vesuvius.md" in source.text
    shots = Path(os.environ.get(SCREENSHOT_DIR) or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shots / "console-chat.png"))
    browser.find_element(By.ID, "new-conversation").click()
    assert browser.find_elements(By.CSS_SELECTOR, "#thread .turn") == []
    ask_in_console(browser, wait, FOLLOW_UP)
    (alone,) = browser.find_elements(By.CSS_SELECTOR, "#thread .turn")
    text = alone.text
    assert "1,281" not in text or "Refused" in text, text
