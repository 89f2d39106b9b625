"""Questions: `POST /v1/query` (an Answer, or with `"stream": true` Server-Sent Events),
`POST /v1/chat` (a conversation's last message answered the same way, retrieval shaped by
the history) and `POST /v1/retrieve` (ranked candidates, no generation), under the caller's
tenants."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter

from ragstream.core.answers import Answer, ChatRequest, QueryRequest, Retrieval
from ragstream.http.deps import ServingDep, TenantsDep
from ragstream.http.sse import answer_events, event_stream

router = APIRouter(tags=["query"])
STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": 'an Answer; with "stream": true, Server-Sent Events: `text` events '
        '({"delta": ...}) as the answer is generated, then one `answer` event (the verified '
        'Answer) or one `error` event ({"error", "code"})',
        "content": {"text/event-stream": {}},
    }
}


@router.post("/v1/query", response_model=Answer, responses=STREAM_DOC)
async def query(request: QueryRequest, caller: TenantsDep, serving: ServingDep) -> Any:
    """Answer with verified citations, or a structured refusal."""
    answering = partial(serving.ready_index(caller).query_async, request, offload=serving.offload)
    return event_stream(answer_events(answering)) if request.stream else await answering()


@router.post("/v1/chat", response_model=Answer, responses=STREAM_DOC)
async def chat(request: ChatRequest, caller: TenantsDep, serving: ServingDep) -> Any:
    """Answer a conversation's last message (OpenAI-style `messages`, oldest first) exactly
    as `/v1/query` answers a question; the Answer adds `effective_query` (what retrieval
    ran) and `conversation` (the history read, dropped, and how it was rewritten)."""
    answering = partial(serving.ready_index(caller).chat_async, request, offload=serving.offload)
    return event_stream(answer_events(answering)) if request.stream else await answering()


@router.post("/v1/retrieve")
async def retrieve(request: QueryRequest, caller: TenantsDep, serving: ServingDep) -> Retrieval:
    """Ranked candidates (fused, reranked) with their text and per-leg ranks; no LLM."""
    return await serving.offload(serving.ready_index(caller).retrieve, request)
