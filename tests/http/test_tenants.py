"""Tenant isolation: randomized queries never see another tenant's chunks; keys map to tenants."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import StorePairing
from ragstream import api
from ragstream.connectors.protocols import SearchFilter
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex

pytestmark = pytest.mark.slow  # 1,000 randomized queries, both pairings

TENANTS = ("acme", "globex", "initech")
VOCAB = [
    "invoice",
    "ledger",
    "budget",
    "audit",
    "payroll",
    "merger",
    "patent",
    "roadmap",
    "outage",
    "incident",
    "customer",
    "churn",
    "pricing",
    "forecast",
    "vendor",
    "contract",
    "renewal",
    "security",
    "breach",
    "launch",
]


# randomized query runs per pairing: rank-bm25 scores every document per query (slower)
RUNS = {"edge": 1000, "qdrant": 150}


@pytest.fixture(scope="module")
def engine(
    store_pairing: StorePairing, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[QueryEngine, int]]:
    vector, lexical = store_pairing
    runs = RUNS[vector]
    rng = random.Random(11)
    base = tmp_path_factory.mktemp("tenants")
    sources = []
    for tenant in TENANTS:
        root = base / tenant
        root.mkdir()
        for i in range(8):  # every tenant writes about the same topics
            words = " ".join(rng.choice(VOCAB) for _ in range(40))
            (root / f"doc{i}.md").write_text(f"# {tenant} report {i}\n\n{words}.\n")
        sources.append(FolderConfig(name=tenant, root=root, tenant=tenant))
    settings = Settings(
        data_dir=base / "data",
        store={"vector_backend": vector, "lexical_backend": lexical},
        sources=sources,
        server={"api_keys": {f"key-{t}": t for t in TENANTS}},
    )
    api.sync([s.root for s in sources], settings=settings)
    with QueryEngine.open(settings) as eng:
        yield eng, runs


def test_randomized_queries_never_leak(engine: tuple[QueryEngine, int]) -> None:
    """Both legs, straight at the stores (the filter is theirs); query vectors are cached."""
    eng, runs = engine
    rng = random.Random(5)
    leaks = returned = 0
    vectors: dict[str, list[float]] = {}
    for _ in range(runs):
        tenant = rng.choice(TENANTS)
        query = " ".join(rng.sample(VOCAB, rng.randint(1, 4)))
        if query not in vectors:
            vectors[query] = eng.retriever.embedder.encode_query(query)
        flt = SearchFilter(tenants=(tenant,))
        n = rng.choice([5, 20, 50])
        hits = eng.retriever.vectors.search(vectors[query], n, flt)
        hits += eng.retriever.lexical.search(query, n, flt)
        returned += len(hits)
        leaks += sum(h.chunk.tenant != tenant for h in hits)
    assert returned > runs  # the queries do match something
    assert leaks == 0


def post(url: str, body: dict, key: str | None, path: str = "/v1/query") -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_api_keys_decide_the_tenant_server_side(engine: tuple[QueryEngine, int]) -> None:
    eng, _ = engine
    with serving(Serving(eng.settings, ServedIndex(eng)), "127.0.0.1", 0) as url:
        query = {"query": "invoice audit payroll", "generate": False}
        assert post(url, query, None)[0] == 401
        assert post(url, query, "key-unknown")[0] == 401
        for tenant in TENANTS:
            status, answer = post(url, query, f"key-{tenant}")
            assert status == 200 and answer["candidates"]
            assert {c["doc_id"].split(":")[0] for c in answer["candidates"]} == {tenant}
        widened = {**query, "tenants": ["acme", "globex"]}  # the body cannot choose tenants
        status, err = post(url, widened, "key-initech")
        assert status == 422 and err["error"] == "invalid request"
        assert post(url, {"query": ""}, "key-acme")[0] == 422
        retrieved = post(url, query, "key-acme", path="/v1/retrieve")
        assert retrieved[0] == 200 and retrieved[1]["results"]
        assert {r["doc_id"].split(":")[0] for r in retrieved[1]["results"]} == {"acme"}


def test_the_ledger_is_tenant_scoped_and_verify_needs_an_admin_key(
    engine: tuple[QueryEngine, int],
) -> None:
    eng, _ = engine
    server = eng.settings.server.model_copy(update={"admin_api_keys": ["key-acme"]})
    settings = eng.settings.model_copy(update={"server": server})

    def get(url: str, path: str, key: str) -> tuple[int, Any]:
        req = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    with serving(Serving(settings, ServedIndex(eng)), "127.0.0.1", 0) as url:
        for tenant in TENANTS:
            status, records = get(url, "/v1/files", f"key-{tenant}")
            assert status == 200 and len(records) == 8
            assert {r["source"] for r in records} == {tenant}
            assert {r["state"] for r in records} == {"indexed"}
        assert get(url, "/v1/files?state=dead", "key-globex") == (200, [])
        assert get(url, "/v1/files?state=nope", "key-globex")[0] == 422
        own = "/v1/files/" + urllib.parse.quote("acme:doc3.md", safe="")
        status, detail = get(url, own, "key-acme")
        assert status == 200 and detail["record"]["doc_id"] == "acme:doc3.md"
        assert detail["chunks"] and all(c["in_bm25"] for c in detail["chunks"])
        # another tenant's file is "not found", exactly like a file that does not exist
        hidden, absent = get(url, own, "key-globex"), get(url, "/v1/files/acme%3Ano.md", "key-acme")
        assert hidden[0] == absent[0] == 404
        assert hidden[1]["code"] == absent[1]["code"] == "not_found"
        assert get(url, "/v1/eval", "key-globex")[0] == 403  # eval reports: admin only
        assert get(url, "/v1/eval", "key-acme") == (200, [])  # none saved for this data dir
        assert get(url, "/v1/verify", "key-globex")[0] == 403  # not an admin key
        status, report = get(url, "/v1/verify", "key-acme")
        assert status == 200 and report["ok"] and report["docs_checked"] == 8 * len(TENANTS)


def test_a_tenant_keys_status_counts_its_own_documents_and_chunks(
    engine: tuple[QueryEngine, int],
) -> None:
    """`/v1/status` with a tenant's key counts the documents and chunks (both legs) that its
    own ledger lists, counted by the stores under the tenant filter; the operator's, all."""
    eng, _ = engine

    def get(url: str, path: str, key: str) -> Any:
        req = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    with serving(Serving(eng.settings, ServedIndex(eng)), "127.0.0.1", 0) as url:
        everything = ServedIndex(eng).status()  # the operator's view (no key)
        own_chunks = []
        for tenant in TENANTS:
            ledger = get(url, "/v1/files", f"key-{tenant}")
            report = get(url, "/v1/status", f"key-{tenant}")
            chunks = sum(r["chunks"] for r in ledger)
            assert report["docs"] == len(ledger) == 8, tenant
            assert report["chunks_live"] == report["lexical_live"] == chunks, tenant
            assert report["chunks_deleted"] == 0
            own_chunks.append(chunks)
    assert everything.docs == 8 * len(TENANTS)
    assert everything.chunks_live == everything.lexical_live == sum(own_chunks)


def test_a_tenant_sees_its_own_dead_letters_and_none_of_the_operators_warnings() -> None:
    from ragstream.core.models import DeadLetter, StatusReport
    from ragstream.service.served import for_tenants

    settings = Settings(
        sources=[
            FolderConfig(name="acme", root="/srv/acme", tenant="acme"),
            FolderConfig(name="initech", root="/srv/initech", tenant="initech"),
        ]
    )
    letters = [
        DeadLetter(
            doc_id=f"{src}:bad.pdf", path=f"/srv/{src}/bad.pdf", stage="parse", reason="x", at=0.0
        )
        for src in ("acme", "initech")
    ]
    report = StatusReport(
        docs=2, chunks_live=4, chunks_deleted=0, lexical_live=4, embedder=None,
        collection=None, last_sync=None, dead_letters=letters,
        warnings=["the answerability decision in /srv/models/judge was fitted on ..."],
    )  # fmt: skip
    seen = for_tenants(report, settings.sources_of(("acme",)))
    assert [d.doc_id for d in seen.dead_letters] == ["acme:bad.pdf"]
    assert seen.warnings == [] and report.warnings  # the operator's own view keeps them
