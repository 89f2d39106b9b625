"""The S3 source (`S3Source`, a `connectors.protocols.Source`): the objects under a key prefix
of a bucket in any S3-compatible store, listed with their ETags, read exactly as listed.

A document's identity is its key below the prefix (`<source>:<rel>`, as for a folder), its
locator `s3://bucket/key`, its version the ETag: the fingerprint's digest and `commit` carry
it, so it is the version token the scan compares, and citations show it. A listing reads no
object, so a re-sync of an unchanged prefix costs one LIST page per thousand keys; a copied
object (same bytes, another key) is read and chunked but re-embeds nothing (its chunks'
content hashes are known); a deleted one is gone from the next listing and tombstoned like a
deleted file, under the same mass-delete guard.

A read asks for the listed ETag (`If-Match`): an object overwritten since it was listed is a
read error for this pass, and the next listing picks the new version up. A store that cannot
be reached (connection refused, timeouts, 5xx after boto3's retries) raises
`SourceUnavailable`: the parse step then leaves the document unrecorded, so the next sync
reads it again. `watch` lists the prefix every `poll_s` and re-plans it when a key or an
ETag changed; with an `events_queue` (an SQS queue the bucket's event notifications go to)
it also consumes the queue and touches each created or removed key at once, which
`changed` turns into an upsert or a delete after one HEAD.

boto3 is an optional extra (`ragstream[s3]`). It reads the endpoint, region and credentials
as it always does (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, a profile in
`~/.aws`); the config may name an endpoint, a region and a profile, never a key.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import os
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote_plus

from ragstream.connectors.fs import PathFilter
from ragstream.connectors.protocols import (
    SourceEntry,
    SourceReadError,
    SourceUnavailable,
    Touch,
    poll_for_changes,
)
from ragstream.core.errors import InvalidRequestError
from ragstream.core.ids import doc_id as make_doc_id
from ragstream.core.metadata import RawValue
from ragstream.core.models import FileEvent, FileFingerprint
from ragstream.core.permissions import OFF_STAMP, Readers, UserDb
from ragstream.core.source_config import S3_SCHEME, S3Config

MISSING_EXTRA = (
    "an s3:// source needs boto3, which is the optional extra 's3': pip install 'ragstream[s3]'"
)
_GONE = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchVersion"})
_CHANGED = frozenset({"412", "PreconditionFailed"})
_RETRIES = {"max_attempts": 3, "mode": "standard"}
_READS = [0]  # objects read by this process (the bench checks a re-scan reads none unchanged)
_READS_LOCK = threading.Lock()
EVENT_WAIT_S = 2  # an SQS long poll: how long a stopping watcher waits at most
LOG = logging.getLogger(__name__)


def object_reads() -> int:
    """How many objects this process has read so far."""
    return _READS[0]


def fingerprint(size: int, etag: str) -> FileFingerprint:
    """An object's version: its ETag is the token (an object has no mtime that a
    same-second overwrite would move); its size is known from the listing."""
    tag = etag.strip('"')
    return FileFingerprint(size=size, mtime_ns=0, digest=tag, commit=tag)


def locator(bucket: str, key: str) -> str:
    return f"{S3_SCHEME}{bucket}/{key}"


def parse_locator(text: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` locator."""
    bucket, _, key = text[len(S3_SCHEME) :].partition("/")
    return bucket, key


