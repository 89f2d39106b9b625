"""Locks for an index that is queried while it is written: `ReadWriteLock`, many readers at
once (queries), one writer at a time, writers first, so a stream of queries cannot hold a
write off forever and a write waits only for the reads already running; and `IndexLock`,
which adds a writers' mutex so an index batch excludes queries only while it writes.

`with lock:` takes it for writing and is reentrant for the thread that holds it (a writer
may call code that writes again); `with lock.read():` takes it for reading. A thread that
holds it for writing may also read. Reading is not reentrant across a waiting writer: a
reader must not take `read()` again inside `read()`. `StoreLock` is what a reader needs of
an `IndexLock`; `Unlocked` is one for stores that nobody else writes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol


class StoreLock(Protocol):
    """What a reader of the stores takes: `read()` for a query (out only while a write is in
    progress), `writers_out()` for a long read that must see one point in time (a snapshot:
    writers wait, queries go on)."""

    def read(self) -> AbstractContextManager[None]: ...

    def writers_out(self) -> AbstractContextManager[Any]: ...


class Unlocked:
    """The lock of stores that nobody else writes: taking it waits for nothing."""

    def read(self) -> AbstractContextManager[None]:
        return nullcontext()

    def writers_out(self) -> AbstractContextManager[None]:
        return nullcontext()


class ReadWriteLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None  # the ident of the thread that writes
        self._depth = 0  # how many times that thread took it
        self._waiting_writers = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._writer == me:  # a writer reads what it is writing
            yield
            return
        with self._cond:
            while self._writer is not None or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._depth += 1
                return
            self._waiting_writers += 1
            try:
                while self._writer is not None or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer, self._depth = me, 1

    def release(self) -> None:
        with self._cond:
            if self._writer != threading.get_ident():
                raise RuntimeError("release of a write lock this thread does not hold")
            self._depth -= 1
            if not self._depth:
                self._writer = None
                self._cond.notify_all()

    def __enter__(self) -> ReadWriteLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def readers(self) -> int:
        """Readers inside now (for tests and metrics)."""
        return self._readers


class IndexLock:
    """The lock of an index a process writes. `writers` lets one writer in at a time (an
    index batch holds it while it plans, embeds and writes); `gate` keeps queries out only
    while the stores change. `with lock:` takes both, in that order (a backfill page, a
    pointer swap); `lock.read()` is a query's (it waits only for a write in progress)."""

    def __init__(self) -> None:
        self.writers = threading.RLock()
        self.gate = ReadWriteLock()

    def read(self) -> contextlib.AbstractContextManager[None]:
        return self.gate.read()

    def writers_out(self) -> contextlib.AbstractContextManager[Any]:
        """Keep every writer out (they queue on `writers`) while queries go on reading."""
        return self.writers

    def __enter__(self) -> IndexLock:
        self.writers.acquire()
        try:
            self.gate.acquire()
        except BaseException:
            self.writers.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.release()
        self.writers.release()
