"""`ragstream mcp`: the index as a Model Context Protocol server over stdio, the command a
desktop host (Claude Desktop, Cursor, VS Code) launches."""

from __future__ import annotations

from typing import Annotated

import typer

from ragstream.cli.options import ApiKey, AsUser, DataDir, Url, principal_option


def mcp(
    data_dir: DataDir = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            envvar="RAGSTREAM_MCP_TENANT",
            help="answer as this tenant: only its sources' chunks, paths and ledger rows",
        ),
    ] = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_user: AsUser = None,
) -> None:
    """Serve the index over MCP on stdin/stdout (tools: search, ask, read, files, file,
    status; resources ragstream://doc/...), read as `--as-user` where sources mirror file
    permissions. Asks the `watch --serve` owning the data dir when one runs, else opens it
    here. Logs go to stderr; stdout carries the protocol."""
    from ragstream.core.settings import load_settings
    from ragstream.mcp.server import run_stdio
    from ragstream.service.connect import connect

    principal = principal_option(as_user)
    # `connect` scopes the index to the tenant: embedded, every call in the one index it
    # opens; over HTTP, by the tenant's API key (`server.api_keys`)
    with connect(data_dir, url=url, api_key=api_key, principal=principal, tenant=tenant) as index:
        run_stdio(index, warm=load_settings(data_dir).server.warm)
