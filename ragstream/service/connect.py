"""`connect`: the one place that decides where an index is answered. A URL is a running
server; a data dir that a live `serve` / `watch --serve` recorded its endpoint in
(`endpoint_recorded`) is asked there; otherwise its stores are opened in this process, and
when another process holds them without serving, the error says which and how to query it
anyway."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragstream.connectors.state import endpoint_path
from ragstream.core.errors import DataDirBusyError, InvalidRequestError
from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.permissions import Principal
from ragstream.core.settings import Settings, load_settings
from ragstream.service.base import IndexService
from ragstream.service.remote import RemoteIndex


def connect(
    data_dir: str | Path | None = None,
    *,
    url: str | None = None,
    api_key: str | None = None,
    settings: Settings | None = None,
    timeout_s: float = 120.0,
    principal: Principal | None = None,
    tenant: str | None = None,
) -> IndexService:
    """The index at `url`, else the one of `data_dir` (or `settings`): over HTTP when a
    process serves it, else opened here (stores now, query models on the first query).
    Questions read as `principal` where sources mirror file permissions: here, as given;
    over HTTP, its user name in `X-Ragstream-User`, which a server honours only when it
    trusts that header (`server.trust_user_header`). With `tenant`, the index as that tenant
    sees it: here, every call scoped to its sources (`LocalIndex`); over HTTP the server
    decides the tenant from the API key, so without `api_key` the key `server.api_keys`
    maps to the tenant is sent (InvalidRequestError when none does)."""
    user = principal.user if principal is not None else None
    s = settings
    if s is None and (url is None or tenant is not None):  # a plain URL needs no settings
        s = load_settings(data_dir)
    if tenant is not None and api_key is None and s is not None:
        api_key = key_of(s, tenant)

    def remote(at: str) -> RemoteIndex:
        if tenant is not None and api_key is None:  # the server decides the tenant by key
            raise InvalidRequestError(
                f"the server decides the tenant from the API key: pass an API key, or map "
                f"a key to {tenant!r} in server.api_keys"
            )
        return RemoteIndex(at, api_key=api_key, timeout_s=timeout_s, user=user)

    if url is not None:
        return remote(url)
    assert s is not None
    recorded = recorded_endpoint(s)
    if recorded is None:
        from ragstream.connectors.vector_stores import StoreBusyError
        from ragstream.service.local import LocalIndex

        try:
            tenants = (tenant,) if tenant is not None else None
            return LocalIndex(s, principal, tenants).open()
        except StoreBusyError as err:
            recorded = recorded_endpoint(s)  # it may have started serving meanwhile
            if recorded is None:
                raise DataDirBusyError(busy_message(s)) from err
    return remote(recorded)


def key_of(settings: Settings, tenant: str) -> str | None:
    """The API key `server.api_keys` maps to `tenant` (the first, when several do)."""
    return next((k for k, t in settings.server.api_keys.items() if t == tenant), None)


@contextmanager
def endpoint_recorded(s: Settings, url: str) -> Iterator[None]:
    """`url` recorded in the data dir (with this process's pid) while the block runs: the
    endpoint `recorded_endpoint` finds for every client of that data dir."""
    write_json_atomic(endpoint_path(s.state_dir), {"url": url, "pid": os.getpid()})
    try:
        yield
    finally:
        endpoint_path(s.state_dir).unlink(missing_ok=True)


def recorded_endpoint(s: Settings) -> str | None:
    """The URL a live `serve` / `watch --serve` recorded for this data dir, if any. Asked
    before opening the stores, so a query to a served data dir loads no model here."""
    record = read_json(endpoint_path(s.state_dir), {})
    url, pid = record.get("url"), record.get("pid")
    if not url:
        return None
    if isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # left behind by a process that died: nobody serves there
        except PermissionError:
            pass  # alive, another user's
    return str(url)


def busy_message(s: Settings) -> str:
    """Who holds the data dir and how to query it anyway."""
    pid = ingest_holder(s.state_dir / "ingest.lock")
    who = f"a sync/watch (pid {pid})" if pid else "another process (an embedded client?)"
    return (
        f"{s.data_dir} is held by {who} that serves no HTTP endpoint: to query it while it "
        f"runs, start it as `ragstream watch PATH --data-dir {s.data_dir} --serve`; or stop "
        "it and query again"
    )


def ingest_holder(lock: Path) -> str | None:
    """The pid a live sync/watch recorded in its ingest lock; None if no process holds it
    (the file outlives its process, so the lock itself is asked, not just the file)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock.read_text().strip() or "?"
    finally:
        os.close(fd)  # also drops a lock taken just now
    return None
