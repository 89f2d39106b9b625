"""Admission control: the service stays responsive past its capacity instead of collapsing.

A pure ASGI middleware in front of every route that does work (questions, the ledger, the
audit, status, the log, the reindex commands, MCP calls: `POST /mcp`; never liveness,
readiness, the live feed, the console or the API docs):

- **draining**: once shutdown has begun, 503 with `Retry-After`, at once;
- **per-key rate**: a token bucket per API key (requests per minute, `server.rate_per_key`;
  off at 0), past it 429 with `Retry-After` = when the next request would be let in;
- **in flight**: at most `server.max_inflight` requests run, at most `server.max_queue` wait
  in arrival order for a slot, and any beyond are answered 429 with `Retry-After` at once;
- **timeout**: a request that has not finished (waiting included) in
  `server.request_timeout_s` is answered 504 and its slot freed; a stream already started
  is closed instead (its status has gone out);
- **slow body**: a body not fully received `server.body_timeout_s` after the request
  started is answered 408, so a client trickling its bytes cannot hold a slot for long.

All of it runs on the event loop thread, so its counters need no lock. Error bodies are the
API's own `{"error", "code"}`; on `/mcp`, a JSON-RPC error carrying the same code (an MCP
client raises it as the call's error).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ragstream.core.cpus import usable_cpus
from ragstream.http.openai_shapes import error_body as openai_error
from ragstream.http.openai_shapes import openai_path

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

FREE = ("/v1/health", "/v1/ready", "/v1/events")  # exact paths that are never held back
GUARDED_PREFIX = "/v1/"
MCP_PATH = "/mcp"  # its POSTs carry tool calls (a GET is its notification stream: free)


def default_max_inflight(llm: bool, cores: int | None = None) -> int:
    """Requests worth running at once: one per core when answers are CPU work (the offline
    extractive generator); when an LLM endpoint writes them, most of a request is waiting
    on it, so eight per core.

    >>> default_max_inflight(llm=False, cores=2), default_max_inflight(llm=True, cores=2)
    (2, 16)
    """
    n = cores or usable_cpus()
    return 8 * n if llm else n


@dataclass(frozen=True)
class Limits:
    max_inflight: int
    max_queue: int
    request_timeout_s: float
    rate_per_key: int = 0  # requests per minute per API key; 0 = no limit
    retry_after_s: int = 1  # what a 429 past the in-flight limit suggests
    body_timeout_s: float = 10.0  # a body must have arrived whole by then


class SlowBody(Exception):
    """The client did not send its whole body in time."""


@dataclass
class BodyDeadline:
    """`receive`, but the request's body must arrive whole within `seconds` of the first
    read; after the body, messages (a disconnect) pass through with no deadline. `missed`
    stays true once the deadline passed, whatever the app made of the `SlowBody` raised
    into it (a framework may answer it as a bad body)."""

    receive: Receive
    seconds: float
    missed: bool = False
    _done: bool = False
    _deadline: float | None = None

    async def __call__(self) -> Message:
        if self._done:
            return await self.receive()
        loop = asyncio.get_running_loop()
        if self._deadline is None:
            self._deadline = loop.time() + self.seconds
        try:
            message = await asyncio.wait_for(self.receive(), max(self._deadline - loop.time(), 0))
        except TimeoutError:
            self.missed = True
            raise SlowBody from None
        self._done = message["type"] != "http.request" or not message.get("more_body", False)
        return message


class TokenBuckets:
    """`rate` requests per minute per key, in bursts of at most `rate`."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self._clock = rate, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)

    def take(self, key: str) -> float:
        """0 when a request of `key` may go now (and counts it), else the seconds until one
        may.

        >>> now = [0.0]
        >>> b = TokenBuckets(2, clock=lambda: now[0])
        >>> b.take("k"), b.take("k"), b.take("k")
        (0.0, 0.0, 30.0)
        >>> now[0] = 30.0; b.take("k"), b.take("other")
        (0.0, 0.0)
        """
        if self.rate <= 0:
            return 0.0
        now, per_s = self._clock(), self.rate / 60.0
        tokens, then = self._buckets.get(key, (float(self.rate), now))
        tokens = min(float(self.rate), tokens + (now - then) * per_s)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / per_s


