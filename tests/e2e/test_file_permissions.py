"""File permissions mirrored onto every chunk, end to end, with real users and real files.

A folder of real files (owners, groups, modes, POSIX ACLs, folders of mode 700 and 750) is
indexed with `permissions = "posix"`; for each test user, what the index returns through the
embedded `Client`, the CLI (`--as-user`), the HTTP API (an API key mapped to the user; the
trusted `X-Ragstream-User` header), the HTTP `Client` and `AsyncClient`, the MCP `search`
tool over `/mcp` and over stdio (`ragstream mcp --as-user`) is exactly the set of files
`runuser -u USER -- cat FILE` can read. A
chmod, chown, setfacl or a folder's mode change then re-stamps the chunks on the next sync
with nothing re-read or re-embedded. Over two tenants' sources, for each (tenant, user) key, a
metadata filter only narrows: never a chunk the key could not retrieve without it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import pwd
import queue
import random
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ragstream import api
from ragstream.cli import app
from ragstream.client import AsyncClient, Client
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.base import USER_HEADER
from ragstream.service.served import ServedIndex
from tests.harness.mcp_client import call, http_session, stdio_session
from tests.harness.users import (
    cat_readable,
    real_users,
    retrieved_as,
    set_acl,
    shared_root,
    watching,
)

pytestmark = pytest.mark.slow

QUESTION = "quartz reading of the station log"
FOLDERS = {  # name -> (owner, group, mode)
    "open": ("root", "root", 0o755),
    "private": ("rsperm_alice", "rsperm_alice", 0o700),
    "team": ("rsperm_alice", "rsperm_eng", 0o750),
    "ops": ("root", "rsperm_ops", 0o770),
}
OWNERS = ["root", "rsperm_alice", "rsperm_bob", "rsperm_carol", "rsperm_dave"]
GROUPS = ["root", "rsperm_eng", "rsperm_ops", "rsperm_alice"]
MODES = [0o644, 0o640, 0o600, 0o604, 0o660, 0o444, 0o400, 0o044, 0o664]
ACLS = ["u:rsperm_carol:r--", "g:rsperm_ops:r--", "u:rsperm_bob:---", "g:rsperm_eng:r--,m::---"]
FILES = 56


@dataclass
class Corpus:
    docs: Path
    files: dict[str, Path]  # doc id -> file
    settings: Settings
    users: list[str]


def doc_id(docs: Path, path: Path) -> str:
    return f"docs:{path.relative_to(docs).as_posix()}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    users = sorted(real_users())
    rng = random.Random(44)
    base = shared_root()
    docs = base / "docs"
    docs.mkdir()
    docs.chmod(0o755)
    for name, (owner, group, mode) in FOLDERS.items():
        (docs / name).mkdir()
        shutil.chown(docs / name, owner, group)
        (docs / name).chmod(mode)
    files = {}
    for i in range(FILES):
        folder = docs / rng.choice(sorted(FOLDERS))
        path = folder / f"note{i:02d}.md"
        path.write_text(
            f"# Station {i}\n\nThe station log {i} holds the quartz reading number {i}.\n"
        )
        shutil.chown(path, rng.choice(OWNERS), rng.choice(GROUPS))
        path.chmod(rng.choice(MODES))
        if rng.random() < 0.3:
            set_acl(path, rng.choice(ACLS))
        files[doc_id(docs, path)] = path
    keys = {f"key-{u}": {"user": u} for u in users}
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("perm") / "data",
        embedder="static",
        sources=[FolderConfig(name="docs", root=docs, permissions="posix")],
        server={"api_key_principals": keys},
    )
    report = api.sync([docs], settings=settings)
    assert report.docs_seen == FILES and not report.dead_letters
    yield Corpus(docs, files, settings, users)
    shutil.rmtree(base, ignore_errors=True)


def readable(corpus: Corpus, user: str) -> set[str]:
    """The oracle: the doc ids whose file `runuser -u user -- cat` reads."""
    return {d for d, path in corpus.files.items() if cat_readable(user, path)}


def batches(corpus: Corpus) -> list[list[str]]:
    ids = sorted(corpus.files)
    return [ids[i : i + 40] for i in range(0, len(ids), 40)]


def seen_by_client(client: Client, corpus: Corpus) -> set[str]:
    """Every doc id the client's retrieval returns (in batches: k is at most 50)."""
    out: set[str] = set()
    for ids in batches(corpus):
        got = client.retrieve(QUESTION, k=50, n=1000, filters={"doc_ids": ids})
        out |= {r.doc_id for r in got.results}
    return out


