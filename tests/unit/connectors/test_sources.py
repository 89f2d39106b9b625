"""The source contract: a folder, a git repository at a ref and an S3 prefix (moto's S3
server on loopback), on the same small files, pass the same checks
(`connectors.protocols.Source`). Then what only a git source has to show: it lists without
reading a blob, reads exactly the listed blob, and refuses a path that is no repository, an
unknown ref and a corrupt object clearly. The S3 source's own checks (a copy, a large object,
an emptied prefix, an outage, the missing extra) are in tests/unit/connectors/test_s3.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from ragstream.connectors import git
from ragstream.connectors.fs import PathFilter
from ragstream.connectors.protocols import Source, SourceReadError
from ragstream.connectors.source_input import plan_catch_up
from ragstream.connectors.sources import changed_since, open_source, source_at
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import FileEvent
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig, GitConfig, S3Config, SourceConfig
from tests.harness.gitrepo import GitRepo
from tests.harness.s3server import S3Server

FILES = {
    "a.md": "# Alpha\n\nThe alpha document talks about apples.\n",
    "notes/b.txt": "Bravo notes: bananas are yellow.\n",
    "notes/deep/c.md": "# Charlie\n\nCherries, deep in a folder.\n",
}
PF = PathFilter(("**/*.md", "**/*.txt"), ())


@dataclass
class Kit:
    """A source over FILES and how to change what it holds (a git kit commits each change)."""

    source: Source
    edit: Callable[[str, str], None]
    delete: Callable[[str], None]
    root: Path  # where the kit's files are written (a folder, a repository's work tree)


def _folder(tmp_path: Path) -> Kit:
    root = tmp_path / "docs"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)

    def edit(rel: str, text: str) -> None:
        path = root / rel
        before = path.stat().st_mtime_ns if path.exists() else 0
        path.write_text(text)
        os.utime(path, ns=(before + 10**9, before + 10**9))  # a new mtime, however fast

    source = open_source(FolderConfig(name="docs", root=root), PF)
    return Kit(source, edit, lambda rel: (root / rel).unlink(), root)


def _git(tmp_path: Path) -> Kit:
    repo = GitRepo(tmp_path / "docs")
    for rel, text in FILES.items():
        repo.write(rel, text)
    repo.commit("first")

    def edit(rel: str, text: str) -> None:
        repo.write(rel, text)
        repo.commit(f"edit {rel}")

    def delete(rel: str) -> None:
        repo.remove(rel)
        repo.commit(f"delete {rel}")

    config = GitConfig(name="docs", git=repo.url, ref="main")
    return Kit(open_source(config, PF, git_poll_s=0.05), edit, delete, repo.root)


def s3_kit(s3: S3Server, tmp_path: Path, files: dict[str, str] = FILES) -> Kit:
    """A prefix of a new bucket holding `files`, read through an `S3Config` naming the
    server's endpoint (boto3's environment holds the keys)."""
    bucket = s3.bucket(dict(files), prefix="team/docs/")
    config = S3Config(
        name="docs", s3=f"s3://{bucket}/team/docs", endpoint_url=s3.endpoint, poll_s=0.05
    )

    def edit(rel: str, text: str) -> None:
        s3.put(bucket, f"team/docs/{rel}", text)

    def delete(rel: str) -> None:
        s3.client().delete_object(Bucket=bucket, Key=f"team/docs/{rel}")

    return Kit(open_source(config, PF), edit, delete, tmp_path)


@pytest.fixture(params=["folder", "git", "s3"])
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Kit:
    if request.param == "s3":
        return s3_kit(request.getfixturevalue("s3"), tmp_path)
    make = _folder if request.param == "folder" else _git
    return make(tmp_path)


def _event(source: Source, rel: str) -> FileEvent:
    entry = next(e for e in source.entries() if e.rel == rel)
    return FileEvent(
        source=source.name,
        root=source.root,
        path=entry.locator,
        doc_id=entry.doc_id,
        kind="upsert",
        fingerprint=entry.fingerprint,
    )


def _known(source: Source) -> dict[str, set[str]]:
    out = {}
    for e in source.entries():
        assert e.fingerprint is not None
        out[e.doc_id] = {e.fingerprint.token}
    return out


def test_it_lists_every_document_with_its_identity_and_a_fingerprint(kit: Kit) -> None:
    entries = list(kit.source.entries())
    assert [e.rel for e in entries] == sorted(FILES)
    assert [e.doc_id for e in entries] == [f"docs:{rel}" for rel in sorted(FILES)]
    assert all(e.fingerprint is not None for e in entries)
    assert [kit.source.locator(e.rel) for e in entries] == [e.locator for e in entries]
    assert [e.rel for e in kit.source.entries()] == [e.rel for e in entries]  # stable


def test_it_opens_exactly_the_listed_bytes(kit: Kit) -> None:
    for rel, text in FILES.items():
        assert kit.source.read(_event(kit.source, rel)) == text.encode()
    # the event is resolved by the source its locator names, in any process
    event = _event(kit.source, "a.md")
    assert source_at(event.path, event.root).read(event) == FILES["a.md"].encode()


def test_an_edit_and_a_delete_plan_one_upsert_and_one_delete(kit: Kit) -> None:
    known = _known(kit.source)
    kit.edit("a.md", "# Alpha\n\nThe alpha document now talks about apricots.\n")
    kit.delete("notes/b.txt")
    found = list(kit.source.entries())
    events, guard = plan_catch_up(kit.source, found, known, 0.9, 10, False)
    assert guard is None
    assert sorted((e.doc_id, e.kind) for e in events) == [
        ("docs:a.md", "upsert"),
        ("docs:notes/b.txt", "delete"),
    ]
    delete = next(e for e in events if e.kind == "delete")
    assert delete.path == kit.source.locator("notes/b.txt")
    unchanged = next(e for e in found if e.rel == "notes/deep/c.md")
    assert unchanged.fingerprint is not None
    assert known["docs:notes/deep/c.md"] == {unchanged.fingerprint.token}


def test_it_says_which_version_is_there_now(kit: Kit) -> None:
    event = _event(kit.source, "a.md")
    configured = {kit.source.name: kit.source}  # what an answer's freshness is handed

    def changed() -> bool | None:
        return changed_since(event.path, event.fingerprint, configured, kit.source.name)

    assert changed() is False
    assert changed_since(event.path, event.fingerprint, {}, kit.source.name) is None  # unseen
    kit.edit("a.md", "# Alpha\n\nEdited.\n")
    assert changed() is True
    kit.delete("a.md")
    assert kit.source.version(event.path) is None
    assert changed() is True


def test_a_source_that_is_not_there_is_an_error_not_an_empty_listing(
    tmp_path: Path, s3: S3Server
) -> None:
    for config in (
        FolderConfig(name="gone", root=tmp_path / "nothing"),
        GitConfig(name="gone", git=f"file://{tmp_path}", ref="main"),
        S3Config(name="gone", s3="s3://no-such-bucket/docs", endpoint_url=s3.endpoint),
    ):
        source = open_source(config, PF)
        with pytest.raises(InvalidRequestError):
            source.check()
        with pytest.raises(InvalidRequestError):
            list(source.entries())


def test_watching_reports_a_change(kit: Kit) -> None:
    touched = threading.Event()
    stop = kit.source.watch(lambda locator, completed: touched.set())
    try:
        kit.edit("notes/deep/c.md", "# Charlie\n\nChanged while watched.\n")
        assert touched.wait(10), "no change reported within 10 s"
    finally:
        stop()


# --- what only the git source has to show ----------------------------------------------


def test_git_listing_reads_no_blob_and_a_read_reads_one(tmp_path: Path) -> None:
    kit = _git(tmp_path)
    before = git.blob_reads()
    assert len(list(kit.source.entries())) == len(FILES)
    assert git.blob_reads() == before  # tree objects only
    kit.source.read(_event(kit.source, "a.md"))
    assert git.blob_reads() == before + 1


def test_git_fingerprint_is_the_blob_id_and_the_commit(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    repo.write("a.md", FILES["a.md"])
    first = repo.commit()
    source = open_source(GitConfig(name="r", git=repo.url, ref="main"), PF)
    (entry,) = source.entries()
    fp = entry.fingerprint
    assert fp is not None and fp.commit == first and len(fp.digest) == 40
    assert fp.token == fp.digest and (fp.size, fp.mtime_ns) == (0, 0)  # no mtime to pack
    assert entry.locator == f"git+file://{repo.root}@main:a.md"
    repo.write("other.md", "another file")
    second = repo.commit()
    again = next(e for e in source.entries() if e.rel == "a.md").fingerprint
    assert again is not None and again.digest == fp.digest and again.commit == second


def test_git_unknown_ref_and_non_repository_are_clear_errors(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    repo.write("a.md", FILES["a.md"])
    repo.commit()
    with pytest.raises(InvalidRequestError, match="unknown ref 'nope'"):
        open_source(GitConfig(name="r", git=repo.url, ref="nope"), PF).check()
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidRequestError, match="is not a git repository"):
        open_source(GitConfig(name="p", git=str(tmp_path / "plain")), PF).check()


def test_git_corrupt_blob_is_a_read_error_not_a_crash(tmp_path: Path) -> None:
    kit = _git(tmp_path)
    event = _event(kit.source, "a.md")
    assert event.fingerprint is not None
    blob = event.fingerprint.digest
    path = kit.root / ".git" / "objects" / blob[:2] / blob[2:]  # a loose object
    path.chmod(0o644)
    path.write_bytes(b"not a zlib stream")
    with pytest.raises(SourceReadError):
        source_at(event.path, event.root).read(event)


def test_git_ref_that_suddenly_lists_nothing_trips_the_mass_delete_guard(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    for i in range(12):
        repo.write(f"d{i}.md", f"# Doc {i}\n\ntext {i}\n")
    repo.commit()
    source = open_source(GitConfig(name="r", git=repo.url, ref="main"), PF)
    known = _known(source)
    for i in range(12):
        repo.remove(f"d{i}.md")
    repo.commit("empty the tree")
    events, guard = plan_catch_up(source, list(source.entries()), known, 0.5, 10, False)
    assert guard is not None and guard.would_delete == 12 and events == []


def test_settings_name_a_source_kind_and_the_cli_form_parses(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "d").with_paths(
        ["git+file:///srv/repo@release-1", str(tmp_path), "git+file:///srv/other",
         "s3://bucket/team/docs/", "s3://bucket"]
    )  # fmt: skip
    kinds = [(c.name, c.kind, c.location) for c in s.sources]
    assert kinds == [
        ("repo", "git", "/srv/repo"),
        (tmp_path.name, "folder", str(tmp_path.resolve())),
        ("other", "git", "/srv/other"),
        ("docs", "s3", "s3://bucket/team/docs/"),
        ("bucket", "s3", "s3://bucket/"),
    ]
    assert [c.ref for c in s.sources if isinstance(c, GitConfig)] == ["release-1", "HEAD"]
    adapter: TypeAdapter[SourceConfig] = TypeAdapter(SourceConfig)
    # a table without `kind` is read as it always was; `kind` picks one explicitly
    toml = adapter.validate_python({"name": "r", "git": "file:///srv/repo", "ref": "main"})
    assert isinstance(toml, GitConfig) and toml.root == Path("/srv/repo")
    bucket = adapter.validate_python({"name": "b", "s3": "s3://b/p", "endpoint_url": "http://x"})
    assert isinstance(bucket, S3Config) and (bucket.bucket, bucket.prefix) == ("b", "p/")
    assert isinstance(adapter.validate_python({"name": "f", "root": "/x"}), FolderConfig)
    with pytest.raises(ValidationError, match="root"):
        adapter.validate_python({"name": "f", "kind": "s3", "root": "/x", "s3": "s3://b"})
    with pytest.raises(ValidationError, match="no bucket"):
        adapter.validate_python({"name": "b", "s3": "s3:///p"})
    with pytest.raises(ValidationError, match="none to mirror"):
        adapter.validate_python({"name": "b", "s3": "s3://b", "permissions": "posix"})
