"""The git source end to end: the real sync flow (bytewax + docling + MiniLM + Qdrant Edge +
tantivy) over a real repository made here with dulwich, at a ref.

One commit edits a paragraph of one file and deletes another: the next sync re-embeds only
the edited file's changed chunks and tombstones exactly the deleted file's, `verify` is clean,
and an answer cites the path and the commit it was read at. A branch reset is one more
change, and bad input (an unknown ref, a path that is no repository) is a one-line error.
`watch` polls the ref and follows commits and resets.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ragstream.client import Client
from ragstream.connectors import git
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.service import audit, ingest
from tests.harness.gitrepo import GitRepo

pytestmark = pytest.mark.slow  # three syncs with docling + MiniLM

CLI = str(Path(sys.executable).parent / "ragstream")
EDITED = "docs/chunking.md"
DELETED = "docs/ocr.md"
KEPT = "notes.txt"
OLD = "To enable both flexibility for downstream applications and out-of-the-box utility,"
NEW = "To enable flexibility for pelican migration analytics and out-of-the-box utility,"


def _hashes(settings: Settings, doc_id: str) -> set[str]:
    with open_runtime(settings) as rt:
        return {c.content_hash for c in rt.vectors.live_chunks(doc_id)}


def test_git_source_end_to_end(tmp_path: Path, shared_docs: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.write(EDITED, (shared_docs / "md/docling_concepts_chunking.md").read_text())
    repo.write(DELETED, (shared_docs / "md/docling_concepts_OCR.md").read_text())
    repo.write(KEPT, "Release notes: the orchard opens in May.\n")
    first = repo.commit("first")
    settings = Settings(data_dir=tmp_path / "data", sync={"mass_delete_min_docs": 100})
    spec = f"{repo.url}@main"

    report = ingest.sync([spec], settings=settings)
    assert (report.docs_changed, report.dead_letters) == (3, [])
    name = repo.root.name
    edited, deleted = f"{name}:{EDITED}", f"{name}:{DELETED}"
    before = _hashes(settings, edited)
    deleted_chunks = len(_hashes(settings, deleted))

    text = (repo.root / EDITED).read_text()
    assert OLD in text
    repo.write(EDITED, text.replace(OLD, NEW))
    repo.remove(DELETED)
    second = repo.commit("edit one paragraph, delete the OCR page")

    reads = git.blob_reads()
    report = ingest.sync([spec], settings=settings)
    assert git.blob_reads() - reads == 1  # the edited file's blob only
    after = _hashes(settings, edited)
    new = after - before
    assert 1 <= len(new) < len(after)  # the chunk(s) the paragraph is in, not the file
    assert report.docs_changed == 1 and report.docs_deleted == 1
    assert report.chunks_embedded == len(new)
    assert report.chunks_tombstoned == len(before - after) + deleted_chunks
    assert _hashes(settings, deleted) == set()

    checked = audit.verify([spec], settings=settings)
    assert checked.ok, checked.drift

    with Client(settings=settings) as client:
        answer = client.query("pelican migration analytics")
    cites = [c for c in answer.citations if c.doc_id == edited]
    assert cites, [c.doc_id for c in answer.citations]
    assert cites[0].path == f"git+file://{repo.root}@main:{EDITED}"
    assert cites[0].file_version is not None and cites[0].file_version.commit == second
    assert cites[0].possibly_stale is False

    repo.reset_branch(first)  # a reset (force-push) is one more change
    report = ingest.sync([spec], settings=settings)
    assert report.docs_changed == 2  # the edit undone, the deleted file back
    assert report.chunks_embedded == 0  # every vector reused from its tombstone
    assert _hashes(settings, deleted) and _hashes(settings, edited) == before
    assert audit.verify([spec], settings=settings).ok


def test_unknown_ref_and_non_repository_are_clear_errors(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.write("a.md", "# A\n\nSome text.\n")
    repo.commit()
    (tmp_path / "plain").mkdir()
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(InvalidRequestError, match="unknown ref 'nope'"):
        ingest.sync([f"{repo.url}@nope"], settings=settings)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    for spec, says in (
        (f"{repo.url}@nope", "unknown ref 'nope'"),
        (f"git+file://{tmp_path / 'plain'}@main", "is not a git repository"),
    ):
        done = subprocess.run(
            [CLI, "sync", spec, "--data-dir", str(tmp_path / "data")],
            env=clean, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == InvalidRequestError.exit_code, done.stderr
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and says in lines[0], done.stderr
        assert "Traceback" not in done.stderr


def test_watch_polls_the_ref_and_follows_commits_and_resets(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "notes")
    repo.write("a.md", "# Alpha\n\nThe first note talks about apples and pears.\n")
    first = repo.commit()
    env = dict(os.environ, RAGSTREAM_SYNC__GIT_POLL_S="0.2", RAGSTREAM_SYNC__DEBOUNCE_MS="50")
    args = [sys.executable, "-m", "ragstream.cli", "watch", f"{repo.url}@main"]
    proc = subprocess.Popen(
        [*args, "--data-dir", str(tmp_path / "data"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    lines: queue.Queue[dict] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        assert _next(lines, "notes:a.md")["chunks_embedded"] == 1
        repo.write("b.md", "# Beta\n\nA second note about bananas.\n")
        repo.commit("add b")
        assert _next(lines, "notes:b.md")["chunks_embedded"] == 1
        repo.reset_branch(first)  # b.md leaves the tree
        assert _next(lines, "notes:b.md")["deleted"] is True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert lines.empty(), "a.md never changed: it is not read again"


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[dict]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            lines.put(json.loads(line))


def _next(lines: queue.Queue[dict], doc_id: str, timeout: float = 120) -> dict:
    item = lines.get(timeout=timeout)
    assert item["doc_id"] == doc_id, item
    return item
