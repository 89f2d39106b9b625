"""A file's readers (`connectors.fs.file_readers`) against what real users can read.

Random layouts of real files and folders (owners, groups, modes, POSIX ACLs written by
`setfacl`) under a root every user can reach; for each test user, the allow-list lets them in
exactly when reading the file as that user (a subprocess under `runuser`) succeeds.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragstream.connectors import fs
from ragstream.connectors.fs import file_readers
from ragstream.core.permissions import (
    EVERYONE,
    AclFormatError,
    UserDb,
    parse_acl,
    principal_of,
)
from tests.harness.users import GROUPS, USERS, can_read, real_users, set_acl, shared_root

pytestmark = pytest.mark.slow

PERMS = ("---", "r--", "r-x", "rw-", "rwx", "--x")


@pytest.fixture(scope="module")
def users() -> dict[str, tuple[str, ...]]:
    return real_users()


@pytest.fixture(scope="module")
def root(users: dict[str, tuple[str, ...]]) -> Iterator[Path]:
    path = shared_root()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def allowed(user: str, principals: tuple[str, ...]) -> bool:
    return not set(principal_of(user).tokens()).isdisjoint(principals)


owners = st.sampled_from([*sorted(USERS), "root"])
groups = st.sampled_from([*GROUPS, "rsperm_alice", "root"])
acl_entry = st.one_of(
    st.tuples(st.just("u"), owners, st.sampled_from(PERMS)),
    st.tuples(st.just("g"), groups, st.sampled_from(PERMS)),
    st.tuples(st.just("m"), st.just(""), st.sampled_from(PERMS)),
)
obj = st.fixed_dictionaries(
    {
        "owner": owners,
        "group": groups,
        "mode": st.one_of(
            st.sampled_from([0o700, 0o750, 0o755, 0o640, 0o644, 0o604, 0o044, 0o711]),
            st.integers(0, 0o777),
        ),
        "acl": st.lists(acl_entry, max_size=3),
    }
)
layout = st.lists(st.lists(obj, min_size=1, max_size=3), min_size=4, max_size=8)


def build(base: Path, index: int, chain: list[dict[str, object]]) -> Path:
    """The folders then the file of one chain (its last object), permissions set last."""
    *folders, leaf = chain
    path = base
    paths = []
    for depth in range(len(folders)):
        path = path / f"d{index}_{depth}"
        path.mkdir()
        paths.append(path)
    path = path / f"f{index}.md"
    path.write_text(f"# file {index}\n\nsecret number {index}.\n")
    paths.append(path)
    for p, spec in zip(paths, [*folders, leaf], strict=True):
        shutil.chown(p, str(spec["owner"]), str(spec["group"]))
        p.chmod(int(spec["mode"]))  # type: ignore[call-overload]
        if spec["acl"]:
            set_acl(p, ",".join(f"{t}:{q}:{perm}" for t, q, perm in spec["acl"]))  # type: ignore[attr-defined]
    return path


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chains=layout)
def test_readers_equal_what_each_user_can_read(
    chains: list[list[dict[str, object]]], root: Path, users: dict[str, tuple[str, ...]]
) -> None:
    base = Path(os.path.join(root, f"case{len(os.listdir(root))}"))
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    files = [build(base, i, chain) for i, chain in enumerate(chains)]
    db = UserDb.system()
    stamps = [file_readers(f, base, db) for f in files]
    for user in users:
        truth = can_read(user, base, files)
        got = [allowed(user, s.principals) for s in stamps]
        assert got == truth, (
            user,
            [(str(f), s.principals) for f, s in zip(files, stamps, strict=True)],
        )


def test_group_and_everyone_principals_are_safe_for_strangers(root: Path) -> None:
    """A principal set the user database does not know (an API key's) gets in only through
    principals that hold for anyone carrying them."""
    base = root / "strangers"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    shared = base / "team.md"
    shared.write_text("team\n")
    shutil.chown(shared, "rsperm_alice", "rsperm_eng")
    shared.chmod(0o640)
    public = base / "public.md"
    public.write_text("public\n")
    public.chmod(0o644)
    hidden = base / "hidden.md"  # other may read, but the eng group may not
    hidden.write_text("hidden\n")
    shutil.chown(hidden, "rsperm_alice", "rsperm_eng")
    hidden.chmod(0o604)
    db = UserDb.system()
    assert file_readers(public, base, db).principals == (EVERYONE,)
    team = file_readers(shared, base, db).principals
    assert "group:rsperm_eng" in team and EVERYONE not in team
    assert "group:rsperm_eng" not in file_readers(hidden, base, db).principals
    assert EVERYONE not in file_readers(hidden, base, db).principals


def test_acl_written_by_setfacl_parses(root: Path) -> None:
    path = root / "acl.md"
    path.write_text("x\n")
    path.chmod(0o600)
    set_acl(path, "u:rsperm_carol:r--,g:rsperm_ops:---,m::r--")
    entries = parse_acl(os.getxattr(path, fs.ACL_ATTRIBUTE))
    tags = sorted(e.tag for e in entries)
    assert tags == [0x01, 0x02, 0x04, 0x08, 0x10, 0x20]
    principals = file_readers(path, root, UserDb.system()).principals
    assert "user:rsperm_carol" in principals and "user:rsperm_bob" not in principals


def test_malformed_acl_is_an_error() -> None:
    with pytest.raises(AclFormatError):
        parse_acl(b"\x02\x00\x00\x00\x01")
    with pytest.raises(AclFormatError):
        parse_acl(b"\x03\x00\x00\x00")


def test_unreadable_permissions_fail_closed_to_the_owner(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the ACL cannot be read (here: the attribute read is refused), the file is its
    owner's alone, and the stamp says why."""
    path = root / "closed.md"
    path.write_text("x\n")
    path.chmod(0o644)
    shutil.chown(path, "rsperm_dave")

    def refused(p: object, name: str) -> bytes:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fs.os, "getxattr", refused)
    stamp = file_readers(path, root, UserDb.system())
    assert stamp.principals == ("user:rsperm_dave",)
    assert "Permission denied" in stamp.reason


