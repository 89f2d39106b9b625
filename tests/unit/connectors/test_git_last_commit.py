"""`GitSource.last_commit`: the author and time of the last commit at the ref that changed a
path, on a real repository written with dulwich (two commits by two authors, each touching
its own file)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from dulwich import porcelain

from ragstream.connectors.git import GitSource
from ragstream.core.source_config import GitConfig
from tests.harness.gitrepo import GitRepo

ADA = b"Ada Lovelace <ada@example.invalid>"
GRACE = b"Grace Hopper <grace@example.invalid>"
FIRST_TIME = 1_700_000_000  # 2023-11-14T22:13:20Z
SECOND_TIME = 1_710_000_000  # 2024-03-09T16:00:00Z


def _commit(repo: GitRepo, author: bytes, when: int, message: str) -> str:
    sha = porcelain.commit(
        repo.repo,
        message.encode(),
        author=author,
        committer=author,
        author_timestamp=when,
        author_timezone=2 * 3600,  # the author's zone: the answer is still in UTC
        commit_timestamp=when,
        commit_timezone=2 * 3600,
    )
    return sha.decode()


@pytest.fixture
def history(tmp_path: Path) -> tuple[GitRepo, str, str]:
    repo = GitRepo(tmp_path / "repo")
    repo.write("docs/a.md", "# A\n")
    first = _commit(repo, ADA, FIRST_TIME, "add a")
    repo.write("notes/b.txt", "b\n")
    second = _commit(repo, GRACE, SECOND_TIME, "add b")
    return repo, first, second


def _source(repo: GitRepo, ref: str = "main") -> GitSource:
    return GitSource(GitConfig(name="repo", root=repo.root, git=repo.url, ref=ref))


def _utc(seconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


def test_each_path_reports_its_own_last_commit(history: tuple[GitRepo, str, str]) -> None:
    repo, _, _ = history
    source = _source(repo)
    assert {entry.rel for entry in source.entries()} == {"docs/a.md", "notes/b.txt"}
    assert source.last_commit("docs/a.md") == (_utc(FIRST_TIME), "Ada Lovelace")
    assert source.last_commit("notes/b.txt") == (_utc(SECOND_TIME), "Grace Hopper")
    when, _ = source.last_commit("notes/b.txt") or (None, "")
    assert when is not None and when.utcoffset() == datetime.timedelta(0)


def test_a_later_edit_moves_a_paths_last_commit(history: tuple[GitRepo, str, str]) -> None:
    repo, _, _ = history
    repo.write("docs/a.md", "# A, edited\n")
    _commit(repo, GRACE, SECOND_TIME + 60, "edit a")
    source = _source(repo)
    assert source.last_commit("docs/a.md") == (_utc(SECOND_TIME + 60), "Grace Hopper")
    assert source.last_commit("notes/b.txt") == (_utc(SECOND_TIME), "Grace Hopper")


def test_the_ref_bounds_the_history(history: tuple[GitRepo, str, str]) -> None:
    repo, first, _ = history
    at_first = _source(repo, ref=first)
    assert at_first.last_commit("docs/a.md") == (_utc(FIRST_TIME), "Ada Lovelace")
    assert at_first.last_commit("notes/b.txt") is None  # not yet committed at that ref


def test_an_unknown_path_or_ref_has_no_last_commit(history: tuple[GitRepo, str, str]) -> None:
    repo, _, _ = history
    assert _source(repo).last_commit("docs/missing.md") is None
    assert _source(repo, ref="no-such-branch").last_commit("docs/a.md") is None
