"""A deleted chunk of a file whose permissions are mirrored stays deleted for every principal
through the real flows: an edit tombstones the old text, a chmod then widens who may read
the file (a re-stamp of its live chunks), and neither the user who could always read it nor
the one who now may gets the old text back from either leg (the dense search and the BM25
leg), whose principal filter sends no status condition."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.vector_stores import BaseQdrantStore
from ragstream.core.permissions import principal_of
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.service.stores import open_stores
from tests.harness.users import cat_readable, real_users, shared_root

pytestmark = pytest.mark.slow

BEFORE = (
    "# Survey\n\nThe quartz reading of the north ridge survey.\n\n"
    "## Basalt\n\nThe basalt sample of the survey was lost in the valve room.\n"
)
AFTER = "# Survey\n\nThe quartz reading of the north ridge survey.\n"
DOC = "docs:survey.md"


def leg_texts(settings: Settings, user: str) -> tuple[list[str], list[str]]:
    """The texts of the survey's chunks `user`'s readers let each leg's search return."""
    readers = settings.readers_of(principal_of(user))
    flt = SearchFilter(readers=readers, doc_ids=(DOC,))
    with open_stores(settings) as (vectors, lexical):
        assert isinstance(vectors, BaseQdrantStore)
        query = [1.0] * vectors.embedder.dimension
        dense = [h.chunk.text for h in vectors.search(query, 100, flt)]
        bm25 = [h.chunk.text for h in lexical.search("basalt sample quartz survey", 100, flt)]
    return dense, bm25


def test_an_edited_away_chunk_stays_hidden_through_a_restamp(tmp_path: Path) -> None:
    real_users()
    alice, bob = "rsperm_alice", "rsperm_bob"
    base = shared_root()
    try:
        docs = base / "docs"
        docs.mkdir()
        docs.chmod(0o755)
        note = docs / "survey.md"
        note.write_text(BEFORE)
        shutil.chown(note, alice, alice)
        note.chmod(0o600)
        settings = Settings(
            data_dir=tmp_path / "data",
            embedder="static",
            sources=[FolderConfig(name="docs", root=docs, permissions="posix")],
        )
        api.sync([docs], settings=settings)
        assert any("basalt" in t for t in leg_texts(settings, alice)[1])
        note.write_text(AFTER)  # the basalt paragraph's chunk is tombstoned
        assert api.sync([docs], settings=settings).chunks_tombstoned >= 1
        note.chmod(0o644)  # bob may read it now: a re-stamp, nothing embedded
        report = api.sync([docs], settings=settings)
        assert report.chunks_restamped >= 1 and report.chunks_embedded == 0
        assert cat_readable(bob, note)
        for user in (alice, bob):
            dense, bm25 = leg_texts(settings, user)
            assert dense and bm25, user  # the live text is theirs
            assert not any("basalt" in t for t in dense + bm25), user
            with Client(settings=settings, principal=user) as client:
                got = client.retrieve("basalt sample", k=5, n=100, filters={"doc_ids": [DOC]})
            assert not any("basalt" in r.text for r in got.results), user
        with Client(settings=settings) as holder:  # the tombstone is still held, for GC
            assert holder.status().chunks_deleted >= 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
