"""Sync outcomes, live: `watch --serve` publishes every document's outcome here and
`GET /v1/events` relays them to each subscriber (the console's Live page) as Server-Sent
Events. A slow subscriber loses events rather than slowing the writer down. `close` ends every
subscription at once (a server shutting down does not wait out its grace on open streams)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from ragstream.core.models import DocOutcome

RECENT = 50  # replayed to a new subscriber, so the page is not empty when it opens
BACKLOG = 1000  # per subscriber; beyond it events are dropped for that subscriber


Inbox = queue.Queue[DocOutcome | None]  # None: the feed closed, the subscription ends


class OutcomeFeed:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[Inbox] = []
        self._recent: deque[DocOutcome] = deque(maxlen=RECENT)
        self._closed = False

    def publish(self, outcome: DocOutcome) -> None:
        with self._lock:
            self._recent.append(outcome)
            for inbox in self._subscribers:
                with suppress(queue.Full):  # that subscriber is not reading: it misses this
                    inbox.put_nowait(outcome)

    def close(self) -> None:
        """End every subscription now, and each one made after (its inbox reads `None`)."""
        with self._lock:
            self._closed = True
            for inbox in self._subscribers:
                _put_last(inbox)

    @contextmanager
    def subscribe(self) -> Iterator[Inbox]:
        inbox: Inbox = queue.Queue(maxsize=BACKLOG)
        with self._lock:
            for outcome in self._recent:
                inbox.put_nowait(outcome)
            if self._closed:
                inbox.put_nowait(None)
            self._subscribers.append(inbox)
        try:
            yield inbox
        finally:
            with self._lock:
                self._subscribers.remove(inbox)


def _put_last(inbox: Inbox) -> None:
    """`None` at the end of `inbox`, making room by dropping its oldest outcome if full."""
    while True:
        try:
            inbox.put_nowait(None)
            return
        except queue.Full:
            with suppress(queue.Empty):
                inbox.get_nowait()
