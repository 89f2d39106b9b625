"""Snapshots of and onto a server-backed deployment (`store.qdrant_url`): embedded ->
server, server -> embedded and server -> server. After each restore the index shows 0
drift, a `sync` of the same folder embeds nothing, and the same questions get the same
answers with the same citations.

A "server" is qdrant-client's local mode in a folder of its own per URL: the client the
store opens for a URL is swapped for one on that folder, so every call goes down the server
path (`QdrantClient(url=...)` is the only line not run)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from ragstream import Client, api
from ragstream.connectors import qdrant_server
from ragstream.connectors.snapshot_files import POINTS_DIR, SHARD_SUFFIX
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings, StoreSettings
from ragstream.service import audit, snapshots
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow

DOCS = ["md/docling_integrations_langchain.md", "md/docling_integrations_haystack.md"]
QUESTIONS = ["How does docling plug into LangChain?", "How is docling used with Haystack?"]
Answers = list[tuple[str, list[tuple[str, str]]]]
Snapshotted = tuple[Path, Answers, Path]  # the file, its index's answers, the folder synced


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every Qdrant URL a store opens is a local-mode client on a folder of its own."""
    root = tmp_path_factory.mktemp("servers")
    real = QdrantClient

    def client(url: str | None = None, **kwargs: Any) -> QdrantClient:
        if url is None:
            return real(**kwargs)
        folder = root / re.sub(r"\W+", "_", url)
        folder.mkdir(exist_ok=True)
        return real(path=str(folder))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(qdrant_server, "QdrantClient", client)
        yield root


def _on(url: str | None, data_dir: Path) -> Settings:
    store = StoreSettings(vector_backend="qdrant", qdrant_url=url) if url else StoreSettings()
    return Settings(data_dir=data_dir, store=store)


def _answers(settings: Settings) -> Answers:
    with Client(settings=settings) as c:
        answers = [c.query(q) for q in QUESTIONS]
    return [(a.text, [(x.point_id, x.doc_id) for x in a.citations]) for a in answers]


def _snapshotted(folder: Path, settings: Settings, tmp: pytest.TempPathFactory) -> Snapshotted:
    with Client(settings=settings) as c:
        info = c.snapshot()
    out = tmp.mktemp("snapshot") / "snapshot.tar"
    Path(info.path).rename(out)
    return out, _answers(settings), folder


@pytest.fixture(scope="module")
def embedded(
    servers: Path, shared_docs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Snapshotted:
    """A snapshot of an embedded (Qdrant Edge) index, and its answers."""
    folder = copy_docs(shared_docs, DOCS, tmp_path_factory.mktemp("docs"), flat=True)
    settings = _on(None, tmp_path_factory.mktemp("embedded"))
    assert api.sync([folder], settings=settings).chunks_embedded > 0
    return _snapshotted(folder, settings, tmp_path_factory)


@pytest.fixture(scope="module")
def served(
    servers: Path, shared_docs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Snapshotted:
    """A snapshot of an index on the server at qdrant-a, tombstones included (a file synced
    and then removed), and its answers."""
    folder = copy_docs(shared_docs, DOCS, tmp_path_factory.mktemp("docs"), flat=True)
    settings = _on("http://qdrant-a:6333", tmp_path_factory.mktemp("served"))
    gone = folder / "gone.md"
    gone.write_text("# Gone\n\nA note on the lighthouse keeper's logbook, removed later.\n")
    assert api.sync([folder], settings=settings).chunks_embedded > 0
    gone.unlink()
    api.sync([folder], settings=settings)
    return _snapshotted(folder, settings, tmp_path_factory)


def _same_index(folder: Path, restored: Settings, answers: Answers) -> None:
    report = audit.verify([folder], settings=restored)
    assert report.ok, report.counts()
    assert _answers(restored) == answers
    again = api.sync([folder], settings=restored)
    assert again.chunks_embedded == 0 and again.docs_changed == 0


def test_a_server_snapshot_carries_its_points_and_verifies_without_the_server(
    served: Snapshotted, tmp_path: Path
) -> None:
    file, _, _ = served
    manifest = snapshots.verify(_on("http://nowhere:6333", tmp_path / "x"), file)
    points = [m.name for m in manifest.members if m.name.startswith(f"{POINTS_DIR}/")]
    assert points == [f"{POINTS_DIR}/{manifest.collection}.jsonl.gz"]
    assert manifest.counts is not None and manifest.counts.chunks_live > 0
    assert manifest.counts.chunks_deleted > 0  # the tombstones travel too
    assert not any(m.name.endswith(SHARD_SUFFIX) for m in manifest.members)


def test_embedded_to_server(embedded: Snapshotted, servers: Path, tmp_path: Path) -> None:
    file, answers, folder = embedded
    restored = _on("http://qdrant-b:6333", tmp_path / "restored")
    snapshots.restore(restored, file, restored.data_dir)
    assert not (restored.data_dir / "vectors").exists()  # the points are in the server
    assert (servers / "http_qdrant_b_6333").is_dir()
    _same_index(folder, restored, answers)


def test_server_to_embedded(served: Snapshotted, tmp_path: Path) -> None:
    file, answers, folder = served
    restored = _on(None, tmp_path / "restored")
    snapshots.restore(restored, file, restored.data_dir)
    assert not (restored.data_dir / POINTS_DIR).exists()
    assert any((restored.data_dir / "vectors").iterdir())  # Edge shards of its own
    _same_index(folder, restored, answers)


def test_server_to_server(served: Snapshotted, servers: Path, tmp_path: Path) -> None:
    file, answers, folder = served
    restored = _on("http://qdrant-c:6333", tmp_path / "restored")
    snapshots.restore(restored, file, restored.data_dir)
    assert (servers / "http_qdrant_c_6333").is_dir()
    _same_index(folder, restored, answers)


def test_a_restore_onto_a_server_that_holds_the_index_is_refused(
    served: Snapshotted, tmp_path: Path
) -> None:
    file, _, _ = served
    target = _on("http://qdrant-a:6333", tmp_path / "again")
    with pytest.raises(InvalidRequestError, match="already holds index"):
        snapshots.restore(target, file, target.data_dir)
    assert not target.data_dir.exists()
