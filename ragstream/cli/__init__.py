"""The command line, by role:

app      the typer app, its command table and `main` (the console script)
options  options shared by the commands, with the environment variables they read
render   rich tables for a person, one JSON document for a program (`--json`)
index    sync, watch, status, gc, rebuild-lexical
audit    verify, files, file
ask      query, serve, log
mcp      mcp (the index as an MCP server over stdio)
reindex  the `reindex` command group (blue/green)
snapshot the `snapshot` command group (create, list, verify, restore)
measure  eval, config
tune     tune (train models for this index's corpus)
__main__ `python -m ragstream.cli`
"""

from ragstream.cli.app import app, main

__all__ = ["app", "main"]
