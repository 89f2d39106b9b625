"""Pure parts of the folder source and identities: globs, catch-up planning, ids."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ragstream.connectors.fs import FolderSource, PathFilter, _Debouncer, glob_match
from ragstream.connectors.protocols import SourceEntry
from ragstream.connectors.source_input import plan_catch_up
from ragstream.core.ids import content_hash, doc_id, normalize_text, point_id
from ragstream.core.models import FileFingerprint
from ragstream.core.settings import DEFAULT_EXCLUDES, Settings
from ragstream.core.source_config import FolderConfig


def test_globs() -> None:
    assert glob_match("a.md", "**/*.md") and glob_match("x/y/a.md", "**/*.md")
    assert not glob_match("x/a.mdx", "**/*.md")
    assert glob_match(".git/config", "**/.git/**") and glob_match("x/.git/a/b", "**/.git/**")
    assert glob_match("keys/server.pem", "**/*.pem") and glob_match(".env", "**/.env")


def test_default_filter_skips_secrets_and_vcs() -> None:
    pf = PathFilter(tuple(Settings().include), DEFAULT_EXCLUDES)
    assert pf.wanted("docs/guide.md") and pf.wanted("a/b.PDF")
    for rel in (".git/HEAD.md", "sub/.env", "certs/x.pem", "notes.md.swp", "a/~$doc.docx"):
        assert not pf.wanted(rel), rel


@given(st.text(min_size=1, max_size=40))
def test_hash_ignores_whitespace_formatting(text: str) -> None:
    spaced = "  " + text.replace(" ", " \n ") + "\t"
    assert content_hash(text, "k") == content_hash(spaced, "k")
    assert normalize_text(spaced) == normalize_text(text)


def test_ids_are_deterministic_and_position_free() -> None:
    h = content_hash("Some text.", "k")
    assert point_id("s:a.md", h, 0) == point_id("s:a.md", h, 0)
    assert point_id("s:a.md", h, 0) != point_id("s:a.md", h, 1)
    assert point_id("s:a.md", h, 0) != point_id("s:b.md", h, 0)
    assert doc_id("s", "dir\\x.md") == "s:dir/x.md"


def _found(root: Path, names: list[str], mtime: int = 1) -> list[SourceEntry]:
    fp = FileFingerprint(size=10, mtime_ns=mtime)
    return [SourceEntry(f"s:{n}", str(root / n), n, lambda: fp) for n in names]


def _folder(root: Path) -> FolderSource:
    return FolderSource(FolderConfig(name="s", root=root), PathFilter((), ()))


def test_catch_up_emits_only_changes_and_deletes(tmp_path: Path) -> None:
    src = _folder(tmp_path)
    known = {
        "s:a.md": {"10:1"},
        "s:b.md": {"10:0"},
        "s:gone.md": {"10:1"},
        "other:x.md": {"1:1"},
    }
    events, guard = plan_catch_up(
        src, _found(tmp_path, ["a.md", "b.md", "c.md"]), known, 0.9, 10, False
    )
    assert guard is None
    got = {(e.doc_id, e.kind) for e in events}
    assert got == {("s:b.md", "upsert"), ("s:c.md", "upsert"), ("s:gone.md", "delete")}


def test_catch_up_rereads_a_doc_with_mixed_fingerprints(tmp_path: Path) -> None:
    """A crash between write and tombstone leaves two fingerprints: re-diff that doc."""
    src = _folder(tmp_path)
    events, _ = plan_catch_up(
        src, _found(tmp_path, ["a.md"]), {"s:a.md": {"10:1", "9:0"}}, 0.5, 10, False
    )
    assert [(e.doc_id, e.kind) for e in events] == [("s:a.md", "upsert")]


def test_mass_delete_guard(tmp_path: Path) -> None:
    src = _folder(tmp_path)
    known = {f"s:{i}.md": {"10:1"} for i in range(20)}
    events, guard = plan_catch_up(src, [], known, 0.5, 10, False)
    assert guard is not None and guard.would_delete == 20 and events == []
    events, guard = plan_catch_up(src, [], known, 0.5, 10, True)
    assert guard is None and len(events) == 20


def test_debouncer_releases_completed_writes_after_settle_and_plain_ones_after_quiet() -> None:
    bouncer = _Debouncer(quiet_s=60.0, settle_s=0.0)
    bouncer.touch("/r/plain.md")
    bouncer.touch("/r/closed.md", completed=True)
    assert bouncer.ready() == ["/r/closed.md"]  # the writer closed it: its bytes are final
    assert bouncer.ready() == []  # released once
    bouncer.touch("/r/again.md", completed=True)
    bouncer.touch("/r/again.md")  # … but written to again: back to the full quiet time
    assert bouncer.ready() == []
    fast = _Debouncer(quiet_s=0.0, settle_s=1.0)  # settle never exceeds the quiet time
    fast.touch("/r/x.md", completed=True)
    assert fast.ready() == ["/r/x.md"]
