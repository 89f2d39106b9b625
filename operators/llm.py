"""The one OpenAI client constructor, shared by situating (ingest) and generation (query).

Both talk to the same kind of OpenAI-compatible endpoint; building the client in one place
keeps their key handling, timeout and retry policy from drifting apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI


def openai_client(
    base_url: str, api_key: str = "", *, timeout_s: float, max_retries: int
) -> OpenAI:
    """A client for `base_url`; transient errors are retried by the client itself.

    openai is imported here, not at module level: it is slow to import and only needed
    when an endpoint is configured.
    """
    from openai import OpenAI

    # local servers accept any key; the client refuses an empty one, so send a placeholder
    return OpenAI(
        base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=max_retries
    )


def async_openai_client(
    base_url: str, api_key: str = "", *, timeout_s: float, max_retries: int
) -> AsyncOpenAI:
    """`openai_client`'s asyncio twin: a served answer waits on the endpoint without holding
    a thread."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=max_retries
    )
