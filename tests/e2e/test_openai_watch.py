"""The OpenAI chat completions endpoint under `ragstream watch --serve`: the official `openai`
SDK asks a real watching server, an edit to the folder lands, and the next completion
answers from the edited file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import openai
import pytest

from tests.harness.helpers import watch_serving

pytestmark = pytest.mark.slow  # a watch --serve subprocess

NOTE = "# Harbour light\n\nThe harbour light stands {height} metres above the quay.\n"
QUESTION = "How many metres above the quay does the harbour light stand?"


def ask(url: str) -> str:
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3)
    reply = sdk.chat.completions.create(
        model="ragstream", messages=[{"role": "user", "content": QUESTION}]
    )
    return reply.choices[0].message.content or ""


def test_an_edit_shows_in_the_next_completion(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    note = docs / "light.md"
    note.write_text(NOTE.format(height=31))
    env = dict(os.environ, RAGSTREAM_EMBEDDER="static", RAGSTREAM_SYNC__DEBOUNCE_MS="100")
    with watch_serving(docs, tmp_path / "data", env) as (url, outcomes):
        outcomes.get(timeout=300)  # the catch-up indexed the note
        first = ask(url)
        assert "31" in first and "[1]" in first, first
        note.write_text(NOTE.format(height=42))
        deadline = time.monotonic() + 120
        answer = ask(url)
        while "42" not in answer:
            assert time.monotonic() < deadline, f"the edit never showed: {answer!r}"
            time.sleep(0.2)
            answer = ask(url)
        assert "31" not in answer and "[1]" in answer