def _error_code(err: Exception) -> str:
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _errors() -> tuple[type[Exception], type[Exception]]:
    """botocore's (transport error, service error) classes; InvalidRequestError without the
    extra."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        raise InvalidRequestError(MISSING_EXTRA) from None
    return BotoCoreError, ClientError


_CLIENTS: dict[tuple[object, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def open_client(config: S3Config, service: str = "s3") -> Any:
    """A client of `service` ("s3", or "sqs" for the events queue; botocore's, which boto3's
    is) for the config's endpoint, region and profile; the rest is read from its environment
    and shared files, as boto3 reads it.

    One client serves every source of the same service, endpoint, region, profile and
    `AWS_*` environment in this process (botocore's clients are thread-safe and refresh
    their own credentials): a sync or a watcher's re-listing does not build one again. The
    key lives in memory only. Timestamps stay text (a listing never reads them), and a
    listing page is read by `_lean_listing`. InvalidRequestError without the extra."""
    try:
        import boto3  # noqa: F401  (the extra: it brings botocore, and is what users install)
        from botocore.config import Config
        from botocore.session import Session
    except ImportError:
        raise InvalidRequestError(MISSING_EXTRA) from None
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    key = (service, config.profile, config.endpoint_url, config.region, environment)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            session = Session(profile=config.profile)
            parsers = session.get_component("response_parser_factory")
            parsers.set_parser_defaults(timestamp_parser=str)
            timeout = 60 if service == "s3" else EVENT_WAIT_S + 10
            client = session.create_client(
                service,
                endpoint_url=config.endpoint_url,
                region_name=config.region,
                config=Config(retries=_RETRIES, connect_timeout=5, read_timeout=timeout),
            )
            if service == "s3":
                client.meta.events.register("before-parse.s3.ListObjectsV2", _lean_listing)
            _CLIENTS[key] = client
        return _CLIENTS[key]


def _lean_listing(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    """botocore's `before-parse` hook for a ListObjectsV2 page: reads each object's Key, Size
    and ETag straight from the XML and leaves botocore the page without its `Contents`
    (its shape-driven parse of a thousand entries costs ten times the XML's own). The keys
    then pass through botocore's URL-decoding as its own parse's would."""
    if response_dict.get("status_code") != 200 or not response_dict.get("body"):
        return
    page = ElementTree.fromstring(response_dict["body"])
    contents = []
    for entry in page.findall("{*}Contents"):
        contents.append(
            {
                "Key": entry.findtext("{*}Key", ""),
                "Size": int(entry.findtext("{*}Size", "0")),
                "ETag": entry.findtext("{*}ETag", ""),
            }
        )
        page.remove(entry)
    if contents:
        response_dict["body"] = ElementTree.tostring(page)
        customized_response_dict["Contents"] = contents


class S3Source:
    """The objects under `config.prefix` of `config.bucket`; `poll_s`: how often `watch`
    lists them again."""

    page = 1000  # keys per listing page (S3's most)

    def __init__(
        self, config: S3Config, poll_s: float | None = None, path_filter: PathFilter | None = None
    ) -> None:
        self.config, self.name = config, config.name
        self.bucket, self.prefix = config.bucket, config.prefix
        self.root = config.location
        self.poll_s = config.poll_s if poll_s is None else poll_s
        self._filter = path_filter  # what `changed` offers (the listing's is the planner's)

    def client(self, service: str = "s3") -> Any:
        return open_client(self.config, service)

    def _unreachable(self, err: Exception, what: str) -> InvalidRequestError:
        return InvalidRequestError(
            f"source {self.name!r}: {what} {self.root} failed ({type(err).__name__}: {err}); "
            "nothing was changed"
        )

    def _no_bucket(self) -> InvalidRequestError:
        return InvalidRequestError(
            f"source {self.name!r}: no bucket {self.bucket!r} at the endpoint"
        )

    def check(self) -> None:
        BotoCoreError, ClientError = _errors()

        try:
            self.client().head_bucket(Bucket=self.bucket)
        except ClientError as err:
            if _error_code(err) in _GONE | {"NoSuchBucket"}:
                raise self._no_bucket() from None
            raise self._unreachable(err, "reaching") from None
        except BotoCoreError as err:
            raise self._unreachable(err, "reaching") from None

    def listing(self) -> list[tuple[str, int, str]]:
        """(key, size, ETag) of every object under the prefix, in key order; a listing that
        cannot be completed is an error (never a short listing that would read as deletes)."""
        BotoCoreError, ClientError = _errors()

        found = []
        try:
            paginator = self.client().get_paginator("list_objects_v2")
            paging = {"PageSize": self.page}
            for page in paginator.paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig=paging
            ):
                for obj in page.get("Contents", ()):
                    if not obj["Key"].endswith("/"):  # a "folder" marker holds no document
                        found.append((obj["Key"], int(obj["Size"]), str(obj["ETag"])))
        except ClientError as err:
            if _error_code(err) == "NoSuchBucket":
                raise self._no_bucket() from None
            raise self._unreachable(err, "listing") from None
        except BotoCoreError as err:
            raise self._unreachable(err, "listing") from None
        return sorted(found)

    def entries(self) -> Iterator[SourceEntry]:
        """The listing as entries (a missing bucket or an unreachable store is an
        InvalidRequestError from the listing itself: no separate HEAD first)."""
        for key, size, etag in self.listing():
            rel = key[len(self.prefix) :]
            fp = fingerprint(size, etag)
            yield SourceEntry.listed(make_doc_id(self.name, rel), self.locator(rel), rel, fp)

    def locator(self, rel: str) -> str:
        return locator(self.bucket, self.prefix + rel)

    def read(self, event: FileEvent) -> bytes:
        """The object at the event's key, exactly the listed version (its ETag)."""
        BotoCoreError, ClientError = _errors()

        fp = event.fingerprint
        if fp is None or not fp.digest:
            raise SourceReadError("no ETag to read")
        bucket, key = parse_locator(event.path)
        try:
            got = self.client().get_object(Bucket=bucket, Key=key, IfMatch=f'"{fp.digest}"')
            data = bytes(got["Body"].read())
        except ClientError as err:
            code = _error_code(err)
            if code in _GONE:
                raise SourceReadError(f"object {event.path} is gone") from None
            if code in _CHANGED:
                raise SourceReadError(
                    f"object {event.path} changed since it was listed (ETag {fp.digest}); "
                    "the next listing reads the new version"
                ) from None
            raise SourceUnavailable(f"object {event.path} cannot be read ({code}: {err})") from None
        except BotoCoreError as err:
            raise SourceUnavailable(f"object {event.path} cannot be read: {err}") from None
        with _READS_LOCK:
            _READS[0] += 1
        return data

    def head(self, locator: str) -> dict[str, Any] | None:
        """The object's HEAD response, None when it is gone; OSError when the store cannot
        be reached from here."""
        BotoCoreError, ClientError = _errors()

        bucket, key = parse_locator(locator)
        try:
            return dict(self.client().head_object(Bucket=bucket, Key=key))
        except ClientError as err:
            if _error_code(err) in _GONE:
                return None
            raise OSError(str(err)) from None
        except (BotoCoreError, InvalidRequestError) as err:
            raise OSError(str(err)) from None

    def version(self, locator: str) -> FileFingerprint | None:
        found = self.head(locator)
        if found is None:
            return None
        return fingerprint(int(found["ContentLength"]), str(found["ETag"]))

    def fields(self, locator: str) -> dict[str, RawValue]:
        """What the store says of the object: its user metadata (`x-amz-meta-*`, each a text
        field) and its last-modified time (`mtime`); nothing when it cannot be asked."""
        try:
            found = self.head(locator)
        except OSError:
            return {}
        if found is None:
            return {}
        out: dict[str, RawValue] = {str(k): str(v) for k, v in found.get("Metadata", {}).items()}
        try:
            when = email.utils.parsedate_to_datetime(str(found.get("LastModified", "")))
        except (TypeError, ValueError):
            return out
        out["mtime"] = when.astimezone(datetime.UTC)
        return out

    def stamp(self, locator: str, db: UserDb) -> Readers:
        """An object has no POSIX permissions to mirror: the source's tenant and name scope
        who reads it (a bucket policy is the store's, not the index's)."""
        return OFF_STAMP

    def watch(self, touch: Touch) -> Callable[[], None]:
        """List the prefix every `poll_s`; a changed listing (a key or an ETag) touches `""`
        (re-plan it as a whole). A listing that fails is skipped: the next poll sees again.
        With an `events_queue`, also consume it: each created or removed key under the
        prefix is touched as it arrives (the listing stays, for what a queue can miss)."""
        name = f"ragstream-s3-{self.name}"
        stops = [poll_for_changes(name, self.poll_s, self._listing_or_none, touch)]
        if self.config.events_queue:
            stops.append(self._consume_events(f"{name}-events", self.config.events_queue, touch))

        def halt() -> None:
            for stop in stops:
                stop()

        return halt

    def _consume_events(self, thread_name: str, queue: str, touch: Touch) -> Callable[[], None]:
        """A thread that long-polls `queue` and touches the keys its notifications name,
        deleting each message once touched (a restart's catch-up scan covers what was
        touched and not yet written). A queue that cannot be read is tried again after
        `poll_s`, logged once per outage."""
        stop = threading.Event()

        def loop() -> None:
            failing = False
            while not stop.is_set():
                try:
                    sqs = self.client("sqs")
                    got = sqs.receive_message(
                        QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=EVENT_WAIT_S
                    )
                    for message in got.get("Messages", ()):
                        for key in notified_keys(message.get("Body", ""), self.bucket):
                            if key.startswith(self.prefix) and not key.endswith("/"):
                                touch(self.locator(key[len(self.prefix) :]), True)
                        sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
                    failing = False
                except Exception as err:  # botocore's errors, or the extra missing
                    if not failing:
                        LOG.warning("source %r: events queue %s: %s", self.name, queue, err)
                    failing = True
                    stop.wait(self.poll_s)

        thread = threading.Thread(target=loop, name=thread_name, daemon=True)
        thread.start()

        def halt() -> None:
            stop.set()
            thread.join(timeout=EVENT_WAIT_S + 5)

        return halt

    def _listing_or_none(self) -> list[tuple[str, int, str]] | None:
        try:
            return self.listing()
        except InvalidRequestError:
            return None

    def changed(self, locator: str, known: Mapping[str, str | None]) -> Iterator[FileEvent]:
        """The event of one touched key (an event notification named it): an upsert when its
        ETag is not the one the index holds, a delete when it is gone and was indexed;
        nothing when the store cannot be asked now (the next listing sees it)."""
        bucket, key = parse_locator(locator)
        if bucket != self.bucket or not key.startswith(self.prefix):
            return
        rel = key[len(self.prefix) :]
        if self._filter is not None and not self._filter.wanted(rel):
            return
        did = make_doc_id(self.name, rel)
        try:
            now = self.version(locator)
        except OSError:
            return
        if now is None:
            if did in known:
                yield FileEvent(
                    source=self.name, root=self.root, path=locator, doc_id=did, kind="delete"
                )
        elif known.get(did) != now.token:
            yield FileEvent(
                source=self.name, root=self.root, path=locator, doc_id=did, kind="upsert",
                fingerprint=now,
            )  # fmt: skip


def notified_keys(body: str, bucket: str) -> list[str]:
    """The object keys of `bucket` an event notification's message names: S3's own
    (`Records[].s3`, keys URL-encoded with `+` for a space), wrapped in an SNS notification
    (`Message`) or not; MinIO's records (`minio:s3`) too. A test event or a message that is
    not a notification names none.

    >>> body = '{"Records": [{"eventSource": "aws:s3", "s3": {"bucket": {"name": "b"},'
    >>> body += ' "object": {"key": "docs/a+b%C3%A9.md"}}}]}'
    >>> notified_keys(body, "b"), notified_keys(body, "other")
    (['docs/a bé.md'], [])
    >>> notified_keys(json.dumps({"Type": "Notification", "Message": body}), "b")
    ['docs/a bé.md']
    >>> notified_keys('{"Event": "s3:TestEvent"}', "b"), notified_keys("not json", "b")
    ([], [])
    """
    try:
        message = json.loads(body)
        if isinstance(message, dict) and isinstance(message.get("Message"), str):
            message = json.loads(message["Message"])  # delivered through SNS
    except ValueError:
        return []
    records = message.get("Records") if isinstance(message, dict) else None
    keys = []
    for record in records if isinstance(records, list) else ():
        s3 = record.get("s3") if isinstance(record, dict) else None
        if not isinstance(s3, dict) or not str(record.get("eventSource", "")).endswith(":s3"):
            continue
        named = s3.get("bucket", {}).get("name")
        key = s3.get("object", {}).get("key")
        if named == bucket and isinstance(key, str):
            keys.append(unquote_plus(key))
    return keys


def spec_of(locator: str) -> S3Config:
    """The config of a source rebuilt from a locator alone (boto3's environment names the
    endpoint and credentials): what a process without the configured source falls back on."""
    return S3Config(name="", s3=f"{S3_SCHEME}{parse_locator(locator)[0]}/")
