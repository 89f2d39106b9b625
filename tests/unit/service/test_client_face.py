"""The Python face: `Client` and `AsyncClient` expose the same methods; the local and remote
indexes satisfy the one `IndexService` protocol with the same signatures; and a local
status opens the stores without loading a model."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragstream.client import AsyncClient, Client
from ragstream.service.base import IndexService
from ragstream.service.local import LocalIndex
from ragstream.service.remote import AsyncRemoteIndex, RemoteIndex

REPO = Path(__file__).resolve().parents[3]


def _shape(cls: type) -> dict[str, Any]:
    """Each public name: 'property', or its parameters (name, kind, default)."""
    shape: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            shape[name] = "property"
        elif callable(member):
            params = inspect.signature(member).parameters.values()
            shape[name] = [(p.name, p.kind, p.default) for p in params]
    return shape


def test_client_and_async_client_expose_the_same_methods_and_signatures() -> None:
    assert _shape(Client) == _shape(AsyncClient)


@pytest.mark.parametrize("implementation", [LocalIndex, RemoteIndex, AsyncRemoteIndex])
def test_every_index_has_the_protocols_methods_with_its_signatures(implementation: type) -> None:
    protocol = _shape(IndexService)
    got = _shape(implementation)
    if implementation is AsyncRemoteIndex:  # asyncio's name for close
        got["close"] = got.pop("aclose")
    assert {name: got.get(name) for name in protocol} == protocol


def test_the_client_offers_every_method_of_the_protocol() -> None:
    protocol = _shape(IndexService)
    assert {name: _shape(Client).get(name) for name in protocol} == protocol


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two short files indexed with the static embedder (the cheapest real one)."""
    from ragstream import api
    from ragstream.core.settings import load_settings

    root = tmp_path_factory.mktemp("face")
    docs, data = root / "docs", root / "data"
    docs.mkdir()
    (docs / "a.md").write_text("# Leave\n\nStaff take leave in August.\n")
    (docs / "b.md").write_text("# Valves\n\nValve 17 was replaced after corrosion.\n")
    settings = load_settings(data, embedder="static")
    report = api.sync([docs], settings=settings)
    assert report.docs_seen == 2
    return data


@pytest.mark.slow
def test_a_local_status_loads_no_model(small_index: Path) -> None:
    probe = (
        "import json, sys\n"
        "from ragstream import Client\n"
        f"with Client(data_dir={str(small_index)!r}) as c:\n"
        "    report = c.status()\n"
        "    mode = c.mode\n"
        "heavy = ('torch', 'onnxruntime', 'sentence_transformers', 'transformers', 'tokenizers')\n"
        "print(json.dumps({'mode': mode, 'docs': report.docs, "
        "'loaded': [m for m in heavy if m in sys.modules]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"mode": "embedded", "docs": 2, "loaded": []}


@pytest.mark.slow
def test_a_local_index_answers_after_its_status_and_keeps_its_counts(small_index: Path) -> None:
    """The query models load on the first question; the stores are reopened with them."""
    with Client(data_dir=small_index) as client:
        before = client.status()
        answer = client.query("Which valve was replaced?")
        after = client.status()
        ledger = client.files()
    assert before.chunks_live == after.chunks_live > 0
    assert answer.refusal is None and any("b.md" in c.path for c in answer.citations)
    assert sorted(r.doc_id.rsplit(":", 1)[-1] for r in ledger) == ["a.md", "b.md"]
