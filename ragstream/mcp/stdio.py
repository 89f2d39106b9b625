"""The index `ragstream mcp` serves over stdio: where `connect` says it is answered (opened
here, or the `watch --serve` / `serve` that owns the data dir, over HTTP), as the tenant and
the principal the command line names. Embedded, the served index is scoped to that tenant and
read as that principal; over HTTP the server decides the tenant from the API key, so the
tenant's key is taken from `server.api_keys`, and the principal travels as `connect` sends
it (`X-Ragstream-User`, honoured by a server that trusts it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragstream.core.errors import InvalidRequestError
from ragstream.core.permissions import Principal
from ragstream.core.settings import Settings, load_settings
from ragstream.service.base import IndexService
from ragstream.service.connect import connect
from ragstream.service.served import open_served


def key_of(settings: Settings, tenant: str) -> str | None:
    """The API key `server.api_keys` maps to `tenant` (the first, when several do)."""
    return next((k for k, t in settings.server.api_keys.items() if t == tenant), None)


@contextmanager
def stdio_index(
    data_dir: str | Path | None = None,
    *,
    tenant: str | None = None,
    url: str | None = None,
    api_key: str | None = None,
    principal: Principal | None = None,
) -> Iterator[IndexService]:
    """The index as `tenant` (None: every tenant) sees it, read as `principal` where sources
    mirror file permissions (None: `everyone`'s files only), wherever it is answered."""
    s = load_settings(data_dir)
    key = api_key or (key_of(s, tenant) if tenant else None)
    with connect(data_dir, url=url, api_key=key, settings=s, principal=principal) as index:
        if tenant is None or index.mode == "http":
            if tenant is not None and key is None:
                raise InvalidRequestError(
                    f"the server decides the tenant from the API key: pass --api-key, or map "
                    f"a key to {tenant!r} in server.api_keys"
                )
            yield index
            return
    with open_served(s) as served:  # embedded: the served index, as the tenant sees it
        yield served.scoped((tenant,), principal)