async def seen_by_async_client(url: str, user: str, corpus: Corpus) -> set[str]:
    out: set[str] = set()
    async with AsyncClient(url=url, principal=user) as client:
        for ids in batches(corpus):
            got = await client.retrieve(QUESTION, k=50, n=1000, filters={"doc_ids": ids})
            out |= {r.doc_id for r in got.results}
    return out


async def seen_over_mcp(url: str, key: str, corpus: Corpus) -> set[str]:
    """What the MCP `search` tool returns over streamable HTTP (`/mcp`) with an API key."""
    out: set[str] = set()
    async with http_session(url, key) as session:
        for ids in batches(corpus):
            found = await call(session, "search", query=QUESTION, k=50, filters={"doc_ids": ids})
            out |= {h["doc_id"] for h in found["hits"]}
    return out


async def seen_over_stdio(corpus: Corpus, *args: str) -> tuple[set[str], set[str]]:
    """What `ragstream mcp --data-dir D ARGS` (a subprocess, the SDK's stdio client) returns:
    the doc ids of its `search` hits and of its `files` ledger."""
    env = {"RAGSTREAM_EMBEDDER": "static"}
    hits: set[str] = set()
    async with stdio_session(corpus.settings.data_dir, *args, env=env) as session:
        for ids in batches(corpus):
            found = await call(session, "search", query=QUESTION, k=50, filters={"doc_ids": ids})
            hits |= {h["doc_id"] for h in found["hits"]}
        listed = {f["doc_id"] for f in (await call(session, "files"))["files"]}
    return hits, listed


def post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{url}/v1/retrieve",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def served(settings: Settings, engine: QueryEngine) -> AbstractContextManager[str]:
    """The HTTP API over `engine` on a free port; its URL."""
    return serving(Serving(settings, ServedIndex(engine)), "127.0.0.1", 0)


