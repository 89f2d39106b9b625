"""Server-Sent Events: the frames of a streamed answer (`text` deltas, then the `answer` or
an `error`) and of the live sync feed (`drift`, then one `outcome` per document)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

from fastapi.responses import StreamingResponse

from ragstream.connectors.state import VerifyBook
from ragstream.core.answers import Answer, QueryRequest
from ragstream.core.errors import RagstreamError
from ragstream.core.ids import source_of
from ragstream.http.deps import Serving, Tenants
from ragstream.query.engine import QueryEngine
from ragstream.service.feed import OutcomeFeed

KEEPALIVE_S = 5.0


def answer_events(
    serving: Serving, engine: QueryEngine, request: QueryRequest, tenants: Tenants
) -> Iterator[str]:
    """SSE frames. The answer runs on its own thread (which takes and releases the store
    lock itself); this generator only relays what it puts on the queue."""
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def run() -> None:
        try:
            with serving.lock:
                answer = engine.answer(
                    request, tenants=tenants, on_text=lambda d: events.put(("text", d))
                )
            events.put(("answer", answer))
        except RagstreamError as exc:
            events.put(("error", {"error": str(exc), "code": exc.code}))
        except Exception as exc:  # the stream has started: report, never hang the client
            events.put(("error", {"error": f"{type(exc).__name__}: {exc}", "code": "error"}))

    threading.Thread(target=run, name="ragstream-stream", daemon=True).start()
    while True:
        kind, payload = events.get()
        if kind == "text":
            yield frame("text", json.dumps({"delta": payload}))
            continue
        data = payload.model_dump_json() if isinstance(payload, Answer) else json.dumps(payload)
        yield frame(kind, data)
        return


def outcome_events(serving: Serving, feed: OutcomeFeed, tenants: Tenants) -> Iterator[str]:
    """SSE frames of the feed (a tenant key: its own sources' documents only); the
    keep-alive comment makes a gone client end the stream."""
    own = serving.settings.sources_of(tenants)
    audit = VerifyBook(serving.settings.state_dir).load()
    yield frame("drift", json.dumps(audit.counts() if audit is not None else None))
    with feed.subscribe() as inbox:
        while True:
            try:
                outcome = inbox.get(timeout=KEEPALIVE_S)
            except queue.Empty:
                yield ": keep-alive\n\n"
                continue
            if own is None or source_of(outcome.doc_id) in own:
                yield frame("outcome", outcome.model_dump_json())


def event_stream(frames: Iterator[str]) -> StreamingResponse:
    """A Server-Sent Events response, unbuffered by proxies."""
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def frame(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"
