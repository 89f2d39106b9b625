"""A real git repository for tests and benches, written with dulwich (no git binary)."""

from __future__ import annotations

from pathlib import Path

from dulwich import porcelain
from dulwich.repo import Repo

AUTHOR = b"ragstream tests <tests@ragstream.invalid>"


class GitRepo:
    """A non-bare repository on branch `main` with a working tree to commit from."""

    def __init__(self, root: Path, branch: str = "main") -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.repo: Repo = porcelain.init(str(root))
        self.branch = f"refs/heads/{branch}".encode()
        self.repo.refs.set_symbolic_ref(b"HEAD", self.branch)

    @property
    def url(self) -> str:
        return f"git+file://{self.root}"

    def write(self, rel: str, text: str | bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        porcelain.add(self.repo, [str(path)])

    def remove(self, rel: str) -> None:
        porcelain.rm(self.repo, [str(self.root / rel)])

    def commit(self, message: str = "change") -> str:
        sha = porcelain.commit(self.repo, message.encode(), author=AUTHOR, committer=AUTHOR)
        return sha.decode()

    def head(self) -> str:
        return self.repo.refs[self.branch].decode()

    def reset_branch(self, commit: str) -> None:
        """Point the branch at another commit (a reset or a force-push), tree untouched."""
        self.repo.refs[self.branch] = commit.encode()
