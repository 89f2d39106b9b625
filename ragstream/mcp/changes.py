"""`notifications/resources/list_changed`, sent to the live sessions when the documents they
list change: `ListChanges` follows the served index's live feed (`IndexService.follow`, of a
process that syncs: `watch --serve`), coalesces a burst of outcomes (`DEBOUNCE_S`) into one
notification, and sends it through the SDK (`ServerSession.send_resource_list_changed`, on
the session's standalone stream) to each session that lists one of the documents.

An outcome that writes changes the listing: a new document, a deleted one, a dead letter,
an edit (each resource names the document's state and chunk count) or new permission
stamps (who may list it). An outcome that writes nothing (a touched file, same content)
sends nothing. A session joins when its client says `notifications/initialized` and leaves
when the transport says it ended (`leave`); sending to one that ended without saying so is
dropped by the SDK, and at most `MAX_SESSIONS` are remembered (the oldest forgotten first)."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import suppress
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import ServerRequestContext
from mcp.server.session import ServerSession

from ragstream.core.errors import NotReadyError
from ragstream.core.models import DocOutcome
from ragstream.service.base import Followed

DEBOUNCE_S = 0.2  # outcomes this close together send one notification
WAIT_S = 1.0  # the follower checks this often whether it should stop
RETRY_S = 1.0  # while the index is not open yet, try following it again this often
SEND_S = 5.0  # the longest one session's send may take before it is forgotten
MAX_SESSIONS = 10_000  # the session manager's own default bound

Sees = Callable[[str], bool]  # whether a doc id is among the documents a session lists
# a joining session's key (its transport's session id) and what it sees; None: not tracked
ScopeOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[tuple[str, Sees] | None]]
log = logging.getLogger(__name__)


def lists_change(outcome: DocOutcome) -> bool:
    """Whether `outcome` changes what `resources/list` answers (see the module's words)."""
    return (
        outcome.changed
        or outcome.deleted
        or outcome.dead_letter is not None
        or outcome.chunks_restamped > 0
    )


class ListChanges:
    """The sessions to tell, and the follower that tells them (`run`, until cancelled)."""

    def __init__(self, follow: Callable[[float], Followed], scope_of: ScopeOf) -> None:
        self._follow = follow
        self._scope_of = scope_of
        self._sessions: dict[str, tuple[ServerSession, Sees]] = {}

    async def join(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember the session of `ctx` (its client has just initialized)."""
        scope = await self._scope_of(ctx)
        if scope is None:
            return
        key, sees = scope
        self._sessions.pop(key, None)
        self._sessions[key] = (ctx.session, sees)
        while len(self._sessions) > MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]

    def leave(self, key: str) -> None:
        self._sessions.pop(key, None)

    async def run(self) -> None:
        """Follow the feed (once the index is open) and notify the sessions until cancelled;
        a feed that fails ends the notifications, never the server (logged)."""
        try:
            await self._run()
        except Exception:
            log.exception("resources/list_changed: the live feed failed; no more notifications")

    async def _run(self) -> None:
        while True:
            try:
                followed = await anyio.to_thread.run_sync(self._follow, WAIT_S)
                break
            except NotReadyError:
                await anyio.sleep(RETRY_S)
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        stop = threading.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._notify, receive)
                await anyio.to_thread.run_sync(
                    _pump,
                    followed.outcomes,
                    stop,
                    send,
                    abandon_on_cancel=True,
                    limiter=anyio.CapacityLimiter(1),  # a thread of its own, not the shared pool's
                )
        finally:
            stop.set()  # the abandoned thread ends within WAIT_S and leaves the feed

    async def _notify(self, receive: MemoryObjectReceiveStream[str]) -> None:
        async for doc_id in receive:
            await anyio.sleep(DEBOUNCE_S)
            changed = {doc_id}
            with suppress(anyio.WouldBlock):
                while True:
                    changed.add(receive.receive_nowait())
            for key, (session, sees) in list(self._sessions.items()):
                if any(sees(d) for d in changed):
                    await self._send(key, session)

    async def _send(self, key: str, session: ServerSession) -> None:
        """One session's notification; a session that cannot take it is forgotten."""
        try:
            with anyio.fail_after(SEND_S):
                await session.send_resource_list_changed()
        except Exception:  # that session's trouble, never the other sessions' or the follower's
            log.warning("resources/list_changed: session %s dropped", key, exc_info=True)
            self.leave(key)


def _pump(
    outcomes: Iterator[DocOutcome | None], stop: threading.Event, send: MemoryObjectSendStream[str]
) -> None:
    """On a worker thread: each listing-changing outcome's doc id to the event loop, until
    `stop` (the feed yields None every `WAIT_S` without an outcome) or the loop is gone. The
    feed's first outcomes are its recent ones: a session open at that moment may get one
    notification it did not need."""
    try:
        for outcome in outcomes:
            if stop.is_set():
                return
            if outcome is not None and lists_change(outcome):
                anyio.from_thread.run_sync(send.send_nowait, outcome.doc_id)
    except (RuntimeError, anyio.BrokenResourceError):  # the event loop or the task has ended
        return
    finally:
        close = getattr(outcomes, "close", None)  # a generator: leave the feed now
        if close is not None:
            close()
