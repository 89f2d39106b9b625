"""Front matter edited under `ragstream watch --serve`: the served answer to a metadata filter
follows the edit, and the watcher's outcome for the note is a re-stamp of its payload with
nothing embedded."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.helpers import watch_serving

pytestmark = pytest.mark.slow  # a `watch --serve` subprocess

BODY = "# Lighthouse\n\nThe lighthouse keeper logs the tide and the fog signal at dawn.\n"
OTHER = "# Harbour\n\nThe harbour master logs the ferries leaving the pier at noon.\n"
QUESTION = "lighthouse keeper logs the tide and the fog signal at dawn"
RED, BLUE = "docs:lighthouse.md", "docs:harbour.md"


def note(tag: str, body: str) -> str:
    return f"---\ntags: [{tag}]\n---\n{body}"


def retrieved(url: str, where: str) -> set[str]:
    """The doc ids `POST /v1/retrieve` returns for QUESTION under the filter (a 200)."""
    body = {"query": QUESTION, "k": 8, "filter": where}
    reply = httpx.post(f"{url}/v1/retrieve", json=body, timeout=60, trust_env=False)
    assert reply.status_code == 200, reply.text
    return {r["doc_id"] for r in reply.json()["results"]}


def outcomes_until(
    outcomes: queue.Queue[dict[str, Any]], wanted: set[str], timeout: float = 180
) -> list[dict[str, Any]]:
    """The outcomes the watcher prints until each doc id in `wanted` has had one."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not wanted <= {o.get("doc_id") for o in seen}:
        assert time.monotonic() < deadline, f"no outcome for {wanted} in {seen}"
        try:
            seen.append(outcomes.get(timeout=1))
        except queue.Empty:
            continue
    return seen


def test_a_front_matter_edit_under_watch_restamps_and_the_filter_follows(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    red = docs / "lighthouse.md"
    red.write_text(note("red", BODY))
    (docs / "harbour.md").write_text(note("blue", OTHER))
    env = dict(os.environ, RAGSTREAM_EMBEDDER="static", RAGSTREAM_SYNC__DEBOUNCE_MS="100")
    with watch_serving(docs, tmp_path / "data", env) as (url, outcomes):
        first = outcomes_until(outcomes, {RED, BLUE})
        assert all(o["chunks_embedded"] >= 1 for o in first if o["doc_id"] == RED), first
        assert RED in retrieved(url, "tags = red")
        assert RED not in retrieved(url, "tags = blue")  # the poll below cannot pass at once

        red.write_text(note("blue", BODY))  # the front matter alone: the body is unchanged
        deadline = time.monotonic() + 60
        while RED not in retrieved(url, "tags = blue"):
            assert time.monotonic() < deadline, "the filter never saw the edited front matter"
            time.sleep(0.1)

        edited = [o for o in outcomes_until(outcomes, {RED}, timeout=60) if o["doc_id"] == RED]
        time.sleep(0.5)  # a second outcome of the same save, if any, is counted too
        while not outcomes.empty():
            later = outcomes.get()
            if later["doc_id"] == RED:
                edited.append(later)
        assert edited and all(o["chunks_embedded"] == 0 for o in edited), edited
        assert sum(o.get("chunks_restamped", 0) for o in edited) > 0, edited
        assert RED not in retrieved(url, "tags = red")  # 200, and nothing of the note
        assert retrieved(url, "tags = blue") >= {RED, BLUE}
