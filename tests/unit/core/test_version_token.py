"""The version token the scan compares (`FileFingerprint.token`): a folder's file is its
size and mtime whatever was read from it; a version a source names (a git blob id, an S3
ETag, given with a `commit`) is that name whatever the size and mtime slots hold, so a git
point written when the mtime slot carried blob-id bits reads the same token as a fresh
listing, and no stored format needs rewriting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.models import FileFingerprint

sizes, times = st.integers(0, 2**40), st.integers(0, 2**62)
names = st.text("0123456789abcdef", min_size=1, max_size=40)


@given(sizes, times, st.text(max_size=40))
def test_a_files_token_is_its_size_and_mtime_whatever_was_read(
    size: int, mtime: int, digest: str
) -> None:
    listed = FileFingerprint(size=size, mtime_ns=mtime)
    read = FileFingerprint(size=size, mtime_ns=mtime, digest=digest)
    assert listed.token == read.token == f"{size}:{mtime}"
    assert FileFingerprint(size=size + 1, mtime_ns=mtime).token != listed.token
    assert FileFingerprint(size=size, mtime_ns=mtime + 1).token != listed.token


@given(names, names, sizes, times)
def test_a_named_version_is_its_name_whatever_the_slots_hold(
    blob: str, commit: str, size: int, mtime: int
) -> None:
    fresh = FileFingerprint(size=0, mtime_ns=0, digest=blob, commit=commit)
    stored = FileFingerprint(size=size, mtime_ns=mtime, digest=blob, commit=commit + "0")
    assert fresh.token == stored.token == blob  # another commit, same blob: same version
    assert FileFingerprint(size=0, mtime_ns=0, digest=blob + "0", commit=commit).token != blob
