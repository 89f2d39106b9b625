"""What every route depends on: the serving state (the engine once the index is open, the
reindex commands, the live feed), the caller's tenants decided from the API key (never from
the body), and the admin guard."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from ragstream.core.errors import AuthError, ForbiddenError, NotReadyError
from ragstream.core.settings import Settings
from ragstream.query.engine import QueryEngine
from ragstream.service.feed import OutcomeFeed
from ragstream.service.reindex import Maintainer

Tenants = tuple[str, ...] | None


@dataclass
class Serving:
    """What the app answers from. `engine` is None until the stores are open (not ready)."""

    settings: Settings
    engine: QueryEngine | None = None
    maintainer: Maintainer | None = None
    # one query at a time through the embedded stores; shared with the index batches when
    # the app runs inside `watch --serve`
    lock: AbstractContextManager[object] = field(default_factory=threading.Lock)
    feed: OutcomeFeed | None = None  # sync outcomes, when this process syncs (`watch --serve`)

    def ready_engine(self) -> QueryEngine:
        if self.engine is None:
            raise NotReadyError("the server is starting: the index is not open yet; retry")
        return self.engine

    def ready_maintainer(self) -> Maintainer:
        if self.maintainer is None:
            raise NotReadyError("reindex commands are not served by this process yet")
        return self.maintainer


def serving_of(request: Request) -> Serving:
    state: Serving = request.app.state.serving
    return state


ServingDep = Annotated[Serving, Depends(serving_of)]


def api_key(request: Request) -> str:
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


def caller_tenants(request: Request, serving: ServingDep) -> Tenants:
    """The caller's tenant, decided here from the API key (never from the body)."""
    keys = serving.settings.server.api_keys
    if not keys:
        return None
    key = api_key(request)
    if key not in keys:
        raise AuthError("missing or unknown API key: send `Authorization: Bearer KEY`")
    return (keys[key],)


def admin_only(request: Request, serving: ServingDep) -> None:
    settings = serving.settings
    if settings.server.api_keys and api_key(request) not in settings.server.admin_api_keys:
        raise ForbiddenError("admin commands need an admin API key")


TenantsDep = Annotated[Tenants, Depends(caller_tenants)]
ADMIN = [Depends(admin_only)]
