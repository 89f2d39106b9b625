"""Admission control in front of a real ASGI app: past the in-flight limit and the queue a
request is refused at once with 429 and `Retry-After`; a request past its time is 504 and
frees its slot; a key past its rate is 429; a draining server is 503; liveness is never
held back. The app behind is a small Starlette app whose one route waits until released."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ragstream.http.admission import Admission, Limits, Slots


def slow_app(release: asyncio.Event, entered: list[str]) -> Starlette:
    async def work(request: Request) -> JSONResponse:
        entered.append(request.url.path)
        await release.wait()
        return JSONResponse({"ok": True})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/v1/query", work), Route("/v1/health", health)])


def guarded(limits: Limits, release: asyncio.Event, entered: list[str], draining: bool = False):
    app = Admission(slow_app(release, entered), limits, draining=lambda: draining)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def test_past_the_limit_and_the_queue_a_request_is_429_at_once() -> None:
    async def scenario() -> list[httpx.Response]:
        release, entered = asyncio.Event(), []
        limits = Limits(max_inflight=1, max_queue=1, request_timeout_s=30)
        async with guarded(limits, release, entered) as client:
            first = asyncio.create_task(client.get("/v1/query"))
            second = asyncio.create_task(client.get("/v1/query"))
            while len(entered) < 1:
                await asyncio.sleep(0.01)
            third = await client.get("/v1/query")  # one running, one queued: refused now
            health = await client.get("/v1/health")  # never held back
            release.set()
            return [third, health, await first, await second]

    third, health, first, second = asyncio.run(scenario())
    assert third.status_code == 429 and third.headers["retry-after"] == "1"
    assert third.json()["code"] == "overloaded"
    assert health.status_code == 200
    assert first.status_code == second.status_code == 200  # the queued one ran after


def test_a_request_past_its_time_is_504_and_frees_its_slot() -> None:
    async def scenario() -> tuple[httpx.Response, int]:
        release, entered = asyncio.Event(), []
        limits = Limits(max_inflight=1, max_queue=0, request_timeout_s=0.2)
        app = Admission(slow_app(release, entered), limits, draining=lambda: False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            timed_out = await client.get("/v1/query")
            return timed_out, app.slots.inflight

    timed_out, inflight = asyncio.run(scenario())
    assert timed_out.status_code == 504 and timed_out.json()["code"] == "timeout"
    assert inflight == 0


def test_a_key_past_its_rate_is_429_with_when_to_come_back() -> None:
    async def scenario() -> list[httpx.Response]:
        release, entered = asyncio.Event(), []
        release.set()
        limits = Limits(max_inflight=4, max_queue=4, request_timeout_s=30, rate_per_key=2)
        async with guarded(limits, release, entered) as client:
            key = {"Authorization": "Bearer k1"}
            got = [await client.get("/v1/query", headers=key) for _ in range(3)]
            got.append(await client.get("/v1/query", headers={"Authorization": "Bearer k2"}))
            return got

    a, b, c, other = asyncio.run(scenario())
    assert [a.status_code, b.status_code, c.status_code, other.status_code] == [200, 200, 429, 200]
    assert c.json()["code"] == "rate_limited" and int(c.headers["retry-after"]) >= 1


def test_a_draining_server_is_503_but_still_live() -> None:
    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        release, entered = asyncio.Event(), []
        limits = Limits(max_inflight=1, max_queue=1, request_timeout_s=30)
        async with guarded(limits, release, entered, draining=True) as client:
            return await client.get("/v1/query"), await client.get("/v1/health")

    query, health = asyncio.run(scenario())
    assert query.status_code == 503 and query.json()["code"] == "shutting_down"
    assert "retry-after" in query.headers and health.status_code == 200


def test_a_waiter_that_gives_up_leaves_no_slot_behind() -> None:
    async def scenario() -> tuple[int, int]:
        slots = Slots(limit=1, queue=2)
        assert await slots.enter()
        waiter = asyncio.create_task(slots.enter())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        slots.leave()
        return slots.inflight, len(slots.waiting)

    assert asyncio.run(scenario()) == (0, 0)
