"""Who may read a file: POSIX permissions reduced to an allow-list of principals.

A file's readers are decided by the permissions of every object on its path from the watched
root down: the root and each folder need read and search (`r-x`), the file needs read. Each
object's permissions are its owner, group, mode and, where the filesystem has one, its POSIX
access ACL (`ObjectPermissions`; `parse_acl` reads the `system.posix_acl_access` attribute).
`readers` reduces a path to principals that are each *safe*: everyone whose request carries
the principal may read the file, whoever else they are.

- `everyone` when every entry of every object grants;
- `group:<name>` for a group named on the path (an owning group or an ACL entry) whose
  members may all read: every user entry grants (a member could be the owner or a named
  user), and the group's own entry grants, or, where the group is named nowhere on an
  object, every group entry and `other` grant;
- `user:<name>` for every user of the user database who may read, with the groups the
  database gives them.

The reduction follows acl(5)'s access check (owner, named users, the group class with the
mask, other) as the kernel does for one request; root's override is not mirrored (the index
answers root by the bits, like anyone). A request's principal set (`Principal`: a user and
their groups) is let through when it shares one principal with a file's readers.
"""

from __future__ import annotations

import grp
import os
import pwd
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import xxhash

from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import Frozen

EVERYONE = "everyone"
READ, SEARCH = 4, 1  # the permission bits of one class
FILE_NEED, DIR_NEED = READ, READ | SEARCH

# acl(5) entry tags, as the kernel stores them in `system.posix_acl_access`
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_ACL_VERSION = 2
_HEADER, _ENTRY = struct.Struct("<I"), struct.Struct("<HHI")


class AclFormatError(ValueError):
    """Permissions that cannot be understood (a malformed ACL attribute)."""


@dataclass(frozen=True)
class AclEntry:
    tag: int
    perm: int
    qualifier: int = -1  # the uid or gid of a named user or group entry


def parse_acl(blob: bytes) -> tuple[AclEntry, ...]:
    """The entries of a `system.posix_acl_access` value (little-endian version 2 header,
    then 8-byte entries: tag, permissions, id)."""
    if len(blob) < _HEADER.size or (len(blob) - _HEADER.size) % _ENTRY.size:
        raise AclFormatError(f"malformed POSIX ACL attribute of {len(blob)} bytes")
    (version,) = _HEADER.unpack_from(blob)
    if version != _ACL_VERSION:
        raise AclFormatError(f"POSIX ACL attribute of unknown version {version}")
    entries = []
    for offset in range(_HEADER.size, len(blob), _ENTRY.size):
        tag, perm, qualifier = _ENTRY.unpack_from(blob, offset)
        if tag not in (USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER):
            raise AclFormatError(f"POSIX ACL entry with unknown tag {tag:#x}")
        entries.append(AclEntry(tag, perm & 7, qualifier if tag in (USER, GROUP) else -1))
    return tuple(entries)


@dataclass(frozen=True)
class ObjectPermissions:
    """One object on a file's path: its owner, group, mode and access ACL (None: none, the
    mode bits are the whole story), and the bits a reader needs on it."""

    uid: int
    gid: int
    mode: int
    acl: tuple[AclEntry, ...] | None = None
    need: int = FILE_NEED

    def classes(self) -> tuple[int, dict[int, int], dict[int, tuple[int, ...]], int]:
        """(owner bits, named uid -> effective bits, group-class gid -> the effective bits of
        each of its entries, other bits): the mask applied to every entry of the group class
        but the owner's. An owning group also named in an ACL entry keeps two entries: acl(5)
        grants a request by one matching entry that holds every bit asked, never by bits
        gathered from several. Linux consults an ACL only while the mode's group bits (the
        mask) grant something: an ACL whose mask is empty leaves the mode bits alone to
        decide, as here."""
        owner, other = (self.mode >> 6) & 7, self.mode & 7
        if not self.acl or not (self.mode >> 3) & 7:
            return owner, {}, {self.gid: ((self.mode >> 3) & 7,)}, other
        mask = next((e.perm for e in self.acl if e.tag == MASK), 7)
        users: dict[int, int] = {}
        groups: dict[int, tuple[int, ...]] = {}
        for e in self.acl:
            if e.tag == USER_OBJ:
                owner = e.perm
            elif e.tag == USER:
                users[e.qualifier] = e.perm & mask
            elif e.tag in (GROUP_OBJ, GROUP):
                gid = self.gid if e.tag == GROUP_OBJ else e.qualifier
                groups[gid] = (*groups.get(gid, ()), e.perm & mask)
            elif e.tag == OTHER:
                other = e.perm
        return owner, users, groups, other

    def grants(self, uid: int, gids: Iterable[int]) -> bool:
        """acl(5)'s access check for one request of `need` by `uid` with `gids`."""
        owner, users, groups, other = self.classes()
        if uid == self.uid:
            return _has(owner, self.need)
        if uid in users:
            return _has(users[uid], self.need)
        mine = set(gids)
        matched = [bits for gid, entries in groups.items() if gid in mine for bits in entries]
        if matched:
            return any(_has(bits, self.need) for bits in matched)
        return _has(other, self.need)

    def grants_everyone(self) -> bool:
        owner, users, groups, other = self.classes()
        entries = [bits for each in groups.values() for bits in each]
        return all(_has(b, self.need) for b in (owner, other, *users.values(), *entries))

    def grants_group(self, gid: int) -> bool:
        """Whether every request carrying group `gid` is granted, whoever its user is."""
        owner, users, groups, other = self.classes()
        if not all(_has(b, self.need) for b in (owner, *users.values())):
            return False
        if gid in groups:  # one of its own entries grants, whatever else matches
            return any(_has(bits, self.need) for bits in groups[gid])
        entries = [bits for each in groups.values() for bits in each]
        return all(_has(b, self.need) for b in (other, *entries))

    def named_groups(self) -> set[int]:
        return set(self.classes()[2])