@dataclass
class Slots:
    """`limit` requests in flight, `queue` more waiting in arrival order; a freed slot goes
    straight to the longest waiter."""

    limit: int
    queue: int
    inflight: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)

    async def enter(self) -> bool:
        """True once this request holds a slot; False at once when the queue is full."""
        if self.inflight < self.limit and not self.waiting:
            self.inflight += 1
            return True
        if len(self.waiting) >= self.queue:
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave()  # handed a slot as it gave up: pass it on
            else:
                self.waiting.remove(turn)
            raise
        return True

    def leave(self) -> None:
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands; `inflight` stays
                return
        self.inflight -= 1


class Admission:
    """The middleware. `draining()` says whether shutdown has begun."""

    def __init__(self, app: App, limits: Limits, draining: Callable[[], bool]) -> None:
        self.app, self.limits, self.draining = app, limits, draining
        self.slots = Slots(limits.max_inflight, limits.max_queue)
        self.buckets = TokenBuckets(limits.rate_per_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not guarded(scope):
            await self.app(scope, receive, send)
            return
        if self.draining():
            await refuse(scope, send, 503, "shutting_down", "the server is shutting down", 5)
            return
        wait = self.buckets.take(api_key(scope))
        if wait > 0:
            message = f"more than {self.limits.rate_per_key} requests a minute for this key"
            await refuse(scope, send, 429, "rate_limited", message, math.ceil(wait))
            return
        await self._admitted(scope, receive, send)

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        body = BodyDeadline(receive, self.limits.body_timeout_s)

        async def tracked(message: Message) -> None:
            nonlocal started
            if body.missed:  # whatever the app answers to a body that never came whole
                raise SlowBody
            started = started or message["type"] == "http.response.start"
            await send(message)

        holding = False
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                holding = await self.slots.enter()
                if not holding:
                    message = f"{self.limits.max_inflight} requests in flight and the queue is full"
                    await refuse(scope, send, 429, "overloaded", message, self.limits.retry_after_s)
                    return
                await self.app(scope, body, tracked)
        except SlowBody:
            if not started:
                message = f"the body did not arrive within {self.limits.body_timeout_s:g} s"
                await refuse(scope, send, 408, "slow_body", message, None)
        except TimeoutError:
            if not started:
                message = f"no answer within {self.limits.request_timeout_s:g} s"
                await refuse(scope, send, 504, "timeout", message, None)
        finally:
            if holding:
                self.slots.leave()


def guarded(scope: Scope) -> bool:
    """Whether admission holds this request back: the work routes of `/v1/` and MCP calls."""
    if scope["type"] != "http":
        return False
    path = scope.get("path", "")
    if path == MCP_PATH:
        return bool(scope.get("method") == "POST")
    return path.startswith(GUARDED_PREFIX) and path not in FREE


def api_key(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return str(value.decode("latin-1")).removeprefix("Bearer ").strip()
    return ""


async def refuse(
    scope: Scope, send: Send, status: int, code: str, message: str, retry: int | None
) -> None:
    body = json.dumps(refusal_body(scope, status, code, message, retry)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if retry is not None:
        headers.append((b"retry-after", str(retry).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def refusal_body(
    scope: Scope, status: int, code: str, message: str, retry: int | None
) -> dict[str, Any]:
    """The API's `{"error", "code"}`; OpenAI's error object on its routes; on `/mcp` a
    JSON-RPC error (server error -32000, the
    API's code, status and Retry-After in `data`), which an MCP client hands its caller as
    the call's error instead of a bare HTTP status."""
    if openai_path(scope.get("path", "")):
        return openai_error(status, message, code)
    if scope.get("path") != MCP_PATH:
        return {"error": message, "code": code}
    told = f"{message}; retry after {retry} s" if retry is not None else message
    data = {"code": code, "status": status, "retry_after_s": retry}
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": told, "data": data}}
