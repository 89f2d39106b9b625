"""The OpenAI chat completions dialect, driven by the official `openai` SDK (sync, async,
streaming) against a real uvicorn server over a small real folder: a cited answer with `[n]`
markers and `url_citation` annotations, a follow-up that needs its history, an off-topic
question refused as a plain message, a second tenant's key that never sees the first
tenant's notes, bad input raised as the SDK's own typed exceptions while the server keeps
serving, and a front end's title request answered without retrieval."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from ragstream import api
from ragstream.core.settings import ServerSettings, Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex
from tests.unit.query.test_conversation import FOLLOW_UP, HISTORY, VOLCANOES

KEYS = {"k-geo": "geo", "k-other": "other"}


@dataclass(frozen=True)
class Served:
    settings: Settings
    engine: QueryEngine
    url: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("openai") / "notes"
    root.mkdir()
    for name, text in VOLCANOES.items():
        (root / name).write_text(text, encoding="utf-8")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        sources=[FolderConfig(name="notes", root=root, tenant="geo")],
        server=ServerSettings(api_keys=KEYS),
    )
    settings.query.log_queries = False
    assert api.sync([root], settings=settings).docs_changed == len(VOLCANOES)
    with (
        QueryEngine.open(settings) as engine,
        serving(Serving(settings, ServedIndex(engine)), "127.0.0.1", 0) as url,
    ):
        yield Served(settings, engine, url)


def client(served: Served, key: str = "k-geo") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key=key, max_retries=3)


def ask(served: Served, messages: list[dict[str, str]], key: str = "k-geo") -> Any:
    return client(served, key).chat.completions.create(model="ragstream", messages=messages)  # type: ignore[arg-type]


def test_the_models_list_the_index_and_each_source_the_key_may_read(served: Served) -> None:
    assert [m.id for m in client(served).models.list()] == ["ragstream", "ragstream:notes"]
    assert [m.id for m in client(served, "k-other").models.list()] == ["ragstream"]
    reply = client(served).chat.completions.create(model="ragstream:notes", messages=[HISTORY[0]])  # type: ignore[list-item]
    assert "Pompeii" in reply.choices[0].message.content
    with pytest.raises(openai.NotFoundError, match="ragstream:notes"):
        client(served, "k-other").chat.completions.create(
            model="ragstream:notes",
            messages=[HISTORY[0]],  # type: ignore[list-item]
        )


def test_a_cited_answer_carries_markers_annotations_and_the_extension(served: Served) -> None:
    reply = ask(served, [HISTORY[0]])
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert "Pompeii" in message.content and "[1]" in message.content
    notes = message.annotations
    assert notes and all(a.type == "url_citation" for a in notes)
    first = notes[0].url_citation
    assert message.content[first.start_index : first.end_index] == "[1]"
    assert first.url.startswith(served.url) and "#file/notes%3Avesuvius.md@" in first.url
    extra = reply.model_extra["ragstream"]  # type: ignore[index]
    cited = extra["citations"][0]
    assert cited["n"] == 1 and cited["doc_id"] == "notes:vesuvius.md"
    assert cited["char_end"] > cited["char_start"] and cited["file_version"]["digest"]
    assert extra["grounding"] > 0 and extra["refusal"] is None
    assert extra["generator"] == "extractive"
    assert reply.usage.prompt_tokens == 0 and reply.usage.completion_tokens > 0  # type: ignore[union-attr]


def test_a_follow_up_is_read_with_its_history(served: Served) -> None:
    reply = ask(served, [*HISTORY, {"role": "user", "content": FOLLOW_UP}])
    assert "1,281" in reply.choices[0].message.content
    extra = reply.model_extra["ragstream"]  # type: ignore[index]
    assert {c["doc_id"] for c in extra["citations"]} == {"notes:vesuvius.md"}
    alone = ask(served, [{"role": "user", "content": FOLLOW_UP}])
    assert "1,281" not in (alone.choices[0].message.content or "")


def test_an_off_topic_question_is_refused_as_a_plain_message(served: Served) -> None:
    reply = ask(served, [{"role": "user", "content": "Who won the 1998 football World Cup?"}])
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert message.content.startswith("The indexed documents do not answer this")
    assert message.annotations == []
    refusal = reply.model_extra["ragstream"]["refusal"]  # type: ignore[index]
    assert refusal["reason"] and refusal["check"]


def test_another_tenant_never_sees_the_notes(served: Served) -> None:
    reply = ask(served, [HISTORY[0]], key="k-other")
    assert "Pompeii" not in reply.choices[0].message.content
    assert reply.model_extra["ragstream"]["citations"] == []  # type: ignore[index]


def test_a_stream_ends_as_the_answer_with_done(served: Served) -> None:
    stream = client(served).chat.completions.create(
        model="ragstream",
        messages=[*HISTORY, {"role": "user", "content": FOLLOW_UP}],  # type: ignore[list-item]
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "1,281" in text and "[1]" in text and "[S1]" not in text
    last = chunks[-1].model_extra or {}
    assert last["ragstream"]["citations"][0]["doc_id"] == "notes:vesuvius.md"
    plain = ask(served, [*HISTORY, {"role": "user", "content": FOLLOW_UP}])
    assert text == plain.choices[0].message.content  # streamed or not, the same message


def test_the_async_client_answers_the_same(served: Served) -> None:
    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="k-geo") as c:
            reply = await c.chat.completions.create(model="ragstream", messages=[HISTORY[0]])  # type: ignore[list-item]
            return reply.choices[0].message.content or ""

    assert asyncio.run(run()) == ask(served, [HISTORY[0]]).choices[0].message.content


def test_bad_input_raises_the_sdk_s_typed_errors_and_the_server_keeps_serving(
    served: Served,
) -> None:
    bad: list[tuple[type[Exception], dict[str, Any], str]] = [
        (openai.BadRequestError, {"messages": []}, "messages"),
        (openai.BadRequestError, {"messages": [{"role": "robot", "content": "hi"}]}, "robot"),
        (
            openai.BadRequestError,
            {"messages": [HISTORY[0]], "tools": [{"type": "function", "function": {"name": "f"}}]},
            "tool calls are not supported",
        ),
        (
            openai.BadRequestError,
            {"messages": [HISTORY[0]], "extra_body": {"filter": "extention = md"}},
            "nearest: extension",
        ),
        (openai.NotFoundError, {"messages": [HISTORY[0]], "model": "gpt-4o"}, "ragstream"),
    ]
    for error, kwargs, says in bad:
        kwargs = {"model": "ragstream", **kwargs}
        with pytest.raises(error) as raised:
            client(served).chat.completions.create(**kwargs)
        assert says in str(raised.value), raised.value
    with pytest.raises(openai.AuthenticationError):
        ask(served, [HISTORY[0]], key="k-nobody")
    with pytest.raises(openai.BadRequestError) as too_big:
        ask(served, [{"role": "user", "content": "x" * 1_100_000}])
    assert "too large" in str(too_big.value)
    assert "Pompeii" in ask(served, [HISTORY[0]]).choices[0].message.content


def test_a_front_end_s_title_request_is_answered_without_retrieval(served: Served) -> None:
    prompt = (
        "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat "
        'history.\n### Output:\nJSON format: { "title": "your concise title here" }\n'
        "### Chat History:\n<chat_history>\nUSER: Which Roman towns did Mount Vesuvius bury?"
        "\nASSISTANT: Pompeii and Herculaneum.\n</chat_history>"
    )
    reply = ask(served, [{"role": "user", "content": prompt}])
    assert json.loads(reply.choices[0].message.content) == {
        "title": "Which Roman towns did Mount Vesuvius"
    }
    assert reply.model_extra["ragstream"]["side_task"] == "title"  # type: ignore[index]


def test_a_rate_limited_key_gets_the_sdk_s_rate_limit_error_with_retry_after(
    served: Served,
) -> None:
    limited = served.settings.model_copy(
        update={"server": ServerSettings(api_keys=KEYS, rate_per_key=1)}
    )
    engine = QueryEngine(limited, served.engine.retriever, served.engine.models)
    with serving(Serving(limited, ServedIndex(engine)), "127.0.0.1", 0) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="k-geo", max_retries=0)
        sdk.chat.completions.create(model="ragstream", messages=[HISTORY[0]])  # type: ignore[list-item]
        with pytest.raises(openai.RateLimitError) as limited_error:
            sdk.chat.completions.create(model="ragstream", messages=[HISTORY[0]])  # type: ignore[list-item]
    assert int(limited_error.value.response.headers["retry-after"]) >= 1
    assert limited_error.value.code == "rate_limited"
