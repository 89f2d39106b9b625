"""docs/guide/mcp.md shows each tool's schemas as the server generates them: the block
between the markers is `schema_block()`; `python tests/mcp/test_mcp_docs.py` rewrites it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragstream.mcp.server import tool_list

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "mcp.md"
BEGIN, END = "<!-- tool schemas: generated -->", "<!-- end of tool schemas -->"


def schema_block() -> str:
    parts = [BEGIN]
    for tool in tool_list():
        schema = json.dumps(tool.input_schema, indent=1, ensure_ascii=False)
        parts.append(f"### `{tool.name}`\n\n{tool.description}\n\n```json\n{schema}\n```")
    parts.append(END)
    return "\n\n".join(parts)


def test_the_page_shows_the_generated_schemas() -> None:
    text = PAGE.read_text()
    current = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert current == schema_block(), "run `python tests/mcp/test_mcp_docs.py` to regenerate"


if __name__ == "__main__":
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    PAGE.write_text(text[:start] + schema_block() + text[end:])
    sys.exit(0)