def _has(bits: int, need: int) -> bool:
    return bits & need == need


@dataclass
class UserDb:
    """The users and groups principals are named from: uid -> (name, gids), gid -> name."""

    users: dict[int, tuple[str, frozenset[int]]] = field(default_factory=dict)
    groups: dict[int, str] = field(default_factory=dict)

    @classmethod
    def system(cls) -> UserDb:
        """This machine's database (`pwd`, `grp`), each user's groups as `id` lists them."""
        groups = {g.gr_gid: g.gr_name for g in grp.getgrall()}
        users: dict[int, tuple[str, frozenset[int]]] = {}
        for p in pwd.getpwall():
            users.setdefault(p.pw_uid, (p.pw_name, _groups_of(p.pw_name, p.pw_gid)))
        return cls(users, groups)

    def user_name(self, uid: int) -> str:
        return self.users[uid][0] if uid in self.users else f"#{uid}"

    def group_name(self, gid: int) -> str:
        return self.groups.get(gid, f"#{gid}")


def _groups_of(name: str, gid: int) -> frozenset[int]:
    try:
        return frozenset(os.getgrouplist(name, gid))
    except OSError:
        return frozenset({gid})


class Readers(Frozen):
    """Who may read one file: its principals, their fingerprint (what a re-stamp compares),
    and why it fell back to its owner alone, when it did."""

    principals: tuple[str, ...]
    fingerprint: str
    reason: str = ""


# the stamp of a document whose source mirrors no permissions (its source token lets it in)
OFF_STAMP = Readers(principals=(), fingerprint="off")


def fingerprint_of(principals: Sequence[str]) -> str:
    return xxhash.xxh3_64_hexdigest("\n".join(principals).encode())


def readers(path: Sequence[ObjectPermissions], db: UserDb) -> Readers:
    """The principals that may read the last object of `path` (the root first)."""
    if all(o.grants_everyone() for o in path):
        return _readers([EVERYONE])
    named = set().union(*(o.named_groups() for o in path))
    groups = [gid for gid in sorted(named) if all(o.grants_group(gid) for o in path)]
    users = [uid for uid, (_, gids) in db.users.items() if all(o.grants(uid, gids) for o in path)]
    principals = [f"group:{db.group_name(g)}" for g in groups]
    principals += [f"user:{db.user_name(u)}" for u in users]
    return _readers(principals)


def owner_only(uid: int | None, db: UserDb, reason: str) -> Readers:
    """Fail closed: permissions that cannot be read leave the file to its owner (nobody when
    even the owner is unknown), and say why."""
    principals = [] if uid is None else [f"user:{db.user_name(uid)}"]
    return _readers(principals, reason)


def _readers(principals: Iterable[str], reason: str = "") -> Readers:
    ordered = tuple(sorted(set(principals)))
    return Readers(
        principals=ordered, fingerprint=fingerprint_of((*ordered, reason)), reason=reason
    )


def source_token(source: str) -> str:
    """What every chunk of `source` carries in its `readers` beside its principals: a source
    that does not mirror permissions is let through by it (`Settings.readers_of`)."""
    return f"source:{source}"


class Principal(Frozen):
    """Who a request reads as: a user and the groups they belong to."""

    user: str
    groups: tuple[str, ...] = ()

    def tokens(self) -> tuple[str, ...]:
        """The principals this request carries, `everyone` included."""
        return (EVERYONE, f"user:{self.user}", *(f"group:{g}" for g in self.groups))


def principal_of(name: str) -> Principal:
    """`id NAME`: the user (a name, or a uid) and every group the user database gives them.
    `InvalidRequestError` names an unknown user."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise InvalidRequestError(f"no such user: {name!r} (not in this system's users)") from None
    db = UserDb(groups={g.gr_gid: g.gr_name for g in grp.getgrall()})
    gids = sorted(_groups_of(entry.pw_name, entry.pw_gid))
    return Principal(user=entry.pw_name, groups=tuple(db.group_name(g) for g in gids))
