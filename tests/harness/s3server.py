"""A real S3 server on loopback for tests and benches: moto's standalone server
(`moto.server.ThreadedMotoServer`, the S3 REST API over HTTP), started in this process on a
free port. Its buckets live in this process, so `stop` then `start` on the same port is an
outage the store comes back from with its objects. `S3Server(process=True)` runs it as its
own process instead (`python -m moto.server`), as a store on another machine would be: what a
benchmark times then does not share this process's interpreter with the server.

`environment` is what a user's shell would hold for boto3: the endpoint, a region and a key
pair whose secret is a marker a test can grep for.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

SECRET_MARKER = "rs-test-secret-"  # every test secret starts with it


class S3Server:
    """moto's S3 server on 127.0.0.1; `client()` is a boto3 client for it."""

    def __init__(self, process: bool = False) -> None:
        self.port = 0
        self.secret = f"{SECRET_MARKER}{uuid.uuid4().hex}"
        self.process = process
        self._server: Any = None

    def start(self) -> S3Server:
        if self.process:
            return self._start_process()
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        return self

    def _start_process(self, timeout_s: float = 60.0) -> S3Server:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        quiet = subprocess.DEVNULL
        self._server = subprocess.Popen(args, stdout=quiet, stderr=quiet)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto's S3 server did not listen on {self.port}")

    def stop(self) -> None:
        if isinstance(self._server, subprocess.Popen):
            self._server.terminate()
            self._server.wait(timeout=30)
        elif self._server is not None:
            self._server.stop()
        self._server = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "rs-test-key",
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        import boto3

        env = self.environment()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )

    def events_queue(self, bucket: str) -> str:
        """A new SQS queue that `bucket` sends its created and removed events to (as a
        bucket's owner configures it); its URL."""
        import boto3

        env = self.environment()
        sqs = boto3.client(
            "sqs",
            endpoint_url=self.endpoint,
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        url = str(sqs.create_queue(QueueName=f"{bucket}-events")["QueueUrl"])
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
        self.client().put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": arn["Attributes"]["QueueArn"], "Events": events}
                ]
            },
        )
        return url

    def bucket(self, files: dict[str, str | bytes] | None = None, prefix: str = "") -> str:
        """A new bucket (unique name) holding `files` under `prefix`."""
        name = f"rs-{uuid.uuid4().hex[:12]}"
        client = self.client()
        client.create_bucket(Bucket=name)
        for rel, body in (files or {}).items():
            self.put(name, prefix + rel, body)
        return name

    def put(self, bucket: str, key: str, body: str | bytes, **meta: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.client().put_object(Bucket=bucket, Key=key, Body=data, Metadata=meta)
