"""Every failure as a JSON body `{"error": message, "code": ...}` with its status (422 adds
pydantic's `details`, echoing an offending input only when it is short), never a traceback;
and the body-size check that runs before a body is read (411 without a Content-Length, 413
past the limit)."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragstream.core.errors import EndpointDownError, NotReadyError, RagstreamError
from ragstream.http.openai_shapes import error_body as openai_error
from ragstream.http.openai_shapes import openai_path

MAX_BODY = 1 << 20
# A refused body up to this size is read and dropped before the 413 goes out, and the
# connection is kept open: a client still sending when the server closes gets a broken pipe
# instead of the 413 (urllib, requests). Beyond it the server answers at once and closes;
# reading more would let anyone make it read unbounded input.
DRAIN_LIMIT = 16 * MAX_BODY
RETRY_NOT_READY_S = 2
ECHO_LIMIT = 200  # a 422's details repeat an offending input up to this many JSON characters


def error_body(status: int, message: str, code: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, "code": code, **extra}, status_code=status)


def error_reply(
    request: Request, status: int, message: str, code: str, **extra: Any
) -> JSONResponse:
    """The error in the dialect of the route: OpenAI's shape on its routes (a 411, 413 or 422
    there is OpenAI's 400, which its SDK raises as `BadRequestError`), else the API's."""
    if openai_path(request.url.path):
        status = 400 if status in (411, 413, 422) else status
        return JSONResponse(openai_error(status, message, code), status_code=status)
    return error_body(status, message, code, **extra)


async def limit_body(request: Request, call_next: Any) -> Any:
    """Bodies are read whole, so their size is checked before: a body must state it."""
    length = request.headers.get("content-length")
    if request.method == "POST" and length is None:
        return error_reply(
            request, 411, "send the body with a Content-Length header", "invalid_request"
        )
    size = int(length or 0)
    if size > MAX_BODY:
        too_large = f"body too large (limit {MAX_BODY} bytes)"
        refused = error_reply(request, 413, too_large, "invalid_request")
        if size <= DRAIN_LIMIT:  # read whole: the connection stays usable, nothing to close
            async for _ in request.stream():
                pass
        else:  # left unread: the connection cannot carry another request
            refused.headers["connection"] = "close"
        return refused
    return await call_next(request)


async def user_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RagstreamError)
    reply = error_reply(request, exc.http_status, str(exc), exc.code)
    if isinstance(exc, NotReadyError):  # opening its index, or draining: come back soon
        reply.headers["retry-after"] = str(RETRY_NOT_READY_S)
    elif isinstance(exc, EndpointDownError):  # the model endpoint is down: when to try again
        reply.headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_s)))
    return reply


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = json.loads(json.dumps(exc.errors(), default=str))
    for detail in details:  # a 1 MB message or 10,000 turns are not sent back
        if len(json.dumps(detail.get("input"))) > ECHO_LIMIT:
            del detail["input"]
    if openai_path(request.url.path):  # OpenAI's message says what is wrong, in one line
        first = details[0] if details else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"invalid request: {where or 'body'}: {first.get('msg', 'invalid')}"
        return error_reply(request, 422, message, "invalid_request")
    return error_body(422, "invalid request", "invalid_request", details=details)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = f"no such endpoint: {request.url.path}" if exc.status_code == 404 else exc.detail
    return error_reply(request, exc.status_code, str(message), "not_found")


def install_error_handling(app: FastAPI) -> None:
    app.middleware("http")(limit_body)
    app.add_exception_handler(RagstreamError, user_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
