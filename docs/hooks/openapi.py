"""MkDocs hook: the HTTP reference is the served app's own OpenAPI schema, exported at build
time. `create_app` is built over a settings object whose data dir is an empty temporary
folder (the schema does not depend on an index), its `openapi()` is written into the site as
`reference/openapi.json`, and the page `reference/http.md` gets the route table generated
from it in place of the `<!-- openapi-routes -->` marker. No socket is opened and no model is
loaded."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

SCHEMA_URI = "reference/openapi.json"
HTTP_PAGE = "reference/http.md"
MARKER = "<!-- openapi-routes -->"
METHODS = ("get", "post", "put", "patch", "delete")
_exported: dict[str, dict[str, Any]] = {}  # the schema of this build, set by on_config


def export_schema() -> dict[str, Any]:
    """The OpenAPI document of the app `ragstream serve` runs."""
    from ragstream.core.settings import Settings
    from ragstream.http.app import create_app
    from ragstream.http.deps import Serving

    with tempfile.TemporaryDirectory(prefix="ragstream-openapi-") as data_dir:
        schema: dict[str, Any] = create_app(Serving(Settings(data_dir=data_dir))).openapi()
    return schema


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _body(op: dict[str, Any]) -> str:
    content = op.get("requestBody", {}).get("content", {})
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    return f"`{ref.rsplit('/', 1)[-1]}`" if ref else ""


def route_table(schema: dict[str, Any]) -> str:
    """One row per operation: method and path, its tag, request body model and description."""
    rows = ["| route | group | body | what |", "|---|---|---|---|"]
    for path, ops in schema["paths"].items():
        for method in METHODS:
            op = ops.get(method)
            if op is None:
                continue
            what = op.get("description") or op.get("summary") or ""
            tags = ", ".join(op.get("tags", []))
            rows.append(f"| `{method.upper()} {path}` | {tags} | {_body(op)} | {_cell(what)} |")
    version = schema.get("info", {}).get("version", "")
    count = sum(1 for ops in schema["paths"].values() for m in METHODS if m in ops)
    rows.append("")
    rows.append(f"{count} operations, OpenAPI {schema.get('openapi', '')}, ragstream {version}.")
    return "\n".join(rows)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _exported["schema"] = export_schema()
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    content = json.dumps(_exported["schema"], indent=2, sort_keys=True) + "\n"
    files.append(File.generated(config, SCHEMA_URI, content=content))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri != HTTP_PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{HTTP_PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, route_table(_exported["schema"]))
