"""Scale-out ingest: N sync replicas against one Qdrant store, each owning the
documents whose `partition_of(doc_id, N)` is its index.

The partition function is pure (stable across processes and hash seeds, total, disjoint).
End to end on real files, through qdrant-client's local mode with the sparse BM25 leg (the
server code path; local mode holds one process at a time, so the replicas run one after the
other on the same store): partition 0 then 1 build exactly the index of one unpartitioned
sync; an edit and a delete are applied only by the replica that owns the document, never
by the other (whose catch-up must not take a document it does not own for deleted).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream import api
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import partition_of
from ragstream.core.settings import Settings
from ragstream.flows.sync import sync_partition
from tests.harness.chaos import index_mismatches, read_index, reference_view

REPO = Path(__file__).resolve().parents[2]


@given(st.text(min_size=1, max_size=40), st.integers(1, 9))
def test_every_document_has_exactly_one_partition(doc: str, count: int) -> None:
    owners = [i for i in range(count) if partition_of(doc, count) == i]
    assert owners == [partition_of(doc, count)] and 0 <= owners[0] < count
    assert partition_of(doc, 1) == 0


def test_partitions_are_stable_across_processes_and_spread_documents() -> None:
    docs = [f"docs:folder/file-{i}.md" for i in range(400)]
    here = [partition_of(d, 3) for d in docs]
    assert {here.count(i) for i in range(3)} <= set(range(100, 170))  # about a third each
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from core.ids import partition_of as p; "
         "print(' '.join(str(p(d, 3)) for d in sys.argv[1:]))", *docs],
        cwd=REPO, capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONHASHSEED="7"),
    )  # fmt: skip
    assert other.stdout.split() == [str(x) for x in here]


def test_a_partitioned_sync_needs_one_shared_store_for_both_legs(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="must be < count"):
        sync_partition(
            Settings(data_dir=tmp_path, sync={"partition_index": 2, "partition_count": 2})
        )
    embedded = Settings(data_dir=tmp_path, sync={"partition_count": 2})
    with pytest.raises(InvalidRequestError, match="single owner"):
        sync_partition(embedded)
    tantivy = Settings(
        data_dir=tmp_path, store={"vector_backend": "qdrant", "lexical_backend": "tantivy"},
        sync={"partition_count": 2},
    )  # fmt: skip
    with pytest.raises(InvalidRequestError, match="sparse"):
        sync_partition(tantivy)
    server = Settings(
        data_dir=tmp_path, store={"vector_backend": "qdrant", "lexical_backend": "sparse"},
        sync={"partition_index": 1, "partition_count": 2},
    )  # fmt: skip
    assert sync_partition(server) == (1, 2)
    assert sync_partition(Settings(data_dir=tmp_path)) == (0, 1)


@pytest.mark.slow
def test_replicas_build_the_unpartitioned_index_and_own_their_documents(
    tmp_path: Path, shared_docs: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy2(shared_docs / "md/docling_faq_index.md", folder / "faq.md")
    shutil.copy2(shared_docs / "html/python311_tutorial_appetite.html", folder / "appetite.html")
    for i in range(8):
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nTopic {i}: " + "words " * (20 + i))
    data = tmp_path / "data"

    def replica(index: int) -> Settings:
        settings = Settings(
            data_dir=data, store={"vector_backend": "qdrant", "lexical_backend": "sparse"},
            sync={"partition_index": index, "partition_count": 2},
        )  # fmt: skip
        return settings.with_paths([folder])

    def owner(name: str) -> int:
        return partition_of(f"docs:{name}", 2)

    names = sorted(p.name for p in folder.iterdir())
    assert {owner(n) for n in names} == {0, 1}  # both replicas have work
    first = api.sync([folder], settings=replica(0))
    assert first.docs_seen == sum(owner(n) == 0 for n in names)
    api.sync([folder], settings=replica(1))
    whole = replica(0)
    whole = whole.model_copy(update={"sync": whole.sync.model_copy(update={"partition_count": 1})})
    reference = reference_view([folder], tmp_path / "reference")
    assert index_mismatches(read_index(whole), reference) == []

    edited = next(n for n in names if n.startswith("note") and owner(n) == 0)
    deleted = next(n for n in names if n.startswith("note") and owner(n) == 1)
    (folder / edited).write_text("# Edited\n\nA new paragraph about zebrafish.")
    (folder / deleted).unlink()
    api.sync([folder], settings=replica(1))  # owns the deleted file only
    view = read_index(whole)
    assert f"docs:{deleted}" not in view.docs
    assert "zebrafish" not in repr(view.docs[f"docs:{edited}"])
    api.sync([folder], settings=replica(1))  # again: the other's edit is still not its business
    assert read_index(whole).docs[f"docs:{edited}"] == view.docs[f"docs:{edited}"]
    api.sync([folder], settings=replica(0))
    reference = reference_view([folder], tmp_path / "reference-2")
    assert index_mismatches(read_index(whole), reference) == []