def get(url: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(f"{url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def seen_over_http(url: str, corpus: Corpus, headers: dict[str, str]) -> set[str]:
    out: set[str] = set()
    for ids in batches(corpus):
        body = {"query": QUESTION, "k": 50, "n": 1000, "filters": {"doc_ids": ids}}
        status, got = post(url, body, headers)
        assert status == 200, got
        out |= {r["doc_id"] for r in got["results"]}
    return out


def test_each_user_sees_exactly_what_they_can_cat(corpus: Corpus) -> None:
    truths = {user: readable(corpus, user) for user in corpus.users}
    assert len({frozenset(t) for t in truths.values()}) == len(corpus.users)  # all differ
    assert all(0 < len(t) < FILES for t in truths.values())
    for user, truth in truths.items():
        with Client(settings=corpus.settings, principal=user) as client:
            assert seen_by_client(client, corpus) == truth, user
    with Client(settings=corpus.settings) as anonymous:  # no principal: everyone's files only
        everyone = seen_by_client(anonymous, corpus)
    assert everyone and everyone <= set.intersection(*truths.values())
    open_files = {d for d in corpus.files if d.startswith("docs:open/")}
    assert everyone <= open_files


def test_http_keys_headers_and_the_http_client_see_what_each_user_can_cat(
    corpus: Corpus,
) -> None:
    truths = {user: readable(corpus, user) for user in corpus.users}
    server = corpus.settings.server.model_copy(update={"trust_user_header": True})
    settings = corpus.settings.model_copy(update={"server": server})
    with QueryEngine.open(settings) as engine, served(settings, engine) as url:
        for user, truth in truths.items():
            by_key = seen_over_http(url, corpus, {"Authorization": f"Bearer key-{user}"})
            assert by_key == truth, user
            by_header = seen_over_http(url, corpus, {"X-Ragstream-User": user})
            assert by_header == truth, user
            with Client(url=url, principal=user) as client:
                assert seen_by_client(client, corpus) == truth, user
            assert asyncio.run(seen_by_async_client(url, user, corpus)) == truth, user
            assert asyncio.run(seen_over_mcp(url, f"key-{user}", corpus)) == truth, user
        body = {"query": QUESTION}
        status, err = post(url, body, {"X-Ragstream-User": "rsperm_nosuchuser"})
        assert status == 401 and "rsperm_nosuchuser" in err["error"]
        anonymous = seen_over_http(url, corpus, {})
        assert anonymous <= set.intersection(*truths.values())
        for user, truth in truths.items():  # the ledger and a file's view: the same rule
            key = {"Authorization": f"Bearer key-{user}"}
            status, ledger = get(url, "/v1/files", key)
            assert status == 200 and {r["doc_id"] for r in ledger} == truth, user
            hidden = sorted(set(corpus.files) - truth)[0]
            status, err = get(url, "/v1/files/" + urllib.parse.quote(hidden, safe=""), key)
            assert status == 404 and err["code"] == "not_found"
            shown = sorted(truth)[0]
            assert get(url, "/v1/files/" + urllib.parse.quote(shown, safe=""), key)[0] == 200


def test_the_cli_reads_as_user_and_a_query_without_the_settings_still_filters(
    corpus: Corpus,
) -> None:
    """`--as-user NAME` (resolved like `id NAME`); the data dir alone (no sources in the
    settings) still knows its sources mirror permissions: nothing widens without them."""
    data = ["--data-dir", str(corpus.settings.data_dir)]
    env = {"RAGSTREAM_EMBEDDER": "static"}

    def cli_seen(*extra: str) -> set[str]:
        out: set[str] = set()
        for ids in batches(corpus):
            docs = [arg for d in ids for arg in ("--filter", f"doc={d}")]
            args = ["query", QUESTION, "--no-generate", "--json", "--k", "50", *docs]
            result = CliRunner().invoke(app, [*args, *data, *extra], env=env)
            assert result.exit_code == 0, result.output
            out |= {r["doc_id"] for r in json.loads(result.stdout)["results"]}
        return out

    for user in ("rsperm_bob", "rsperm_dave"):
        assert cli_seen("--as-user", user) == readable(corpus, user), user
    uid = str(pwd.getpwnam("rsperm_carol").pw_uid)
    assert cli_seen("--as-user", uid) == readable(corpus, "rsperm_carol")
    anonymous = cli_seen()
    assert anonymous and anonymous <= set.intersection(*(readable(corpus, u) for u in corpus.users))
    bad = CliRunner().invoke(app, ["query", "x", "--as-user", "rsperm_nosuchuser", *data], env=env)
    assert isinstance(bad.exception, InvalidRequestError)  # `main` exits 2 with its message
    assert "rsperm_nosuchuser" in str(bad.exception)


def test_the_stdio_mcp_server_reads_as_the_user_its_flag_names(corpus: Corpus) -> None:
    """`ragstream mcp --as-user NAME` (resolved as the CLI's other `--as-user` flags are):
    its `search` and `files` show exactly what the user can cat; without the flag, only
    files everyone may read; an unknown name is refused before anything is served."""
    everyone = set.intersection(*(readable(corpus, u) for u in corpus.users))
    for user in corpus.users:
        hits, listed = asyncio.run(seen_over_stdio(corpus, "--as-user", user))
        assert hits == readable(corpus, user), user
        assert listed == readable(corpus, user), user
    anonymous, _ = asyncio.run(seen_over_stdio(corpus))
    assert anonymous and anonymous <= everyone
    data = ["--data-dir", str(corpus.settings.data_dir)]
    bad = CliRunner().invoke(app, ["mcp", "--as-user", "rsperm_nosuchuser", *data])
    assert isinstance(bad.exception, InvalidRequestError)
    assert "rsperm_nosuchuser" in str(bad.exception)


def test_a_principals_status_counts_only_what_it_may_read(corpus: Corpus) -> None:
    """`status` as a user (the embedded `Client`, an API key over HTTP) counts the documents
    and chunks of the files they can cat, as the operator's ledger lists those files; with
    no principal over HTTP, those everyone may read; the data dir's holder, all of them."""
    with Client(settings=corpus.settings) as operator:
        chunks = {r.doc_id: r.chunks for r in operator.files()}
        everything = operator.status()
    assert everything.docs == len(corpus.files) and everything.chunks_live == sum(chunks.values())

    def counted(truth: set[str]) -> tuple[int, int, int]:
        n = sum(chunks[d] for d in truth)
        return len(truth), n, n

    def counts(report: Any) -> tuple[int, int, int]:
        if isinstance(report, dict):
            return report["docs"], report["chunks_live"], report["lexical_live"]
        return report.docs, report.chunks_live, report.lexical_live

    truths = {user: readable(corpus, user) for user in corpus.users}
    for user, truth in truths.items():
        with Client(settings=corpus.settings, principal=user) as client:
            assert counts(client.status()) == counted(truth), user
    with QueryEngine.open(corpus.settings) as engine, served(corpus.settings, engine) as url:
        for user, truth in truths.items():
            status, report = get(url, "/v1/status", {"Authorization": f"Bearer key-{user}"})
            assert status == 200 and counts(report) == counted(truth), user
        with Client(url=url) as anonymous:
            everyone = seen_by_client(anonymous, corpus)
            assert everyone and counts(anonymous.status()) == counted(everyone)
    with Client(settings=corpus.settings) as holder:
        holder.retrieve(QUESTION)  # the served index, once the query models are loaded
        assert counts(holder.status()) == counts(everything)  # still the holder's, all


def test_the_header_is_ignored_unless_trusted(corpus: Corpus) -> None:
    truth = readable(corpus, "rsperm_alice")
    with QueryEngine.open(corpus.settings) as engine, served(corpus.settings, engine) as url:
        claimed = seen_over_http(url, corpus, {"X-Ragstream-User": "rsperm_alice"})
    assert claimed < truth  # read as nobody in particular: everyone's files only


def test_permission_changes_restamp_without_reading_or_embedding(corpus: Corpus) -> None:
    """chmod, chown, setfacl and a folder's mode each change who sees what on the next sync,
    with no document re-read and no chunk embedded."""
    alice, bob, carol = "rsperm_alice", "rsperm_bob", "rsperm_carol"
    target = corpus.docs / "open" / "changing.md"
    target.write_text("# Changing\n\nThe station log of the changing quartz reading.\n")
    shutil.chown(target, alice, alice)
    target.chmod(0o600)
    corpus.files[doc_id(corpus.docs, target)] = target
    assert api.sync([corpus.docs], settings=corpus.settings).docs_changed == 1

    def who_sees() -> dict[str, bool]:
        did = doc_id(corpus.docs, target)
        out = {}
        for user in (alice, bob, carol):
            with Client(settings=corpus.settings, principal=user) as client:
                got = client.retrieve(QUESTION, k=5, n=1000, filters={"doc_ids": [did]})
            out[user] = bool(got.results)
            assert out[user] == cat_readable(user, target), user
        return out

    def resync() -> None:
        report = api.sync([corpus.docs], settings=corpus.settings)
        assert report.chunks_embedded == report.chunks_reused == report.docs_changed == 0
        assert report.chunks_restamped >= 1

    assert who_sees() == {alice: True, bob: False, carol: False}
    target.chmod(0o644)  # chmod
    resync()
    assert who_sees() == {alice: True, bob: True, carol: True}
    target.chmod(0o640)
    shutil.chown(target, group="rsperm_eng")  # chown: the eng group (alice, bob) may read
    resync()
    assert who_sees() == {alice: True, bob: True, carol: False}
    set_acl(target, "u:rsperm_carol:r--")  # setfacl
    resync()
    assert who_sees() == {alice: True, bob: True, carol: True}
    (corpus.docs / "open").chmod(0o700)  # a folder's mode: only its owner (root) passes
    try:
        resync()
        assert who_sees() == {alice: False, bob: False, carol: False}
    finally:
        (corpus.docs / "open").chmod(0o755)
    resync()
    assert who_sees() == {alice: True, bob: True, carol: True}


def follow_feed(url: str, user: str, into: queue.Queue[str]) -> None:
    """The doc ids of the `outcome` events `/v1/events` streams to `user` (the header),
    until the server goes away."""
    headers = {USER_HEADER: user}
    try:
        with httpx.stream("GET", f"{url}/v1/events", headers=headers, timeout=None) as r:
            event = ""
            for line in r.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "outcome":
                    into.put(json.loads(line[5:])["doc_id"])
    except httpx.HTTPError:
        return


def test_permission_changes_under_watch_change_answers_with_no_embeds(tmp_path: Path) -> None:
    """chmod, then a folder's mode, under `watch --serve`: the answer follows within the
    debounce, each change a re-stamp (the watcher's outcomes: 0 chunks embedded)."""
    real_users()
    base = shared_root()
    try:
        docs = base / "docs"
        (docs / "team").mkdir(parents=True)
        docs.chmod(0o755)
        (docs / "team").chmod(0o755)
        note = docs / "team" / "plan.md"
        note.write_text("# Plan\n\nThe station log holds the quartz reading of the plan.\n")
        shutil.chown(note, "rsperm_alice", "rsperm_alice")
        note.chmod(0o600)
        did = "docs:team/plan.md"
        with watching(docs, tmp_path / "data") as (url, outcomes):
            first = outcomes.get(timeout=120)
            assert first["doc_id"] == did and first["chunks_embedded"] == 1

            def follows(user: str, visible: bool) -> None:
                deadline = time.monotonic() + 30
                while retrieved_as(url, user, did, QUESTION) != visible:
                    assert time.monotonic() < deadline, (user, visible)
                    time.sleep(0.05)
                assert cat_readable(user, note) == visible

            follows("rsperm_alice", True)
            follows("rsperm_bob", False)
            note.chmod(0o644)
            follows("rsperm_bob", True)
            (docs / "team").chmod(0o700)  # root's folder now: nobody else passes
            follows("rsperm_bob", False)
            follows("rsperm_alice", False)
            seen = []
            while not outcomes.empty():
                seen.append(outcomes.get())
            assert seen and all(o["chunks_embedded"] == 0 for o in seen)
            assert sum(o.get("chunks_restamped", 0) for o in seen) >= 2
            # the live feed as bob: the outcome of a file he may read, not of alice's own
            feed: queue.Queue[str] = queue.Queue()
            threading.Thread(
                target=follow_feed, args=(url, "rsperm_bob", feed), daemon=True
            ).start()
            time.sleep(1.0)  # subscribed
            secret, public = docs / "secret.md", docs / "public.md"
            secret.write_text("# Secret\n\nThe quartz reading alice keeps to herself.\n")
            shutil.chown(secret, "rsperm_alice", "rsperm_alice")
            secret.chmod(0o600)
            public.write_text("# Public\n\nThe quartz reading everyone may see.\n")
            public.chmod(0o644)
            assert feed.get(timeout=60) == "docs:public.md"
            time.sleep(1.0)
            assert feed.empty()  # docs:secret.md was written, and withheld from bob
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_unreadable_permissions_leave_a_file_to_its_owner_and_the_ledger_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a file's ACL cannot be read (the attribute read refused: a double at the
    boundary, read for real above), it is indexed for its owner alone, and both the ledger
    listing (state `owner-only`) and its file view carry the reason."""
    from ragstream.connectors import fs

    real_users()
    base = shared_root()
    try:
        docs = base / "docs"
        docs.mkdir()
        docs.chmod(0o755)
        closed, fine = docs / "closed.md", docs / "fine.md"
        for path in (closed, fine):
            path.write_text(f"# {path.stem}\n\nThe station log holds a quartz reading.\n")
            shutil.chown(path, "rsperm_carol", "rsperm_carol")
            path.chmod(0o644)
        read_acl = fs.os.getxattr

        def refused(path: object, name: str) -> bytes:
            if str(path) == str(closed):
                raise OSError(errno.EACCES, "Permission denied")
            return read_acl(path, name)  # type: ignore[arg-type]

        monkeypatch.setattr(fs.os, "getxattr", refused)
        (docs / "empty.md").write_text("")  # a dead letter: no chunk, so no stamp
        settings = Settings(
            data_dir=tmp_path / "data",
            embedder="static",
            sources=[FolderConfig(name="docs", root=docs, permissions="posix")],
            server={"trust_user_header": True},
        )
        api.sync([docs], settings=settings)
        with QueryEngine.open(settings) as engine, served(settings, engine) as url:
            for headers in ({USER_HEADER: "rsperm_carol"}, {}):  # its name is nobody's
                status, report = get(url, "/v1/status", headers)
                assert status == 200 and report["dead_letters"] == []
        with Client(settings=settings) as client:  # the data dir's holder: the operator
            assert [d.doc_id for d in client.status().dead_letters] == ["docs:empty.md"]
            chunk = client.file("docs:closed.md").chunks[0]
            assert chunk.readers == ("user:rsperm_carol", "source:docs")
            assert "Permission denied" in chunk.readers_reason
            assert client.file("docs:fine.md").chunks[0].readers_reason == ""
            states = {r.doc_id: (r.state, r.reason) for r in client.files()}  # the listing
            assert states["docs:fine.md"] == ("indexed", "")
            state, reason = states["docs:closed.md"]
            assert state == "owner-only" and chunk.readers_reason in reason
            assert "owner only" in reason
            owner_only = client.files(state="owner-only")
            assert [r.doc_id for r in owner_only] == ["docs:closed.md"]
        for user, sees in (("rsperm_carol", True), ("rsperm_bob", False)):
            with Client(settings=settings, principal=user) as client:
                got = client.retrieve(QUESTION, filters={"doc_ids": ["docs:closed.md"]})
                assert bool(got.results) == sees, user
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Metadata filters on top of tenants and permissions: two tenants' sources of real files
# (owners, modes, ACLs as above), each note with front matter, each key a (tenant, user) pair
TENANTS = ("acme", "globex")
TENANT_FILES = 16
TAGS = ("red", "blue")
# filters every file passes (`extension`, `size`, `mtime` come with every synced file)
MATCH_ALL: list[object] = [
    "extension exists",
    "size >= 0",
    {"field": "mtime", "operator": "exists", "value": True},
]
# filters some files pass, with the tag they keep
MATCH_SOME: list[tuple[object, str]] = [
    ("tags = red", "red"),
    ({"field": "tags", "operator": "in", "value": ["blue"]}, "blue"),
    ("not (tags = red) and extension = md", "blue"),
]


@dataclass
class Tenanted:
    files: dict[str, Path]  # doc id -> file
    tenant_of: dict[str, str]  # doc id -> its source's tenant
    tag_of: dict[str, str]  # doc id -> its front matter's one tag
    settings: Settings
    users: list[str]


def grid_key(tenant: str, user: str | None) -> str:
    return f"key-{tenant}-{user or 'nobody'}"


@pytest.fixture(scope="module")
def tenanted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenanted]:
    users = sorted(real_users())
    rng = random.Random(45)
    base = shared_root()
    files: dict[str, Path] = {}
    tenant_of: dict[str, str] = {}
    tag_of: dict[str, str] = {}
    sources = []
    for tenant in TENANTS:
        docs = base / tenant
        docs.mkdir()
        docs.chmod(0o755)
        for name, (owner, group, mode) in FOLDERS.items():
            (docs / name).mkdir()
            shutil.chown(docs / name, owner, group)
            (docs / name).chmod(mode)
        for i in range(TENANT_FILES):
            path = docs / rng.choice(sorted(FOLDERS)) / f"note{i:02d}.md"
            tag = TAGS[i % 2]
            path.write_text(
                f"---\ntags: [{tag}]\n---\n# Station {i}\n\n"
                f"The station log {i} holds the quartz reading number {i}.\n"
            )
            shutil.chown(path, rng.choice(OWNERS), rng.choice(GROUPS))
            path.chmod(rng.choice(MODES))
            if rng.random() < 0.3:
                set_acl(path, rng.choice(ACLS))
            did = f"{tenant}:{path.relative_to(docs).as_posix()}"
            files[did], tenant_of[did], tag_of[did] = path, tenant, tag
        sources.append(FolderConfig(name=tenant, root=docs, tenant=tenant, permissions="posix"))
    keys = {grid_key(t, u): t for t in TENANTS for u in [*users, None]}
    principals = {grid_key(t, u): {"user": u} for t in TENANTS for u in users}
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("perm-tenants") / "data",
        embedder="static",
        sources=sources,
        server={"api_keys": keys, "api_key_principals": principals},
    )
    report = api.sync([s.root for s in sources], settings=settings)
    assert report.docs_seen == len(files) and not report.dead_letters
    yield Tenanted(files, tenant_of, tag_of, settings, users)
    shutil.rmtree(base, ignore_errors=True)


def chunks_over_http(url: str, ids: list[str], key: str, flt: object = None) -> dict[str, str]:
    """The chunks (point id -> doc id) `POST /v1/retrieve` returns with `key` (its tenant and
    principal) under the metadata filter `flt`: every chunk of `ids` the key may read (k
    above their count)."""
    body: dict[str, Any] = {"query": QUESTION, "k": 50, "n": 1000, "filters": {"doc_ids": ids}}
    if flt is not None:
        body["filter"] = flt
    status, got = post(url, body, {"Authorization": f"Bearer {key}"})
    assert status == 200, (key, flt, got)
    return {r["point_id"]: r["doc_id"] for r in got["results"]}


def test_a_metadata_filter_never_widens_a_tenant_principal_s_view(tenanted: Tenanted) -> None:
    """For each (tenant, user) key of the grid, and each tenant's key with no user: what a
    metadata filter returns is a subset of what the key retrieves without it; a filter every
    file passes returns exactly that, one on the tags exactly its files of that tag; and what
    the key retrieves unfiltered is its tenant's files that the user can cat."""
    ids = sorted(tenanted.files)
    assert len(ids) <= 50  # one request returns every chunk
    truths = {
        user: {d for d, path in tenanted.files.items() if cat_readable(user, path)}
        for user in tenanted.users
    }
    assert all(0 < len(t) < len(ids) for t in truths.values())
    everyone = set.intersection(*truths.values())
    narrowed = kept = 0
    with (
        QueryEngine.open(tenanted.settings) as engine,
        served(tenanted.settings, engine) as url,
    ):
        for tenant in TENANTS:
            mine = {d for d, t in tenanted.tenant_of.items() if t == tenant}
            for user in [*tenanted.users, None]:
                key = grid_key(tenant, user)
                plain = chunks_over_http(url, ids, key)
                allowed = mine & (everyone if user is None else truths[user])
                if user is None:  # no principal: at most the files everyone may read
                    assert set(plain.values()) <= allowed, key
                else:
                    assert set(plain.values()) == allowed, key
                for flt in MATCH_ALL:
                    assert chunks_over_http(url, ids, key, flt) == plain, (key, flt)
                for flt, tag in MATCH_SOME:
                    filtered = chunks_over_http(url, ids, key, flt)
                    assert filtered.items() <= plain.items(), (key, flt)
                    tagged = {p: d for p, d in plain.items() if tenanted.tag_of[d] == tag}
                    assert filtered == tagged, (key, flt)
                    narrowed += len(plain) - len(filtered)
                    kept += len(filtered)
                with Client(url=url, api_key=key) as client:  # the Python client: the same
                    found = client.retrieve(
                        QUESTION, k=50, n=1000, filters={"doc_ids": ids}, filter="tags = red"
                    )
                red = chunks_over_http(url, ids, key, "tags = red")
                assert {r.point_id: r.doc_id for r in found.results} == red, key
    assert narrowed > 0 and kept > 0  # the filters did keep some chunks, and drop some
