"""What every route depends on: the serving state (the engine once the index is open, the
reindex commands, the live feed, the lock its reads share with the index's writers, the
bounded thread pool of its CPU work and the background lane of long audits), the caller's
tenants decided from the API key (never from the body), and the admin guard."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, TypeVar

import anyio
from fastapi import Depends, Request

from ragstream.core.cpus import usable_cpus
from ragstream.core.errors import AuthError, ForbiddenError, NotReadyError
from ragstream.core.rwlock import ReadWriteLock
from ragstream.core.settings import Settings
from ragstream.query.engine import QueryEngine
from ragstream.service.feed import OutcomeFeed
from ragstream.service.reindex import Maintainer

Tenants = tuple[str, ...] | None
# the longest a background page waits for requests' work (`Serving.yield_to_requests`)
YIELD_S = 0.25
T = TypeVar("T")


class ReadLock(Protocol):
    def read(self) -> AbstractContextManager[None]: ...


@dataclass
class Serving:
    """What the app answers from. `engine` is None until the stores are open (not ready);
    `draining` turns true when shutdown begins (not ready again, new requests refused)."""

    settings: Settings
    engine: QueryEngine | None = None
    maintainer: Maintainer | None = None
    # queries read the stores together; inside `watch --serve` this is the index's own lock,
    # so they wait only while an index batch or a backfill page writes
    lock: ReadLock = field(default_factory=ReadWriteLock)
    feed: OutcomeFeed | None = None  # sync outcomes, when this process syncs (`watch --serve`)
    draining: bool = False
    _cpu: anyio.CapacityLimiter | None = field(default=None, repr=False)
    _background: anyio.CapacityLimiter | None = field(default=None, repr=False)
    _busy: int = 0  # calls on the CPU pool now (requests' work, not the background lane's)

    def ready_engine(self) -> QueryEngine:
        if self.engine is None or self.draining:
            why = "shutting down" if self.draining else "starting: the index is not open yet"
            raise NotReadyError(f"the server is {why}; retry")
        return self.engine

    @property
    def cpu_threads(self) -> int:
        return self.settings.server.cpu_threads or usable_cpus()

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the bounded thread pool of CPU work, reading the stores under the
        read lock (the caller's context variables go along: the pinned side, the span)."""
        if self._cpu is None:
            self._cpu = anyio.CapacityLimiter(self.cpu_threads)

        def locked() -> T:
            with self.lock.read():
                return fn(*args)

        self._busy += 1  # on the event loop: no lock needed
        try:
            return await anyio.to_thread.run_sync(locked, limiter=self._cpu)
        finally:
            self._busy -= 1

    async def background(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args, pause=self.yield_to_requests)` in the background lane: one at a time,
        beside the CPU pool (a long audit never takes a request's thread), reading the stores
        under the read lock; `fn` calls `pause` between the pages it reads."""
        if self._background is None:
            self._background = anyio.CapacityLimiter(1)

        def locked() -> T:
            with self.lock.read():
                return fn(*args, pause=self.yield_to_requests)

        return await anyio.to_thread.run_sync(locked, limiter=self._background)

    def yield_to_requests(self, most_s: float = YIELD_S) -> None:
        """Wait while requests' work runs on the CPU pool, at most `most_s`: background work
        takes the CPU only between them, and still moves on under a steady load."""
        deadline = time.monotonic() + most_s
        while self._busy > 0 and time.monotonic() < deadline:
            time.sleep(0.005)

    def ready_maintainer(self) -> Maintainer:
        if self.maintainer is None:
            raise NotReadyError("reindex commands are not served by this process yet")
        return self.maintainer


async def serving_of(request: Request) -> Serving:
    state: Serving = request.app.state.serving
    return state


ServingDep = Annotated[Serving, Depends(serving_of)]


def api_key(request: Request) -> str:
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


async def caller_tenants(request: Request, serving: ServingDep) -> Tenants:
    """The caller's tenant, decided here from the API key (never from the body)."""
    keys = serving.settings.server.api_keys
    if not keys:
        return None
    key = api_key(request)
    if key not in keys:
        raise AuthError("missing or unknown API key: send `Authorization: Bearer KEY`")
    return (keys[key],)


async def admin_only(request: Request, serving: ServingDep) -> None:
    settings = serving.settings
    if settings.server.api_keys and api_key(request) not in settings.server.admin_api_keys:
        raise ForbiddenError("admin commands need an admin API key")


TenantsDep = Annotated[Tenants, Depends(caller_tenants)]
ADMIN = [Depends(admin_only)]
