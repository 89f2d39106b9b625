"""The live feed of sync outcomes (`service.feed.OutcomeFeed`): what a subscriber reads, and
that closing it ends every subscription at once, so a server shutting down does not wait out
its shutdown grace on a Live page's open stream."""

from __future__ import annotations

import threading

from ragstream.core.models import DocOutcome
from ragstream.service import served
from ragstream.service.feed import BACKLOG, RECENT, OutcomeFeed


def outcome(i: int, source: str = "docs") -> DocOutcome:
    return DocOutcome(doc_id=f"{source}:note-{i}.md", changed=True)


def test_a_subscriber_reads_the_recent_outcomes_then_the_new_ones_of_its_own_sources() -> None:
    feed = OutcomeFeed()
    for i in range(RECENT + 5):
        feed.publish(outcome(i))
    stream = served._outcomes(feed, frozenset({"docs"}), wait_s=0.01)
    recent = [next(stream) for _ in range(RECENT)]
    assert [o.doc_id for o in recent if o] == [f"docs:note-{i}.md" for i in range(5, RECENT + 5)]
    assert next(stream) is None  # nothing new within wait_s: a keep-alive
    feed.publish(outcome(1, "other"))  # another tenant's source: not this subscriber's
    feed.publish(outcome(99))
    assert next(stream) == outcome(99)


def test_closing_the_feed_ends_every_open_subscription_and_every_later_one() -> None:
    feed = OutcomeFeed()
    read: list[list[DocOutcome | None]] = [[], []]

    def follow(into: list[DocOutcome | None]) -> None:
        into.extend(served._outcomes(feed, None, wait_s=3600))  # no keep-alive to wake it

    threads = [threading.Thread(target=follow, args=(r,), daemon=True) for r in read]
    for t in threads:
        t.start()
    feed.publish(outcome(1))
    feed.close()
    for t in threads:
        t.join(timeout=60)
    assert [t.is_alive() for t in threads] == [False, False]
    assert all(outcome(1) in r for r in read)
    assert list(served._outcomes(feed, None, wait_s=3600)) == [outcome(1)]  # recent, then end


def test_a_subscriber_whose_inbox_is_full_still_reads_the_end() -> None:
    feed = OutcomeFeed()
    with feed.subscribe() as inbox:
        for i in range(BACKLOG + 10):  # it reads nothing: the newest beyond its backlog drop
            feed.publish(outcome(i))
        feed.close()
        drained = []
        while not inbox.empty():
            drained.append(inbox.get_nowait())
    assert drained[-1] is None and len(drained) == BACKLOG