def test_vanished_file_is_nobodys(root: Path) -> None:
    stamp = file_readers(root / "gone.md", root, UserDb.system())
    assert stamp.principals == () and stamp.reason


def test_an_acl_with_an_empty_mask_leaves_the_mode_bits_to_decide(root: Path) -> None:
    """Linux skips an ACL whose mask is empty: a member of a named group reads through
    `other`, while a member of the owning group is refused by the (empty) group bits."""
    path = root / "masked.md"
    path.write_text("x\n")
    shutil.chown(path, "rsperm_dave", "rsperm_alice")
    path.chmod(0o644)
    set_acl(path, "g:rsperm_eng:r--,u:rsperm_carol:---,m::---")
    stamp = file_readers(path, root, UserDb.system())
    for user in ("rsperm_alice", "rsperm_bob", "rsperm_carol"):
        assert allowed(user, stamp.principals) == can_read(user, root, [path])[0], user
    assert allowed("rsperm_bob", stamp.principals) and not allowed("rsperm_alice", stamp.principals)


def test_an_owning_group_also_named_in_the_acl_is_two_entries_not_one(root: Path) -> None:
    """acl(5) grants by one matching entry holding every bit asked: a folder whose owning
    group has `--x` and whose ACL names the same group `r--` lets that group's members
    neither list nor enter it for a read (a folder needs `r-x`), though the two together
    would (the case hypothesis found)."""
    folder = root / "split"
    folder.mkdir()
    path = folder / "inside.md"
    path.write_text("x\n")
    shutil.chown(path, "rsperm_alice", "rsperm_eng")
    path.chmod(0o700)
    shutil.chown(folder, "rsperm_bob", "rsperm_eng")
    folder.chmod(0o711)
    set_acl(folder, "g:rsperm_eng:r--")
    stamp = file_readers(path, root, UserDb.system())
    assert not can_read("rsperm_alice", root, [path])[0]
    assert stamp.principals == ()
