"""Sync outcomes, live: `watch --serve` publishes every document's outcome here and
`GET /v1/events` relays them to each subscriber (the console's Live page) as Server-Sent
Events. A slow subscriber loses events rather than slowing the writer down."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from ragstream.core.models import DocOutcome

RECENT = 50  # replayed to a new subscriber, so the page is not empty when it opens
BACKLOG = 1000  # per subscriber; beyond it events are dropped for that subscriber


class OutcomeFeed:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue[DocOutcome]] = []
        self._recent: deque[DocOutcome] = deque(maxlen=RECENT)

    def publish(self, outcome: DocOutcome) -> None:
        with self._lock:
            self._recent.append(outcome)
            for inbox in self._subscribers:
                with suppress(queue.Full):  # that subscriber is not reading: it misses this
                    inbox.put_nowait(outcome)

    @contextmanager
    def subscribe(self) -> Iterator[queue.Queue[DocOutcome]]:
        inbox: queue.Queue[DocOutcome] = queue.Queue(maxsize=BACKLOG)
        with self._lock:
            for outcome in self._recent:
                inbox.put_nowait(outcome)
            self._subscribers.append(inbox)
        try:
            yield inbox
        finally:
            with self._lock:
                self._subscribers.remove(inbox)
