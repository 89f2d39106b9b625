"""Running the app: `serve`, which composes a serving process (the HTTP API up first, then
the served index open: a data dir opened here, or a running flow's stores), `serving`, which
runs the app over a given `Serving` and records its URL in the data dir while it serves so
clients of that data dir find it, and `run_server` (uvicorn on a background thread).
Shutdown is graceful: readiness turns false and new requests get 503 at once, the live
feed's streams (`GET /v1/events`) end, the listener closes, and requests in flight get
`server.shutdown_grace_s` to finish."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from ragstream.http.app import create_app
from ragstream.http.deps import Serving
from ragstream.service.connect import endpoint_recorded
from ragstream.service.feed import OutcomeFeed
from ragstream.service.served import Servable, open_served, settings_of


@contextmanager
def serve(
    target: Servable,
    *,
    host: str | None = None,
    port: int | None = None,
    on_serving: Callable[[str], None] | None = None,
    feed: OutcomeFeed | None = None,
) -> Iterator[str]:
    """The HTTP API of a data dir (`Settings`: its stores opened here) or of a running
    flow's stores (a `Runtime`: `watch --serve`, whose outcomes `feed` carries to the Live
    page); yields the URL once the index is open. `on_serving(url)` runs as soon as it
    listens (`/v1/ready` says 503 until the index is open and, with `server.warm`, the models
    a first query needs are loaded: `ServedIndex.warm`). Host and port default to
    `server.host` and `server.port` (port 0: any free one)."""
    settings = settings_of(target)
    state = Serving(settings, syncs=feed is not None)
    bind_port = settings.server.port if port is None else port
    with (
        serving(state, host or settings.server.host, bind_port, on_serving) as url,
        open_served(target, feed) as index,
    ):
        if settings.server.warm:  # a first query's models, opened before readiness turns true
            index.warm()
        state.index = index  # /v1/ready turns true here
        try:
            yield url
        finally:
            state.draining = True  # new requests 503 from here
            if feed is not None:  # the live streams end now, not at the end of the grace
                feed.close()


@contextmanager
def serving(
    state: Serving,
    host: str,
    port: int,
    on_serving: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """The HTTP API over `state`; yields its URL, which is recorded in the data dir while it
    serves."""
    grace = state.settings.server.shutdown_grace_s
    with (
        run_server(create_app(state), host, port, grace) as url,
        endpoint_recorded(state.settings, url),
    ):
        if on_serving is not None:
            on_serving(url)
        try:
            yield url
        finally:
            state.draining = True  # not ready, new requests 503, before the listener closes


IDLE_S = 5  # a connection that says nothing this long is closed (before and between requests)


class QuietClosingH11(H11Protocol):
    """uvicorn's h11 protocol, whose idle timer also runs before the first request: a
    connection that opens and sends nothing is closed after `IDLE_S` (uvicorn starts that
    timer only after a response), so silent sockets cannot pile up."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )


@contextmanager
def run_server(app: FastAPI, host: str, port: int, grace_s: float = 3.0) -> Iterator[str]:
    """uvicorn on a background thread; yields the URL once it accepts connections, and on
    exit stops accepting and gives the requests in flight `grace_s` to finish.

    The socket is bound here first, so port 0 (any free port) reports the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=math.ceil(grace_s),
        timeout_keep_alive=IDLE_S,
        http=QuietClosingH11,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="ragstream-http", daemon=True
    )
    thread.start()
    while not server.started:
        if not thread.is_alive():
            sock.close()
            raise RuntimeError(f"the HTTP server on {host}:{bound} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=grace_s + 10)
        sock.close()
