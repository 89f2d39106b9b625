"""Background work a `watch` repeats on an interval: a daemon thread that runs a task every
`seconds` until the block it guards ends, logging a failing run and never stopping the watch
for it (the scheduled audit, the scheduled snapshots)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def every(seconds: float, name: str, task: Callable[[], None], *, join_s: float) -> Iterator[None]:
    """Run `task` every `seconds` on the thread `ragstream-<name>` while the block runs; at
    its end, stop and wait up to `join_s` for a run in progress."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            try:
                task()
            except Exception as exc:
                log.warning("scheduled %s failed: %s", name, exc)

    thread = threading.Thread(target=loop, name=f"ragstream-{name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=join_s)
