"""Admission control in front of a real ASGI app: past the in-flight limit and the queue a
request is refused at once with 429 and `Retry-After`; a request past its time is 504 and
frees its slot; a key past its rate is 429; a draining server is 503; liveness is never
held back. The app behind is a small Starlette app whose one route waits until released."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ragstream.core.answers import QueryRequest  # at module level: FastAPI resolves it
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


@pytest.mark.parametrize("parsed", [False, True], ids=["raw body", "pydantic body"])
def test_a_body_trickled_past_its_deadline_is_408(parsed: bool) -> None:
    from fastapi import FastAPI

    async def scenario() -> list[dict[str, object]]:
        app = FastAPI()  # the middleware where create_app puts it: inside the error handler

        if parsed:  # FastAPI answers a body it could not read as a 400 of its own

            @app.post("/v1/query")
            async def parse(request: QueryRequest) -> dict[str, str]:
                return {"got": request.query}

        else:

            @app.post("/v1/query")
            async def post(request: Request) -> dict[str, int]:
                return {"got": len(await request.body())}

        limits = Limits(max_inflight=2, max_queue=2, request_timeout_s=30, body_timeout_s=0.3)
        app.add_middleware(Admission, limits=limits, draining=lambda: False)
        chunks = [b'{"query": ', b'"slow"}']
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            if len(chunks) == 2:
                return {"type": "http.request", "body": chunks.pop(0), "more_body": True}
            await asyncio.sleep(5)  # the rest never comes in time
            return {"type": "http.request", "body": chunks.pop(0), "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/query",
            "raw_path": b"/v1/query",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-length", b"17"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
        }
        await app(scope, receive, send)  # type: ignore[arg-type]
        return sent

    sent = asyncio.run(scenario())
    assert sent[0]["status"] == 408
    assert b"slow_body" in sent[1]["body"]  # type: ignore[operator]


def test_a_connection_that_sends_nothing_is_closed() -> None:
    import socket
    import time

    from fastapi import FastAPI

    from ragstream.http.server import IDLE_S, run_server

    with run_server(FastAPI(), "127.0.0.1", 0) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as silent:
            silent.settimeout(IDLE_S + 10)
            start = time.monotonic()
            assert silent.recv(1) == b""  # closed by the server, nothing written
            assert time.monotonic() - start < IDLE_S + 10
