"""Server-Sent Events: the frames of a streamed answer (`text` deltas, then the `answer` or
an `error`) and of the live sync feed (`drift`, then one `outcome` per document)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from typing import Any

from fastapi.responses import StreamingResponse

from ragstream.core.answers import Answer
from ragstream.core.errors import RagstreamError
from ragstream.service.base import Followed

KEEPALIVE_S = 5.0
# one answer, run with a callback that receives its text as it is written: a served index's
# `query_async` or `chat_async` with the request and the offload bound
Answering = Callable[[Callable[[str], None]], Awaitable[Answer]]


async def answer_parts(answering: Answering) -> AsyncIterator[tuple[str, Any]]:
    """One answer's parts in order: `("text", delta)` as it is written, then
    `("answer", Answer)` or `("error", {"error", "code"})`. The answer runs as its own task;
    a client that goes away cancels it, and with it the generation (an endpoint's request is
    closed)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, payload: Any) -> None:  # from the loop or a worker thread, in order
        loop.call_soon_threadsafe(events.put_nowait, (kind, payload))

    async def run() -> None:
        try:
            put("answer", await answering(partial(put, "text")))
        except RagstreamError as exc:
            put("error", {"error": str(exc), "code": exc.code, "status": exc.http_status})
        except Exception as exc:  # the stream has started: report, never hang the client
            put("error", {"error": f"{type(exc).__name__}: {exc}", "code": "error"})

    task = asyncio.create_task(run())
    try:
        while True:
            kind, payload = await events.get()
            yield kind, payload
            if kind != "text":
                return
    finally:
        task.cancel()


async def answer_events(answering: Answering) -> AsyncIterator[str]:
    """SSE frames of one answer (`answer_parts`): `text` deltas, then the `answer` (or an
    `error`)."""
    async for kind, payload in answer_parts(answering):
        if kind == "text":
            yield frame("text", json.dumps({"delta": payload}))
        elif isinstance(payload, Answer):
            yield frame(kind, payload.model_dump_json())
        else:
            yield frame(kind, json.dumps({k: payload[k] for k in ("error", "code")}))


def outcome_events(followed: Followed) -> Iterator[str]:
    """SSE frames of the feed: `drift`, then each `outcome`; the keep-alive comment makes a
    gone client end the stream."""
    yield frame("drift", json.dumps(followed.drift))
    for outcome in followed.outcomes:
        if outcome is None:
            yield ": keep-alive\n\n"
        else:
            yield frame("outcome", outcome.model_dump_json())


def event_stream(frames: Iterator[str] | AsyncIterator[str]) -> StreamingResponse:
    """A Server-Sent Events response, unbuffered by proxies."""
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def frame(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"
