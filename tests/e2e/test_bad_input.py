"""Bad input through the real sync flow: a dead letter with a clear reason, nothing lost.

Every case sits next to good files in one folder; the good files index, each bad one is a
dead letter (visible in `status`), an unchanged bad file is not retried, a fixed one is.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ragstream import api
from ragstream.core.models import FileEvent, FileFingerprint
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.flows.sync import make_indexer
from ragstream.service import ingest

EXPECTED = {
    "empty.md": "empty file",
    "junk.md": "binary content",
    "truncated.pdf": "PDF",
    "random.docx": "DOCX",
    "huge.md": "file too large",
    "loop.md": "symlink loop",
    "outside.md": "leaves the watched root",
    "dangling.md": "dangling symlink",
}


def build(root: Path, outside: Path, shared_docs: Path) -> None:
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nA perfectly fine note about tea.\n")
    (root / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me is served at noon.".encode("cp1252"))
    (root / "empty.md").write_bytes(b"")
    (root / "junk.md").write_bytes(bytes(range(256)) * 8)
    pdf = (shared_docs / "pdf/docling__2305.03393v1-pg9.pdf").read_bytes()
    (root / "truncated.pdf").write_bytes(pdf[:2048])
    (root / "random.docx").write_bytes(os.urandom(3000))
    (root / "huge.md").write_text("# Big\n\n" + "word " * 5000)
    os.symlink(root / "loop2.md", root / "loop.md")
    os.symlink(root / "loop.md", root / "loop2.md")
    outside.write_text("# Outside\n\nThis file is not under the root.\n")
    os.symlink(outside, root / "outside.md")
    os.symlink(root / "nowhere.md", root / "dangling.md")


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", sync={"max_file_bytes": 20_000})


def test_bad_inputs_become_dead_letters_and_good_files_index(
    tmp_path: Path, settings: Settings, shared_docs: Path
) -> None:
    root = tmp_path / "inbox"
    build(root, tmp_path / "outside.md", shared_docs)
    report = api.sync([root], settings=settings)
    got = {Path(d.path).name: d.reason for d in report.dead_letters}
    got.pop("loop2.md", None)  # the other half of the loop: same reason
    assert set(got) == set(EXPECTED), got
    for name, fragment in EXPECTED.items():
        assert fragment in got[name], (name, got[name])
    with open_runtime(settings.with_paths([root])) as rt:
        assert rt.vectors.live_chunks("inbox:good.md")
        latin = rt.vectors.live_chunks("inbox:latin1.txt")
        assert latin and "Café crème" in latin[0].text
        assert rt.vectors.live_chunks("inbox:outside.md") == []
    status = {Path(d.path).name for d in ingest.status(settings=settings).dead_letters}
    assert set(EXPECTED) <= status

    again = api.sync([root], settings=settings)
    assert again.dead_letters == [] and again.docs_changed == 0 and again.chunks_embedded == 0

    (root / "huge.md").write_text("# Smaller now\n\nIt fits under the limit.\n")
    (root / "random.docx").unlink()
    shutil.copy(shared_docs / "docx/docling__word_tables.docx", root / "random.docx")
    fixed = api.sync([root], settings=settings)
    assert fixed.dead_letters == [] and fixed.docs_changed == 2
    left = {Path(d.path).name for d in ingest.status(settings=settings).dead_letters}
    assert "huge.md" not in left and "random.docx" not in left


def test_vanished_and_timed_out_files_are_dead_letters(tmp_path: Path, settings: Settings) -> None:
    root = tmp_path / "inbox"
    root.mkdir()
    slow = root / "slow.md"
    slow.write_text("# Slow\n\n" + "A sentence that takes a little while to parse. " * 200)
    fp = FileFingerprint(size=1, mtime_ns=1)
    events = [
        FileEvent(source="inbox", root=str(root), path=str(root / "gone.md"),
                  doc_id="inbox:gone.md", kind="upsert", fingerprint=fp),
        FileEvent(source="inbox", root=str(root), path=str(slow), doc_id="inbox:slow.md",
                  kind="upsert", fingerprint=fp),
    ]  # fmt: skip
    timed = settings.model_copy(
        update={"sync": settings.sync.model_copy(update={"parse_timeout_s": 1e-6})}
    )
    with open_runtime(timed.with_paths([root])) as rt:
        works = make_indexer(rt).parse_batch(events)
    reasons = {w.event.doc_id: w.dead.reason for w in works if w.dead is not None}
    assert "vanished" in reasons["inbox:gone.md"]
    assert "timed out" in reasons["inbox:slow.md"]
