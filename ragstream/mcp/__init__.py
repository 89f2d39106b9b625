"""The index for agents: a Model Context Protocol server on the official SDK, whose tools
(search, ask, read, files, file, fields, status) and resources are calls on one `IndexService`
(embedded, a running server over HTTP, or the served index as an API key's tenants see it).
`ragstream mcp` serves it over stdio (the index `connect` opens, scoped to the command line's
tenant); the HTTP app mounts it at `/mcp` (`ragstream.http.mcp`).

    schemas  each tool's argument and result models (their JSON schemas), the bounds
    tools    the tools over an `IndexService`; document text spotlighted as untrusted data
    server   the SDK server: tools, paged document resources, typed errors; `run_stdio`
    changes  `notifications/resources/list_changed` to live sessions, from the live feed
"""
