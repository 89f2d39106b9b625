"""Real users, groups, modes and ACLs for the permission tests (root only).

`real_users()` creates (once per machine, kept: concurrent test workers share them) four
users and two groups with known memberships; `shared_root()` a folder under /tmp that every
user can reach (pytest's own tmp folders are mode 700). `can_read` is the oracle: the file
opened by the user in a subprocess (`runuser`), and every folder from the root down readable
and searchable.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstream.service.base import USER_HEADER
from tests.harness.helpers import watch_serving

# the interpreter the oracle runs as each user: the venv's lives under /root (mode 700)
SYSTEM_PYTHON = "/usr/bin/python3"
GROUPS = ("rsperm_eng", "rsperm_ops")
# user -> supplementary groups
USERS = {
    "rsperm_alice": ("rsperm_eng",),
    "rsperm_bob": ("rsperm_eng", "rsperm_ops"),
    "rsperm_carol": ("rsperm_ops",),
    "rsperm_dave": (),
}


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("creating users, groups and ownerships needs root")
    for tool in ("useradd", "groupadd", "runuser", "setfacl", SYSTEM_PYTHON):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make test installs Debian's acl package)")


def real_users() -> dict[str, tuple[str, ...]]:
    """The test users (created if missing) -> their supplementary groups."""
    need_root()
    for group in GROUPS:
        if subprocess.run(["getent", "group", group], capture_output=True).returncode:
            subprocess.run(["groupadd", group], capture_output=True)  # a racing worker is fine
    for user, groups in USERS.items():
        if subprocess.run(["getent", "passwd", user], capture_output=True).returncode:
            cmd = ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin"]
            cmd += ["-G", ",".join(groups)] if groups else []
            subprocess.run([*cmd, user], capture_output=True)
    for user in USERS:  # the racing creator must have finished
        _run("getent", "passwd", user)
    return dict(USERS)


def shared_root() -> Path:
    """A fresh folder every user can reach (mode 755, under /tmp); the caller removes it."""
    root = Path(tempfile.mkdtemp(prefix="rsperm-", dir="/tmp"))
    root.chmod(0o755)
    return root


def set_acl(path: Path, spec: str) -> None:
    """`setfacl -m spec path` (e.g. `u:rsperm_bob:r--,m::r-x`)."""
    _run("setfacl", "-m", spec, str(path))


_ORACLE = """
import json, os, sys
root, files = sys.argv[1], json.loads(sys.argv[2])
def ok(path):
    d = os.path.dirname(path)
    while True:
        if not os.access(d, os.R_OK | os.X_OK):
            return False
        if d == root:
            break
        d = os.path.dirname(d)
    try:
        with open(path, 'rb') as fh:
            fh.read(1)
    except OSError:
        return False
    return True
print(json.dumps([ok(f) for f in files]))
"""


def can_read(user: str, root: Path, files: Sequence[Path]) -> list[bool]:
    """For each file: may `user` read it (run as that user: open + read, and every folder
    from `root` down readable and searchable)?"""
    out = subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            SYSTEM_PYTHON,
            "-I",
            "-S",
            "-c",
            _ORACLE,
            str(root),
            json.dumps([str(f) for f in files]),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return [bool(x) for x in json.loads(out.stdout)]


def cat_readable(user: str, path: Path) -> bool:
    """`runuser -u user -- cat path` succeeds."""
    return (
        subprocess.run(
            ["runuser", "-u", user, "--", "cat", str(path)], capture_output=True
        ).returncode
        == 0
    )


@contextmanager
def watching(
    docs: Path, data: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    """`ragstream watch DOCS --serve` (a subprocess) with DOCS's permissions mirrored and the
    `X-Ragstream-User` header trusted: its URL, and the outcomes it prints (JSON lines)."""
    sources = json.dumps([{"name": "docs", "root": str(docs), "permissions": "posix"}])
    full = dict(
        os.environ,
        RAGSTREAM_SOURCES=sources,
        RAGSTREAM_SERVER__TRUST_USER_HEADER="true",
        RAGSTREAM_SYNC__DEBOUNCE_MS="100",
        RAGSTREAM_EMBEDDER="static",
        **(env or {}),
    )
    with watch_serving(docs, data, full) as served:
        yield served


def retrieved_as(url: str, user: str, doc_id: str, query: str) -> bool:
    """Whether `user` (the trusted header) retrieves any chunk of `doc_id`."""
    body = {"query": query, "k": 5, "n": 100, "filters": {"doc_ids": [doc_id]}}
    reply = httpx.post(f"{url}/v1/retrieve", json=body, headers={USER_HEADER: user}, timeout=60)
    reply.raise_for_status()
    return bool(reply.json()["results"])
