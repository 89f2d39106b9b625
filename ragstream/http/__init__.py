"""The HTTP API: one FastAPI app for `ragstream serve` and `ragstream watch --serve`.

    GET  /v1/health              liveness (always 200 while the process runs)
    GET  /v1/ready               200 once the live collection is open and its embedder
                                 loaded, else 503 {"ready": false, ...}
    GET  /v1/status              StatusReport (a tenant key sees its own sources' records)
    GET  /v1/files               the per-file ledger, [FileRecord] (tenant-scoped; ?state=)
    GET  /v1/files/{doc_id}      FileDetail: one file's record and chunks (tenant-scoped)
    GET  /v1/fields              the metadata fields documents carry, [FieldInfo]: type,
                                 count, examples, origins (tenant-scoped)
    GET  /v1/eval                the saved `ragstream eval` reports, newest first (admin)
    GET  /v1/verify              VerifyReport: the disk ↔ vectors ↔ BM25 audit (admin; ?sample=)
    GET  /v1/log                 the retrieval log, oldest first (admin; ?limit=)
    GET  /v1/events              sync outcomes live, Server-Sent Events (`watch --serve` only)
    POST /v1/query               QueryRequest -> Answer; {"stream": true} -> Server-Sent
                                 Events: `text` deltas as generated, then `answer`
    POST /v1/chat                ChatRequest -> Answer: a conversation's last message
                                 answered like /v1/query, retrieval shaped by the history
                                 (the same `stream`)
    POST /v1/retrieve            QueryRequest -> Retrieval (ranked candidates, no generation)
    POST /v1/chat/completions    OpenAI's chat completions: a conversation answered as
                                 /v1/chat, citations as [n] and `url_citation` annotations
    GET  /v1/models              the model profiles of /v1/chat/completions (`ragstream`)
    POST /v1/admin/reindex/{cmd} blue/green commands; with `server.api_keys` set, an admin
                                 key only
    POST /v1/snapshots           snapshot the data dir now (admin); GET lists them, GET
                                 /v1/snapshots/{id} downloads one
    GET  /openapi.json, /docs, /redoc   the schema and its viewers, every asset served here
    GET  /, /console/*           the web console (Ask, Files, Live, Reindex, Quality)

Every route is one call on the served index (`ragstream.service.served`) as the caller's
tenants see it; this package imports only `ragstream.core` and `ragstream.service`.
With `server.api_keys` configured every request needs `Authorization: Bearer KEY` and the
key's tenant becomes a filter inside both stores; the body can never widen it. Errors are JSON
`{"error": message, "code": ...}` (422 adds pydantic's `details`), never a traceback; on
the OpenAI routes they have OpenAI's shape, `{"error": {"message", "type", "code"}}`.

    app     `create_app`: assembles error handling, routers and the console
    deps    the serving state, the index as the caller's tenants see it, the admin guard
    errors  error bodies and the body-size check
    admission  back-pressure: in-flight and queue limits, per-key rates, timeouts, draining
    sse     Server-Sent Events frames (streamed answers, the live feed)
    openai_shapes  OpenAI's chat completions dialect of a conversation and an answer
    mcp     `/mcp`: the MCP server over streamable HTTP, behind the same keys and admission
    server  `serve` (composes a serving process), `serving` (records the endpoint),
            `run_server` (uvicorn on a thread)
    routes  one module per resource
"""

from ragstream.http.app import create_app
from ragstream.http.deps import Serving
from ragstream.http.errors import MAX_BODY
from ragstream.http.server import run_server, serve, serving

__all__ = ["MAX_BODY", "Serving", "create_app", "run_server", "serve", "serving"]
