"""The OpenAI chat completions dialect of an answer: the request a chat front end or the
`openai` SDK sends (`CompletionRequest`) read as a conversation (`chat_request`), and an
`Answer` written back as a `chat.completion` (or its `chat.completion.chunk`s), with the
citations as `[n]` markers and `url_citation` annotations, and the whole answer in a
`ragstream` extension object. Pure functions: the routes are `routes/completions.py`.

A refusal is an ordinary assistant message in plain words (`finish_reason: "stop"`), so a
client that knows nothing of ragstream shows something sensible; its `reason` and `check` are
in the extension. Errors have OpenAI's shape, `{"error": {"message", "type", "code"}}`.

>>> renumbered("Steep at 80 C [S2]. Then pour [S1][S2].", ["S2", "S1"])
'Steep at 80 C [1]. Then pour [2][1].'
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from ragstream.core.answers import (
    MAX_CHAT_MESSAGES,
    Answer,
    ChatMessage,
    ChatRequest,
    MetadataFilter,
    QueryFilters,
)
from ragstream.core.errors import InvalidRequestError
from ragstream.core.filters import Condition, Logic

MODEL = "ragstream"  # the one model profile `/v1/models` lists
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")
CITATION_MARK = re.compile(r"\[(S\d+)\]")
REFUSED = "The indexed documents do not answer this"


class CompletionMessage(BaseModel):
    """One message of OpenAI's `messages`: its role and its text (a string, or a list of
    parts of which only `text` parts are read). Other keys a client sends are ignored."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class CompletionRequest(BaseModel):
    """The body of `POST /v1/chat/completions`. OpenAI's sampling options (`temperature`,
    `max_tokens`, ...) are accepted and have no effect: the answer is the index's. `k`,
    `filter` and `filters` are ragstream's extra body fields (the SDK's `extra_body`)."""

    model_config = ConfigDict(extra="allow")

    model: str = MODEL
    messages: list[CompletionMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    stream: bool = False
    k: int = Field(default=8, ge=1, le=50)
    filter: MetadataFilter = None
    filters: QueryFilters = Field(default_factory=QueryFilters)


def _text(message: CompletionMessage) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    parts = []
    for part in message.content:
        if part.get("type") != "text":
            raise InvalidRequestError(
                f"a message part of type {part.get('type')!r} is not supported: send text"
            )
        parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def model_ids(sources: list[str]) -> list[str]:
    """The profiles: `ragstream` (every source the key may read), then one per source,
    `ragstream:<source>`, which answers from that source's documents alone."""
    return [MODEL, *(f"{MODEL}:{name}" for name in sources)]


def source_of(model: str, sources: list[str]) -> str | None:
    """The source a profile narrows to (None: every source); `NotFoundError`-worthy models
    are the caller's to refuse (None is returned only for `ragstream`)."""
    name = model.removeprefix(f"{MODEL}:") if model.startswith(f"{MODEL}:") else None
    if model != MODEL and name not in sources:
        raise KeyError(model)
    return name


def narrowed(chat: ChatRequest, source: str | None) -> ChatRequest:
    """The conversation answered from one source's documents (`source = <name>` ANDed with
    any metadata filter it carries)."""
    if source is None:
        return chat
    only = Condition(field="source", operator="==", value=source)
    where = only if chat.filter is None else Logic(operator="AND", conditions=[only, chat.filter])
    return chat.model_copy(update={"filter": where})


def chat_request(body: CompletionRequest) -> ChatRequest:
    """The conversation the completion asks for, as `/v1/chat` answers it. System and
    developer messages are read by no one (the answer comes from the documents, in their
    words) and left out; a tool call or a tool's reply is refused: ragstream calls no tools."""
    extra = body.model_extra or {}
    if any(extra.get(key) for key in ("tools", "functions", "tool_choice", "function_call")):
        raise InvalidRequestError("tool calls are not supported: ragstream answers from its index")
    messages = []
    for message in body.messages:
        if message.role in ("system", "developer"):
            continue
        if message.role not in ("user", "assistant"):
            raise InvalidRequestError(
                f"messages: the role {message.role!r} is not supported (user, assistant, "
                "system; ragstream calls no tools)"
            )
        if getattr(message, "tool_calls", None):
            raise InvalidRequestError("tool calls are not supported: ragstream calls no tools")
        text = _text(message)
        if text.strip():
            messages.append(ChatMessage(role=message.role, content=text))
    if not messages or messages[-1].role != "user":
        raise InvalidRequestError("messages: the last one must be a user's question")
    return ChatRequest(messages=messages, k=body.k, filter=body.filter, filters=body.filters)


def renumbered(text: str, order: list[str]) -> str:
    """`[S2]` markers as `[n]`, n the citation's place in `order` (1-based)."""
    place = {cid: i + 1 for i, cid in enumerate(order)}
    return CITATION_MARK.sub(lambda m: f"[{place.get(m.group(1), m.group(1))}]", text)


def cited_order(answer: Answer) -> list[str]:
    """The answer's citation ids in order of first mention in its text."""
    seen = dict.fromkeys(CITATION_MARK.findall(answer.text))
    return [*seen, *(c.cid for c in answer.citations if c.cid not in seen)]


def console_url(base: str, doc_id: str, start: int, end: int) -> str:
    """The console's view of a document with the cited span marked."""
    return f"{base.rstrip('/')}/#file/{quote(doc_id, safe='')}@{start}-{end}"


def url_citations(content: str, answer: Answer, base: str) -> list[dict[str, Any]]:
    """One `url_citation` per `[n]` marker in `content`, pointing at its span in the console."""
    order = cited_order(answer)
    by_cid = {c.cid: c for c in answer.citations}
    out = []
    for match in re.finditer(r"\[(\d+)\]", content):
        n = int(match.group(1))
        if 1 <= n <= len(order) and order[n - 1] in by_cid:
            c = by_cid[order[n - 1]]
            title = " › ".join((c.doc_id, *c.section_path)) if c.section_path else c.doc_id
            url = console_url(base, c.doc_id, c.char_start, c.char_end)
            cite = {"start_index": match.start(), "end_index": match.end(), "url": url}
            out.append({"type": "url_citation", "url_citation": {**cite, "title": title}})
    return out


def message_text(answer: Answer) -> str:
    """What the assistant says: the answer with `[n]` markers, or the refusal in words."""
    if answer.refusal is None:
        return renumbered(answer.text, cited_order(answer))
    return f"{REFUSED}: {answer.refusal.detail}"


def approx_tokens(text: str) -> int:
    """OpenAI's rule of thumb: a token is about four characters."""
    return math.ceil(len(text) / 4)


def usage(answer: Answer, content: str) -> dict[str, int]:
    """Prompt tokens are the context the generator was sent (0 for the extractive answer,
    which prompts no model); completion tokens are the message's. Both approximate."""
    extractive = answer.generator == "extractive"
    prompt = 0 if extractive else sum(approx_tokens(s.text) for s in answer.sources)
    completion = approx_tokens(content)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def extension(answer: Answer, base: str) -> dict[str, Any]:
    """The `ragstream` object: the whole citations (numbered as the text), the grounding, the
    refusal's reason and check, and how usage was counted."""
    order = cited_order(answer)
    by_cid = {c.cid: c for c in answer.citations}
    citations = []
    for n, cid in enumerate(order, start=1):
        if cid in by_cid:
            c = by_cid[cid]
            support = max((cl.score for cl in answer.claims if cid in cl.cids), default=None)
            citations.append(
                {
                    "n": n,
                    **c.model_dump(mode="json"),
                    "support": support,
                    "url": console_url(base, c.doc_id, c.char_start, c.char_end),
                }
            )
    refusal = answer.refusal.model_dump(mode="json") if answer.refusal is not None else None
    counted = (
        "extractive: no model was prompted (prompt_tokens 0); completion tokens ≈ chars / 4"
        if answer.generator == "extractive"
        else "approximate: the context sent to the generator and the message, ≈ chars / 4"
    )
    return {
        "citations": citations,
        "grounding": answer.grounding,
        "answered": answer.answered,
        "refusal": refusal,
        "generator": answer.generator,
        "effective_query": (
            answer.effective_query.model_dump(mode="json") if answer.effective_query else None
        ),
        "trace_id": answer.trace_id,
        "usage": counted,
    }


def completion(answer: Answer, model: str, created: int, base: str) -> dict[str, Any]:
    """The answer as a `chat.completion`."""
    content = message_text(answer)
    message = {
        "role": "assistant",
        "content": content,
        "annotations": url_citations(content, answer, base),
    }
    return {
        "id": f"chatcmpl-{answer.trace_id}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": usage(answer, content),
        "ragstream": extension(answer, base),
    }


def chunk(
    ident: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    """One `chat.completion.chunk`."""
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


class MarkerStream:
    """Streamed text with `[S2]` markers rewritten as `[n]` as they pass: numbered in order
    of first mention (as the final answer numbers them), a partial marker held back until
    it closes."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self._held = ""

    def feed(self, text: str) -> str:
        text = self._held + text
        cut = text.rfind("[")
        if cut != -1 and "]" not in text[cut:] and len(text) - cut <= 8:
            text, self._held = text[:cut], text[cut:]
        else:
            self._held = ""
        for cid in CITATION_MARK.findall(text):
            if cid not in self.order:
                self.order.append(cid)
        return renumbered(text, self.order)

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# --- chat front ends' side requests -----------------------------------------------------------

# the helper prompts chat front ends send besides the user's questions (Open WebUI's title,
# tags, follow-up and search-query tasks): a JSON object with one of these keys is expected
SIDE_TASKS = {"title": "title", "tags": "tags", "follow_ups": "follow_ups", "queries": "queries"}
_TASK = re.compile(r"^\s*###\s*Task:", re.IGNORECASE)
_KEY = re.compile(r'JSON format:\s*\{\s*"(\w+)"', re.IGNORECASE)
_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.DOTALL | re.IGNORECASE)


def side_task(request: ChatRequest) -> str | None:
    """The side task a front end's helper prompt asks for (`title`, `tags`, `follow_ups`,
    `queries`), or None for a question."""
    prompt = request.messages[-1].content
    if len(request.messages) != 1 or not _TASK.match(prompt):
        return None
    key = _KEY.search(prompt)
    return SIDE_TASKS.get(key.group(1).lower()) if key else None


def side_reply(task: str, request: ChatRequest) -> str:
    """A cheap, honest reply to a side task, with no retrieval: a title of the user's own
    first words; no tags, follow-ups or search queries (none is invented)."""
    if task != "title":
        return json.dumps({task: []})
    prompt = request.messages[-1].content
    history = _HISTORY.search(prompt)
    lines = (history.group(1) if history else prompt).strip().splitlines()
    asked = next((ln.split(":", 1)[1] for ln in lines if ln.upper().startswith("USER:")), "")
    words = re.sub(r"[^\w\s'-]", " ", asked).split()[:6]
    return json.dumps({"title": " ".join(words) or "Question"})


def error_body(status: int, message: str, code: str) -> dict[str, Any]:
    """OpenAI's error object: a 4xx is an `invalid_request_error` unless it says more."""
    kind = {
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_path(path: str) -> bool:
    return path in OPENAI_PATHS
