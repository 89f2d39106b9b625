"""The S3 source end to end: the real sync flow (bytewax + docling + MiniLM + Qdrant Edge +
tantivy) over a prefix of a bucket in moto's S3 server on loopback.

An overwrite of one object and a delete of another re-embed only the overwritten object's
changed chunks and tombstone exactly the deleted one's; a copied object re-embeds nothing;
an answer cites `s3://bucket/key` with the ETag it was read at, and object metadata is a
filterable field. The server going away between the listing and the reads loses nothing:
the documents are not recorded as read, and the next sync converges. Run from the CLI with
the keys in the environment, no secret reaches the data dir or the output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragstream.client import Client
from ragstream.connectors.source_input import ScanSummary
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.service import audit, ingest
from tests.harness.s3server import S3Server

pytestmark = pytest.mark.slow  # four syncs with docling + MiniLM

CLI = str(Path(sys.executable).parent / "ragstream")
PREFIX = "team/docs/"
EDITED, DELETED, KEPT = "chunking.md", "ocr.md", "notes.txt"
OLD = "To enable both flexibility for downstream applications and out-of-the-box utility,"
NEW = "To enable flexibility for pelican migration analytics and out-of-the-box utility,"


def _hashes(settings: Settings, doc_id: str) -> set[str]:
    with open_runtime(settings) as rt:
        return {c.content_hash for c in rt.vectors.live_chunks(doc_id)}


def test_s3_source_end_to_end(tmp_path: Path, shared_docs: Path, s3: S3Server) -> None:
    text = (shared_docs / "md/docling_concepts_chunking.md").read_text()
    bucket = s3.bucket(
        {EDITED: text, DELETED: (shared_docs / "md/docling_concepts_OCR.md").read_text()},
        prefix=PREFIX,
    )
    s3.put(bucket, PREFIX + KEPT, "Release notes: the orchard opens in May.\n", team="orchard")
    settings = Settings(data_dir=tmp_path / "data", sync={"mass_delete_min_docs": 100})
    spec = f"s3://{bucket}/{PREFIX}"
    report = ingest.sync([spec], settings=settings)
    assert (report.docs_changed, report.dead_letters) == (3, [])
    edited, deleted, copy = (f"docs:{rel}" for rel in (EDITED, DELETED, f"copy/{KEPT}"))
    before = _hashes(settings, edited)
    deleted_chunks = len(_hashes(settings, deleted))

    assert OLD in text
    s3.put(bucket, PREFIX + EDITED, text.replace(OLD, NEW))
    s3.client().delete_object(Bucket=bucket, Key=PREFIX + DELETED)
    s3.client().copy_object(
        Bucket=bucket, Key=f"{PREFIX}copy/{KEPT}", CopySource=f"{bucket}/{PREFIX}{KEPT}"
    )
    report = ingest.sync([spec], settings=settings)
    after = _hashes(settings, edited)
    new = after - before
    assert 1 <= len(new) < len(after)  # the chunk(s) the paragraph is in, not the object
    assert (report.docs_changed, report.docs_deleted) == (2, 1)  # the overwrite and the copy
    assert report.chunks_embedded == len(new)  # the copy's chunk is reused, not re-embedded
    assert report.chunks_tombstoned == len(before - after) + deleted_chunks
    assert _hashes(settings, deleted) == set() and len(_hashes(settings, copy)) == 1
    assert audit.verify([spec], settings=settings).ok

    etag = s3.client().head_object(Bucket=bucket, Key=PREFIX + EDITED)["ETag"].strip('"')
    with Client(settings=settings) as client:
        answer = client.query("pelican migration analytics")
        cites = [c for c in answer.citations if c.doc_id == edited]
        assert cites, [c.doc_id for c in answer.citations]
        assert cites[0].path == f"s3://{bucket}/{PREFIX}{EDITED}"
        assert cites[0].file_version is not None and cites[0].file_version.digest == etag
        assert cites[0].possibly_stale is False  # asked of the source the data dir recorded
        found = client.retrieve("orchard opens in May", k=10, filter="team = orchard")
        assert {r.doc_id for r in found.results} == {f"docs:{KEPT}", copy}


def test_the_server_going_away_mid_sync_loses_nothing(tmp_path: Path, s3: S3Server) -> None:
    bucket = s3.bucket({f"n{i}.md": f"# Note {i}\n\nKestrel note {i}.\n" for i in range(3)})
    settings = Settings(data_dir=tmp_path / "data")
    spec = f"s3://{bucket}"

    def outage(summary: ScanSummary) -> None:  # listed; the reads find no server
        s3.stop()

    try:
        report = ingest.sync([spec], settings=settings, on_scan=outage)
    finally:
        s3.start()
    assert report.docs_changed == 0 and len(report.dead_letters) == 3
    assert all("cannot be read" in d.reason for d in report.dead_letters)
    report = ingest.sync([spec], settings=settings)  # the store is back: it converges
    assert (report.docs_changed, report.dead_letters) == (3, [])
    assert audit.verify([spec], settings=settings).ok
    assert ingest.sync([spec], settings=settings).docs_changed == 0


def test_no_secret_reaches_the_data_dir_or_the_output(tmp_path: Path, s3: S3Server) -> None:
    bucket = s3.bucket({"a.md": "# A\n\nApples grow in the orchard.\n"}, prefix="docs/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(s3.environment())
    data = tmp_path / "data"
    runs = [
        [CLI, "sync", f"s3://{bucket}/docs", "--data-dir", str(data), "--json"],
        [CLI, "query", "what grows in the orchard?", "--data-dir", str(data), "--json"],
        [CLI, "snapshot", "create", "--data-dir", str(data)],
        [CLI, "config", "--data-dir", str(data)],
    ]
    output = ""
    for args in runs:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        output += done.stdout + done.stderr
    assert f"s3://{bucket}/docs/a.md" in output and s3.secret not in output
    files = [p for p in data.rglob("*") if p.is_file()]
    assert any("snapshot" in str(p) for p in files)  # the snapshot is searched too
    assert [p for p in files if s3.secret.encode() in p.read_bytes()] == []
