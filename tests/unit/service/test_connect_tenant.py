"""`connect(tenant=...)` scopes the index on the service protocol itself: embedded, one
open data dir answers every call (ledger, status, fields, search, answers) as that tenant
sees it and refuses what a server keeps for admin keys; over HTTP, the tenant's requests
carry the key `server.api_keys` maps to it, and no key is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.client import Client
from ragstream.core.errors import ForbiddenError, InvalidRequestError
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.service import ingest
from ragstream.service.connect import connect

pytestmark = pytest.mark.slow  # one sync, one query model load

TEXTS = {
    "acme": ("tea.md", "# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n"),
    "globex": ("coffee.md", "# Coffee\n\nEspresso is brewed at nine bars of pressure.\n"),
}


def _two_tenants(tmp_path: Path) -> Settings:
    sources = []
    for tenant, (name, text) in TEXTS.items():
        (tmp_path / tenant).mkdir()
        (tmp_path / tenant / name).write_text(text)
        sources.append(FolderConfig(name=tenant, root=tmp_path / tenant, tenant=tenant))
    settings = Settings(
        data_dir=tmp_path / "data", sources=sources, server={"api_keys": {"k-acme": "acme"}}
    )
    assert ingest.sync([], settings=settings).chunks_live == 2
    return settings


def test_an_embedded_index_answers_as_the_tenant_it_was_connected_as(tmp_path: Path) -> None:
    settings = _two_tenants(tmp_path)
    with connect(settings=settings, tenant="acme") as index:
        assert index.mode == "embedded"
        assert [f.doc_id for f in index.files()] == ["acme:tea.md"]
        assert index.status().docs == 1
        found = index.retrieve("How is espresso brewed?", k=5).results
        assert {r.doc_id for r in found} == {"acme:tea.md"}  # never globex's, however close
        answer = index.query("How is espresso brewed?")
        assert all(c.doc_id == "acme:tea.md" for c in answer.citations)
        for operator in (index.log, index.snapshots, index.reindex_status, index.verify):
            with pytest.raises(ForbiddenError, match="scoped to a tenant"):
                operator()
    with Client(settings=settings, tenant="globex") as client:  # the facade passes it on
        assert [f.doc_id for f in client.files()] == ["globex:coffee.md"]
    with connect(settings=settings) as everyone:  # the operator, unscoped
        assert sorted(f.doc_id for f in everyone.files()) == ["acme:tea.md", "globex:coffee.md"]


def test_over_http_a_tenant_needs_its_key(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", server={"api_keys": {"k-acme": "acme"}})
    url = "http://127.0.0.1:9"  # never asked: the key is checked before any request
    with pytest.raises(InvalidRequestError, match="map a key to 'globex'"):
        connect(settings=settings, url=url, tenant="globex")
    with connect(settings=settings, url=url, tenant="acme") as index:
        sent = index._options["headers"]  # type: ignore[attr-defined]
        assert index.mode == "http" and sent["Authorization"] == "Bearer k-acme"
