"""What every route depends on: the serving state (the served index once it is open, the
bounded thread pool of its CPU work and the background lane of long audits), the index as
the caller sees it (their tenants and principal, decided from the API key or a trusted
proxy's `X-Ragstream-User`, never from the body), and the admin guard. A route asks
`serving.ready_index(caller)` inside its body, so a bad request is a
422 even while the index is still opening."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import Depends, Request

from ragstream.core.cpus import usable_cpus
from ragstream.core.errors import AuthError, ForbiddenError, InvalidRequestError, NotReadyError
from ragstream.core.permissions import Principal, principal_of
from ragstream.core.settings import Settings
from ragstream.service.base import USER_HEADER, Caller, ServedService, Tenants

# the longest a background page waits for requests' work (`Serving.yield_to_requests`)
YIELD_S = 0.25
T = TypeVar("T")


@dataclass
class Serving:
    """What the app answers from. `index` is None until the stores are open (not ready);
    `draining` turns true when shutdown begins (not ready again, new requests refused);
    `syncs`: this process syncs, its index has a live feed (`follow`) once open."""

    settings: Settings
    index: ServedService | None = None
    draining: bool = False
    syncs: bool = False
    _cpu: anyio.CapacityLimiter | None = field(default=None, repr=False)
    _background: anyio.CapacityLimiter | None = field(default=None, repr=False)
    _busy: int = 0  # calls on the CPU pool now (requests' work, not the background lane's)

    def ready_index(self, caller: Caller | None = None) -> ServedService:
        """The served index as `caller` sees it (None: an operator's view, every tenant, no
        principal); `NotReadyError` (503) until it is open."""
        if self.index is None or self.draining:
            why = "shutting down" if self.draining else "starting: the index is not open yet"
            raise NotReadyError(f"the server is {why}; retry")
        caller = caller or Caller()
        return self.index.scoped(caller.tenants, caller.principal)

    @property
    def cpu_threads(self) -> int:
        return self.settings.server.cpu_threads or usable_cpus()

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the bounded thread pool of CPU work (the caller's context
        variables go along: the pinned side, the span)."""
        if self._cpu is None:
            self._cpu = anyio.CapacityLimiter(self.cpu_threads)
        self._busy += 1  # on the event loop: no lock needed
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._cpu)
        finally:
            self._busy -= 1

    async def background(self, fn: Callable[..., T]) -> T:
        """`fn(pause=self.yield_to_requests)` in the background lane: one at a time, beside
        the CPU pool (a long audit never takes a request's thread); `fn` calls `pause`
        between the pages it reads."""
        if self._background is None:
            self._background = anyio.CapacityLimiter(1)

        def paced() -> T:
            return fn(pause=self.yield_to_requests)

        return await anyio.to_thread.run_sync(paced, limiter=self._background)

    def yield_to_requests(self, most_s: float = YIELD_S) -> None:
        """Wait while requests' work runs on the CPU pool, at most `most_s`: background work
        takes the CPU only between them, and still moves on under a steady load."""
        deadline = time.monotonic() + most_s
        while self._busy > 0 and time.monotonic() < deadline:
            time.sleep(0.005)


async def serving_of(request: Request) -> Serving:
    state: Serving = request.app.state.serving
    return state


ServingDep = Annotated[Serving, Depends(serving_of)]


def api_key(request: Request) -> str:
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


async def caller_tenants(request: Request, serving: ServingDep) -> Caller:
    """The caller, decided here (never from the body): the tenant of the API key, and the
    principal it reads as (`server.api_key_principals`, or, with `server.trust_user_header`,
    the user a trusted proxy names in `X-Ragstream-User`)."""
    server = serving.settings.server
    key = api_key(request)
    tenants: Tenants = None
    if server.api_keys:
        if key not in server.api_keys:
            raise AuthError("missing or unknown API key: send `Authorization: Bearer KEY`")
        tenants = (server.api_keys[key],)
    return Caller(tenants, caller_principal(request, serving.settings))


def caller_principal(request: Request, settings: Settings) -> Principal | None:
    """Who the request reads as: the trusted header's user, else the API key's principal."""
    server = settings.server
    header = request.headers.get(USER_HEADER, "").strip()
    if server.trust_user_header and header:
        return known_principal(header, f"{USER_HEADER} names")
    granted = server.api_key_principals.get(api_key(request))
    if granted is None:
        return None
    if granted.groups is not None:
        return Principal(user=granted.user, groups=tuple(granted.groups))
    return known_principal(granted.user, "server.api_key_principals names")


def known_principal(user: str, who: str) -> Principal:
    """`id USER` (core.permissions.principal_of), an unknown user a 401."""
    try:
        return principal_of(user)
    except InvalidRequestError:
        raise AuthError(f"{who} an unknown user {user!r}") from None


async def admin_only(request: Request, serving: ServingDep) -> None:
    settings = serving.settings
    if settings.server.api_keys and api_key(request) not in settings.server.admin_api_keys:
        raise ForbiddenError("admin commands need an admin API key")


TenantsDep = Annotated[Caller, Depends(caller_tenants)]
ADMIN = [Depends(admin_only)]
