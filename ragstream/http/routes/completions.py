"""OpenAI's chat completions over the served index: `POST /v1/chat/completions` (a
conversation answered as `/v1/chat` answers it, written back as a `chat.completion`, or with
`"stream": true` as `chat.completion.chunk` events ending in `[DONE]`) and `GET /v1/models`
(the profiles: `ragstream`, and `ragstream:<source>` per source the key may read). The
dialect is `http.openai_shapes`."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from ragstream.core.answers import Answer, ChatRequest
from ragstream.core.errors import NotFoundError
from ragstream.http import openai_shapes as oa
from ragstream.http.deps import Serving, ServingDep, TenantsDep
from ragstream.http.sse import Answering, answer_parts, event_stream
from ragstream.service.base import Caller

router = APIRouter(tags=["openai"])
CREATED = int(time.time())  # the model profile's creation time: when this server started


def visible_sources(serving: Serving, caller: Caller) -> list[str]:
    """The configured sources the caller's key may read, by name."""
    allowed = serving.settings.sources_of(caller.tenants)
    names = [s.name for s in serving.settings.sources]
    return [n for n in names if allowed is None or n in allowed]


@router.get("/v1/models")
async def models(caller: TenantsDep, serving: ServingDep) -> dict[str, Any]:
    """The model profiles a chat front end may pick: `ragstream` (the served index as the
    caller's key sees it), and `ragstream:<source>` for each configured source the key may
    read (answers from that source alone); a 503 until the index is open."""
    ready = bool(serving.ready_index(caller).readiness().get("ready"))
    data = [
        {"id": name, "object": "model", "created": CREATED, "owned_by": "ragstream", "ready": ready}
        for name in oa.model_ids(visible_sources(serving, caller))
    ]
    return {"object": "list", "data": data}


@router.post("/v1/chat/completions")
async def completions(
    body: oa.CompletionRequest, request: Request, caller: TenantsDep, serving: ServingDep
) -> Any:
    """Answer the conversation's last user message from the index, with the history read
    as `/v1/chat` reads it; citations are `[n]` markers and `url_citation` annotations, the
    whole answer is in the `ragstream` extension, and a refusal is a plain message."""
    sources = visible_sources(serving, caller)
    try:
        source = oa.source_of(body.model, sources)
    except KeyError:
        listed = ", ".join(oa.model_ids(sources))
        raise NotFoundError(
            f"the model {body.model!r} does not exist: GET /v1/models lists {listed}"
        ) from None
    chat = oa.narrowed(oa.chat_request(body), source)
    base, created = str(request.base_url), int(time.time())
    task = oa.side_task(chat)
    if task is not None:  # a front end's title or tags prompt: no retrieval (docs/guide/openai.md)
        return _side(task, chat, body, created)
    answering = partial(serving.ready_index(caller).chat_async, chat, offload=serving.offload)
    if body.stream:
        return event_stream(_chunks(answering, body.model, created, base))
    answer: Answer = await answering()
    return oa.completion(answer, body.model, created, base)


def _side(task: str, chat: ChatRequest, body: oa.CompletionRequest, created: int) -> Any:
    content = oa.side_reply(task, chat)
    ident = f"chatcmpl-side-{created}"
    if body.stream:
        frames = [
            oa.chunk(ident, body.model, created, {"role": "assistant", "content": content}),
            oa.chunk(ident, body.model, created, {}, "stop"),
        ]
        return event_stream(_frames(frames))
    message = {"role": "assistant", "content": content, "annotations": []}
    tokens = oa.approx_tokens(content)
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens},
        "ragstream": {"side_task": task, "usage": "no retrieval, no model: a side request"},
    }


async def _frames(chunks: list[dict[str, Any]]) -> AsyncIterator[str]:
    for c in chunks:
        yield f"data: {json.dumps(c)}\n\n"
    yield "data: [DONE]\n\n"


async def _chunks(answering: Answering, model: str, created: int, base: str) -> AsyncIterator[str]:
    """The answer as OpenAI chunks: the role, the text as it is written (markers renumbered
    on the way), then the verified answer's closing chunk: what the text must still become
    (a refusal in words, or nothing), the annotations, `usage` and the `ragstream`
    extension; an error mid-stream is an OpenAI error event. Always ends in `[DONE]`."""
    ident = f"chatcmpl-{created}"
    markers = oa.MarkerStream()
    sent = ""
    yield _data(oa.chunk(ident, model, created, {"role": "assistant", "content": ""}))
    async for kind, payload in answer_parts(answering):
        if kind == "text":
            text = markers.feed(payload)
            sent += text
            if text:
                yield _data(oa.chunk(ident, model, created, {"content": text}))
        elif isinstance(payload, Answer):
            ident = f"chatcmpl-{payload.trace_id}"
            content = oa.message_text(payload)
            rest = (
                content[len(sent) :]
                if content.startswith(sent)
                else ("\n\n" + content if sent else content)
            )
            last = oa.chunk(ident, model, created, {"content": rest} if rest else {}, "stop")
            last["choices"][0]["delta"]["annotations"] = oa.url_citations(
                sent + rest, payload, base
            )
            last["usage"] = oa.usage(payload, sent + rest)
            last["ragstream"] = oa.extension(payload, base)
            yield _data(last)
        else:
            status = int(payload.get("status", 500))
            yield _data(oa.error_body(status, payload["error"], payload["code"]))
    yield "data: [DONE]\n\n"


def _data(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"
