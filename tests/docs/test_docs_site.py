"""The documentation site: it builds strictly (the fixture), every page of the nav is in it,
the API reference lists every public class and function of the documented modules and each
has a docstring, the HTTP reference carries the app's OpenAPI schema, no page or stylesheet
points at an asset off the machine, and the TOML examples of the guides load as settings."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# the modules the reference documents: page (under docs/reference/) -> modules
REFERENCE = {
    "ragstream": ["ragstream", "ragstream.api"],
    "client": ["ragstream.client"],
    "answers": ["ragstream.core.answers"],
    "models": ["ragstream.core.models"],
    "errors": ["ragstream.core.errors"],
    "settings": ["ragstream.core.settings"],
}
# what `ragstream.api` exports (the package's names; its other helpers are the CLI's)
API_NAMES = {"sync", "watch", "gc", "load_settings"}
CLIENT_NAMES = {"Client", "AsyncClient", "status"}
ASSET = re.compile(
    r"<(?:script|img|source|iframe)\b[^>]*\bsrc=\"([^\"]+)\""
    r"|<link\b[^>]*\bhref=\"([^\"]+)\"[^>]*>"
)
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)|@import\s+['\"]([^'\"]+)")
OFF_MACHINE = re.compile(r"^(?:https?:)?//", re.IGNORECASE)


def nav_pages() -> list[str]:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(items: Any) -> Iterator[str]:
        for item in items:
            if isinstance(item, str):
                yield item
            else:
                for value in item.values():
                    yield from (walk(value) if isinstance(value, list) else [value])

    return list(walk(config["nav"]))


def html_of(site: Path, page: str) -> Path:
    stem = page.removesuffix(".md")
    if stem == "index":
        return site / "index.html"
    if stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"


def public_members(module: str) -> Iterator[griffe.Object]:
    """Public classes and functions of a module, and the public methods of its classes."""
    loaded = griffe.load(module, search_paths=[str(REPO)])
    assert isinstance(loaded, griffe.Module)
    for name, member in loaded.members.items():
        if name.startswith("_") or member.is_alias:
            continue
        if module == "ragstream.api" and name not in API_NAMES:
            continue
        if module == "ragstream.client" and name not in CLIENT_NAMES:
            continue
        if isinstance(member, griffe.Class):
            yield member
            for method_name, method in member.members.items():
                if isinstance(method, griffe.Function) and not method_name.startswith("_"):
                    yield method
        elif isinstance(member, griffe.Function):
            yield member


def test_every_page_of_the_nav_is_built(built_site: Path) -> None:
    pages = nav_pages()
    assert len(pages) >= 30 and "benchmarks.md" in pages and "architecture.md" in pages
    missing = [p for p in pages if not html_of(built_site, p).is_file()]
    assert missing == []
    for page in pages:
        assert (DOCS / page).is_file(), f"{page} is in the nav but not in docs/"


def test_every_markdown_page_is_in_the_nav() -> None:
    pages = set(nav_pages())
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert written - pages == set(), "add these pages to mkdocs.yml's nav"


@pytest.mark.parametrize("page", sorted(REFERENCE))
def test_the_reference_lists_every_public_class_and_function(built_site: Path, page: str) -> None:
    html = (built_site / "reference" / page / "index.html").read_text(encoding="utf-8")
    members = [m for module in REFERENCE[page] for m in public_members(module)]
    assert members or page == "ragstream"
    absent = [m.path for m in members if f'id="{m.path}"' not in html]
    assert absent == [], f"reference/{page} does not list {absent}"


@pytest.mark.parametrize("module", sorted({m for ms in REFERENCE.values() for m in ms}))
def test_every_documented_public_name_has_a_docstring(module: str) -> None:
    loaded = griffe.load(module, search_paths=[str(REPO)])
    assert loaded.docstring is not None and loaded.docstring.value.strip()
    undocumented = [
        m.path for m in public_members(module) if m.docstring is None or not m.docstring.value
    ]
    assert undocumented == [], f"no docstring: {undocumented}"


def test_the_http_reference_holds_the_apps_openapi_schema(built_site: Path) -> None:
    from ragstream.core.settings import Settings
    from ragstream.http.app import create_app
    from ragstream.http.deps import Serving

    exported = json.loads((built_site / "reference" / "openapi.json").read_text("utf-8"))
    app_schema = create_app(Serving(Settings(data_dir=REPO / "does-not-exist"))).openapi()
    assert exported["paths"].keys() == app_schema["paths"].keys()
    assert {"/v1/query", "/v1/retrieve", "/v1/ready"} <= exported["paths"].keys()
    page = (built_site / "reference" / "http" / "index.html").read_text(encoding="utf-8")
    assert "openapi-routes" not in page and 'href="../openapi.json"' in page
    assert "http://127.0.0.1:8765/docs" in page
    for path in exported["paths"]:
        assert f"{path}</code>" in page, f"{path} missing from the route table"


def test_no_page_or_stylesheet_loads_an_asset_off_the_machine(built_site: Path) -> None:
    found = []
    for html in built_site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        for match in ASSET.finditer(text):
            tag, url = match.group(0), match.group(1) or match.group(2)
            if url and OFF_MACHINE.match(url) and 'rel="canonical"' not in tag:
                found.append(f"{html.relative_to(built_site)}: {url}")
        assert "fonts.googleapis" not in text and "googletagmanager" not in text
    for css in built_site.rglob("*.css"):
        for match in CSS_URL.finditer(css.read_text(encoding="utf-8")):
            url = match.group(1) or match.group(2)
            if OFF_MACHINE.match(url.strip()):
                found.append(f"{css.relative_to(built_site)}: {url}")
    assert found == []
    assert (built_site / "search" / "search_index.json").is_file()


@pytest.mark.parametrize(
    "page", ["guide/settings.md", "guide/security-and-tenants.md", "guide/permissions.md"]
)
def test_the_toml_examples_of_the_guides_load_as_settings(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragstream.core.settings import Settings

    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        tomllib.loads(block)
        config = tmp_path / "ragstream.toml"
        config.write_text(block, encoding="utf-8")
        monkeypatch.setenv("RAGSTREAM_CONFIG", str(config))
        settings = Settings()
        assert settings.sources and settings.server.api_keys
