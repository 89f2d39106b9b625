"""What only the S3 source has to show, against moto's S3 server on loopback: a copy is the
same version under another key, a large (multipart) object is read whole and exactly, an
emptied prefix trips the mass-delete guard, a listing reads every key (odd names, several
pages) exactly as boto3's own parse does, a missing bucket is named, event notifications (an SQS
queue) touch each created or removed key and nothing else, an object overwritten
after the listing is not read as the listed version, user metadata reaches the document's
fields, an outage is an error that changes nothing (and the store is read again once it is
back), and without boto3 the message names the extra."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from ragstream.connectors.fs import PathFilter
from ragstream.connectors.protocols import SourceReadError, SourceUnavailable
from ragstream.connectors.s3 import S3Source
from ragstream.connectors.source_input import plan_catch_up
from ragstream.connectors.sources import changed_since, open_source
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import FileEvent
from ragstream.core.source_config import S3Config
from tests.harness.s3server import S3Server

PF = PathFilter(("**/*.md", "**/*.txt", "**/*.bin"), ())


def _source(s3: S3Server, bucket: str, prefix: str = "docs") -> S3Source:
    config = S3Config(name="b", s3=f"s3://{bucket}/{prefix}", endpoint_url=s3.endpoint)
    source = open_source(config, PF)
    assert isinstance(source, S3Source)
    return source


def _event(source: S3Source, rel: str) -> FileEvent:
    entry = next(e for e in source.entries() if e.rel == rel)
    return FileEvent(
        source=source.name, root=source.root, path=entry.locator, doc_id=entry.doc_id,
        kind="upsert", fingerprint=entry.fingerprint,
    )  # fmt: skip


def test_a_copy_is_the_same_version_under_another_key(s3: S3Server) -> None:
    bucket = s3.bucket({"a.md": "# A\n\nApples.\n"}, prefix="docs/")
    s3.client().copy_object(
        Bucket=bucket, Key="docs/copy/a.md", CopySource={"Bucket": bucket, "Key": "docs/a.md"}
    )
    source = _source(s3, bucket)
    first, copy = list(source.entries())
    assert (first.rel, copy.rel) == ("a.md", "copy/a.md")
    assert first.fingerprint == copy.fingerprint  # same bytes, same ETag: same version
    assert first.locator == f"s3://{bucket}/docs/a.md"
    assert source.read(_event(source, "copy/a.md")) == b"# A\n\nApples.\n"


def test_a_listing_reads_every_key_as_boto3_does_over_several_pages(s3: S3Server) -> None:
    odd = ["a b.md", "ü/é.md", "x&y<z>.md", "plus+sign.md", "100%.md", "q?.md", "d/e/f.txt"]
    bucket = s3.bucket({rel: f"{rel} text" for rel in odd}, prefix="docs/")
    s3.put(bucket, "docs/folder/", b"")  # a folder marker: no document
    s3.put(bucket, "other/outside.md", "not under the prefix")
    source = _source(s3, bucket)
    source.page = 2  # four pages: every continuation token is followed
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="docs/")
    expected = sorted(
        (o["Key"], o["Size"], o["ETag"])
        for page in pages
        for o in page["Contents"]
        if not o["Key"].endswith("/")
    )
    assert source.listing() == expected
    assert sorted(e.rel for e in source.entries()) == sorted(odd)
    assert source.read(_event(source, "x&y<z>.md")) == b"x&y<z>.md text"


def test_a_missing_bucket_is_named_by_the_listing(s3: S3Server) -> None:
    with pytest.raises(InvalidRequestError, match="no bucket 'rs-none'"):
        list(_source(s3, "rs-none").entries())


def test_event_notifications_touch_each_key_and_changed_reads_it(s3: S3Server) -> None:
    bucket = s3.bucket({"a.md": "# A\n\nApples.\n"}, prefix="docs/")
    queue = s3.events_queue(bucket)
    config = S3Config(
        name="b", s3=f"s3://{bucket}/docs", endpoint_url=s3.endpoint, events_queue=queue,
        poll_s=3600,  # no listing while the test runs: only the queue can touch
    )  # fmt: skip
    source = open_source(config, PF)
    assert isinstance(source, S3Source)
    known = {e.doc_id: e.fingerprint.token for e in source.entries() if e.fingerprint}
    a, b, csv = (source.locator(rel) for rel in ("a.md", "b.md", "notes.csv"))
    assert list(source.changed(a, known)) == []  # the version the index holds: nothing
    touched: list[str] = []
    stop = source.watch(lambda locator, completed: touched.append(locator))
    try:
        s3.put(bucket, "docs/b.md", "# B\n\nBananas.\n")
        s3.put(bucket, "other/c.md", "outside the prefix")
        s3.put(bucket, "docs/notes.csv", "not a wanted file")
        s3.client().delete_object(Bucket=bucket, Key="docs/a.md")
        deadline = time.monotonic() + 60
        while not {a, b, csv} <= set(touched) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop()
    assert set(touched) == {a, b, csv}, touched  # the other prefix touched nothing
    (upsert,) = source.changed(b, known)
    listed = {e.locator: e.fingerprint for e in source.entries()}
    assert (upsert.kind, upsert.doc_id, upsert.fingerprint) == ("upsert", "b:b.md", listed[b])
    (delete,) = source.changed(a, known)
    assert (delete.kind, delete.doc_id) == ("delete", "b:a.md")
    assert list(source.changed(csv, known)) == []  # not a wanted file


def test_a_large_multipart_object_is_read_whole(s3: S3Server) -> None:
    from boto3.s3.transfer import TransferConfig

    bucket = s3.bucket()
    data = bytes(range(256)) * (12 * 4096)  # 12 MiB, uploaded in 5 MiB parts
    parts = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)
    s3.client().upload_fileobj(io.BytesIO(data), bucket, "docs/big.bin", Config=parts)
    source = _source(s3, bucket)
    (entry,) = source.entries()
    assert entry.fingerprint is not None and entry.fingerprint.size == len(data)
    assert entry.fingerprint.digest.endswith("-3")  # a multipart ETag
    assert source.read(_event(source, "big.bin")) == data


def test_an_emptied_prefix_trips_the_mass_delete_guard(s3: S3Server) -> None:
    bucket = s3.bucket({f"d{i}.md": f"# Doc {i}\n" for i in range(12)}, prefix="docs/")
    source = _source(s3, bucket)
    known = {e.doc_id: {e.fingerprint.token} for e in source.entries() if e.fingerprint}
    for i in range(12):
        s3.client().delete_object(Bucket=bucket, Key=f"docs/d{i}.md")
    events, guard = plan_catch_up(source, list(source.entries()), known, 0.5, 10, False)
    assert guard is not None and guard.would_delete == 12 and events == []
    assert "nothing was deleted" in guard.reason


def test_an_object_overwritten_after_the_listing_is_not_read_as_the_listed_one(
    s3: S3Server,
) -> None:
    bucket = s3.bucket({"a.md": "first"}, prefix="docs/")
    source = _source(s3, bucket)
    event = _event(source, "a.md")
    s3.put(bucket, "docs/a.md", "second")
    with pytest.raises(SourceReadError, match="changed since it was listed"):
        source.read(event)
    assert source.read(_event(source, "a.md")) == b"second"


def test_user_metadata_and_the_modified_time_are_the_sources_fields(s3: S3Server) -> None:
    bucket = s3.bucket()
    s3.put(bucket, "docs/a.md", "# A\n", team="geology", review="2026-11-30")
    source = _source(s3, bucket)
    fields = source.fields(source.locator("a.md"))
    assert fields["team"] == "geology" and fields["review"] == "2026-11-30"
    assert "mtime" in fields
    assert source.fields(source.locator("gone.md")) == {}


def test_an_outage_changes_nothing_and_the_store_is_read_once_back(s3: S3Server) -> None:
    bucket = s3.bucket({"a.md": "# A\n\nApples.\n"}, prefix="docs/")
    source = _source(s3, bucket)
    event = _event(source, "a.md")
    configured = {"b": source}
    s3.stop()
    try:
        with pytest.raises(InvalidRequestError, match="nothing was changed"):
            list(source.entries())  # never an empty listing, which would read as deletes
        with pytest.raises(SourceUnavailable):
            source.read(event)  # the parse step leaves it unrecorded: read again next sync
        assert changed_since(event.path, event.fingerprint, configured, "b") is None
    finally:
        s3.start()
    assert source.read(event) == b"# A\n\nApples.\n"
    assert changed_since(event.path, event.fingerprint, configured, "b") is False


def test_without_boto3_the_message_names_the_extra(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for module in ("boto3", "botocore", "botocore.exceptions"):
        monkeypatch.setitem(sys.modules, module, None)  # importing it raises ImportError
    source = S3Source(S3Config(name="b", s3="s3://any/docs"))
    with pytest.raises(InvalidRequestError, match=r"pip install 'ragstream\[s3\]'"):
        source.check()
    with pytest.raises(InvalidRequestError, match=r"ragstream\[s3\]"):
        list(source.entries())
