"""The readers–writer lock: readers overlap, a writer excludes everyone, writers go first,
and a writer may re-enter and read."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ragstream.core.rwlock import ReadWriteLock


def test_readers_overlap() -> None:
    lock, both = ReadWriteLock(), []
    inside, counted = threading.Barrier(2, timeout=5), threading.Barrier(2, timeout=5)

    def read() -> None:
        with lock.read():
            inside.wait()  # only passes when both readers are inside at once
            both.append(lock.readers)
            counted.wait()

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert both == [2, 2]


def test_a_writer_waits_for_readers_and_new_readers_wait_for_it() -> None:
    lock, events = ReadWriteLock(), []
    reading = threading.Event()
    release_reader = threading.Event()

    def first_reader() -> None:
        with lock.read():
            reading.set()
            release_reader.wait(5)
            events.append("reader 1 out")

    def writer() -> None:
        with lock:
            events.append("writer in")

    def late_reader() -> None:
        with lock.read():
            events.append("reader 2 in")

    r1 = threading.Thread(target=first_reader)
    r1.start()
    reading.wait(5)
    w = threading.Thread(target=writer)
    w.start()
    while not lock._waiting_writers:  # the writer is queued
        time.sleep(0.001)
    r2 = threading.Thread(target=late_reader)
    r2.start()
    time.sleep(0.05)
    assert events == []  # the writer waits for reader 1; reader 2 waits behind the writer
    release_reader.set()
    for t in (r1, w, r2):
        t.join(5)
    assert events == ["reader 1 out", "writer in", "reader 2 in"]


def test_a_writer_reenters_and_reads() -> None:
    lock = ReadWriteLock()
    with lock, lock, lock.read():
        assert lock._depth == 2
    assert lock._writer is None


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["read", "write"]), min_size=2, max_size=12))
def test_no_reader_ever_sees_a_writer_inside(ops: list[str]) -> None:
    lock, state, seen = ReadWriteLock(), {"writing": 0, "reading": 0}, []
    guard = threading.Lock()

    def run(op: str) -> None:
        if op == "write":
            with lock:
                with guard:
                    state["writing"] += 1
                    seen.append((state["writing"], state["reading"]))
                time.sleep(0.001)
                with guard:
                    state["writing"] -= 1
        else:
            with lock.read():
                with guard:
                    state["reading"] += 1
                    seen.append((state["writing"], state["reading"]))
                time.sleep(0.001)
                with guard:
                    state["reading"] -= 1

    threads = [threading.Thread(target=run, args=(op,)) for op in ops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for writing, reading in seen:
        assert writing <= 1 and not (writing and reading)
