"""The background lane of long audits: beside the CPU pool, yielding to requests' work."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from ragstream.core.settings import Settings
from ragstream.http.deps import Serving


def test_an_audit_runs_beside_a_full_cpu_pool_and_waits_for_its_work() -> None:
    serving = Serving(Settings(server={"cpu_threads": 1}))
    release, started = threading.Event(), threading.Event()
    paused_while_busy: list[bool] = []

    def query_work() -> str:  # holds the only CPU thread until released
        started.set()
        release.wait(10)
        return "query"

    def audit(pause: Callable[[], None]) -> str:
        paused_while_busy.append(serving._busy > 0)
        pause()  # waits for the query's work, at most `YIELD_S`
        return "audit"

    async def main() -> tuple[str, str]:
        async with anyio.create_task_group() as tg:
            out: dict[str, str] = {}

            async def query() -> None:
                out["query"] = await serving.offload(query_work)

            tg.start_soon(query)
            await anyio.to_thread.run_sync(started.wait, 10)
            with anyio.fail_after(5):  # the pool is full: an audit on it would wait here
                out["audit"] = await serving.background(audit)
            release.set()
        return out["query"], out["audit"]

    assert anyio.run(main) == ("query", "audit")
    assert paused_while_busy == [True]
    assert serving._busy == 0


def test_yield_to_requests_returns_at_once_when_nothing_runs() -> None:
    serving = Serving(Settings())
    waited = threading.Event()
    thread = threading.Thread(target=lambda: (serving.yield_to_requests(5.0), waited.set()))
    thread.start()
    assert waited.wait(2.0)  # idle: no wait for the 5 s it may take under load
