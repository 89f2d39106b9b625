"""The API's routes, one module per resource:

service  GET /v1/health, /v1/ready
query    POST /v1/query, POST /v1/chat (an Answer, or Server-Sent Events), POST /v1/retrieve
completions  POST /v1/chat/completions, GET /v1/models: OpenAI's chat completions dialect
index    GET /v1/status, /v1/files, /v1/files/{doc_id}, /v1/fields, /v1/verify, /v1/log,
         /v1/events
quality  GET /v1/eval
reindex  POST /v1/admin/reindex/{command}
snapshots  POST /v1/snapshots, GET /v1/snapshots, GET /v1/snapshots/{id} (admin)
console  GET / and /console/*: the web console
"""

from ragstream.http.routes import (
    completions,
    console,
    index,
    quality,
    query,
    reindex,
    service,
    snapshots,
)

ROUTERS = (
    service.router,
    query.router,
    completions.router,
    index.router,
    quality.router,
    reindex.router,
    snapshots.router,
)

__all__ = ["ROUTERS", "console"]
