"""Snapshots on a real synced data dir: create (embedded and through a serving process),
verify, restore into a new dir (0 drift, a sync of the same folder embeds nothing, the same
retrieval), and every kind of damaged file refused with its member named, writing nothing."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
import pytest

from ragstream import Client, api
from ragstream.connectors.snapshot_files import MANIFEST, SHARD_SUFFIX, listed
from ragstream.core.errors import BadSnapshotError, InvalidRequestError
from ragstream.core.settings import Settings, StoreSettings
from ragstream.core.snapshot import SnapshotManifest
from ragstream.service import audit, snapshots
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow

DOCS = [
    "md/docling_integrations_langchain.md",
    "md/docling_integrations_haystack.md",
    "md/docling_integrations_llamaindex.md",
]
QUESTION = "How does docling plug into LangChain?"
BEACON = "How often does the islet 1 beacon flash?"


@pytest.fixture(scope="module")
def synced(shared_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Settings]:
    root = tmp_path_factory.mktemp("snap")
    folder = copy_docs(shared_docs, DOCS, root / "docs", flat=True)
    settings = Settings(data_dir=root / "data")
    api.sync([folder], settings=settings)
    return folder, settings


@pytest.fixture(scope="module")
def snapshot_file(synced: tuple[Path, Settings]) -> Path:
    with Client(settings=synced[1]) as c:
        info = c.snapshot()
        assert [s.id for s in c.snapshots()] == [info.id]
    assert info.counts is not None and info.counts.chunks_live > 0
    assert info.counts.lexical_live == info.counts.chunks_live
    return Path(info.path)


def test_a_restored_dir_is_the_same_index_and_a_sync_embeds_nothing(
    synced: tuple[Path, Settings], snapshot_file: Path, tmp_path: Path
) -> None:
    folder, settings = synced
    manifest = snapshots.verify(settings, snapshot_file)
    assert any(m.name.endswith(SHARD_SUFFIX) for m in manifest.members)
    assert not any(m.name.startswith(("recovery/", "snapshots/")) for m in manifest.members)
    new = tmp_path / "restored"
    snapshots.restore(settings, snapshot_file, new)
    restored = settings.model_copy(update={"data_dir": new})
    report = audit.verify([folder], settings=restored)
    assert report.ok, report.counts()
    again = api.sync([folder], settings=restored)
    assert again.chunks_embedded == 0 and again.docs_changed == 0
    with Client(settings=settings) as old, Client(settings=restored) as moved:
        assert old.status().chunks_live == moved.status().chunks_live
        before = [r.point_id for r in old.retrieve(QUESTION, k=5).results]
        after = [r.point_id for r in moved.retrieve(QUESTION, k=5).results]
    assert before == after and before


def test_restore_refuses_a_non_empty_dir_unless_forced(
    synced: tuple[Path, Settings], snapshot_file: Path, tmp_path: Path
) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(InvalidRequestError, match="not empty"):
        snapshots.restore(synced[1], snapshot_file, busy)
    assert (busy / "keep.txt").read_text() == "mine"
    snapshots.restore(synced[1], snapshot_file, busy, force=True)
    assert not (busy / "keep.txt").exists() and (busy / "vectors").is_dir()


def _rewritten(src: Path, dst: Path, change: str) -> Path:
    """A copy of `src` with one fault: a byte flipped in the first shard, a member left out,
    or a manifest whose counts lie."""
    with tarfile.open(src) as tar, tarfile.open(dst, "w") as out:
        for info in tar:
            body = tar.extractfile(info)
            data = body.read() if body is not None else b""
            if change == "flip" and info.name.endswith(SHARD_SUFFIX) and data:
                data = data[:-600] + bytes([data[-600] ^ 0xFF]) + data[-599:]
                change = "done"
            if change == "drop" and info.name.startswith("state/"):
                change = "done"
                continue
            if change == "lie" and info.name == MANIFEST:
                m = SnapshotManifest.model_validate_json(data)
                assert m.counts is not None
                counts = m.counts.model_copy(update={"chunks_live": m.counts.chunks_live + 1})
                data = m.model_copy(update={"counts": counts}).model_dump_json().encode()
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return dst


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("flip", "does not match its checksum"),
        ("drop", "is missing"),
        ("lie", "the manifest counts"),
        ("cut", "cut short|not a readable snapshot"),
    ],
)
def test_a_damaged_snapshot_is_refused_with_the_fault_named_and_nothing_written(
    synced: tuple[Path, Settings], snapshot_file: Path, tmp_path: Path, fault: str, named: str
) -> None:
    if fault == "cut":
        bad = tmp_path / "cut.tar"
        bad.write_bytes(snapshot_file.read_bytes()[: snapshot_file.stat().st_size // 2])
    else:
        bad = _rewritten(snapshot_file, tmp_path / f"{fault}.tar", fault)
    with pytest.raises(BadSnapshotError, match=named):
        snapshots.verify(synced[1], bad)
    target = tmp_path / "target"
    with pytest.raises(BadSnapshotError, match=named):
        snapshots.restore(synced[1], bad, target)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]  # no scratch left


def test_a_create_that_dies_midway_leaves_nothing_listed(
    synced: tuple[Path, Settings], snapshot_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragstream.connectors import snapshot_files

    folder = snapshot_file.parent
    before = listed(folder)
    calls = {"n": 0}
    add = snapshot_files._add

    def dying(*args: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk went away")
        return add(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot_files, "_add", dying)
    with Client(settings=synced[1]) as c, pytest.raises(OSError, match="disk went away"):
        c.snapshot()
    assert listed(folder) == before  # the half file is a `.partial`, never listed
    monkeypatch.undo()
    snapshots.verify(synced[1], before[0])  # the earlier snapshot is intact
    with Client(settings=synced[1]) as c:
        c.snapshot()  # and the next create sweeps the leftover
    assert not list(folder.glob("*.partial"))


def test_a_served_data_dir_snapshots_in_its_process_and_downloads(
    synced: tuple[Path, Settings],
) -> None:
    settings = synced[1]
    with api.serve(settings, host="127.0.0.1", port=0) as url, Client(url=url) as remote:
        info = remote.snapshot()
        assert info.id in [s.id for s in remote.snapshots()]
        with Client(settings=settings) as routed:  # the data dir's clients go to the server
            assert routed.mode == "http" and routed.snapshots()[0].id == info.id
        got = httpx.get(f"{url}/v1/snapshots/{info.id}")
        assert got.status_code == 200 and got.content == Path(info.path).read_bytes()
        assert httpx.get(f"{url}/v1/snapshots/nope").status_code == 404
    snapshots.verify(settings, Path(info.path))


def test_a_forced_restore_that_fails_leaves_the_old_dir_whole(
    synced: tuple[Path, Settings], snapshot_file: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old"
    snapshots.restore(synced[1], snapshot_file, old)
    before = sorted((p.relative_to(old), p.stat().st_size) for p in old.rglob("*"))
    bad = _rewritten(snapshot_file, tmp_path / "lie.tar", "lie")  # fails after unpacking
    with pytest.raises(BadSnapshotError, match="the manifest counts"):
        snapshots.restore(synced[1], bad, old, force=True)
    assert sorted((p.relative_to(old), p.stat().st_size) for p in old.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lie.tar", "old"]  # no staging left
    restored = synced[1].model_copy(update={"data_dir": old})
    counts = snapshots.read_manifest(snapshot_file).counts
    with Client(settings=restored) as c:
        assert counts is not None and c.status().chunks_live == counts.chunks_live


def test_a_qdrant_client_data_dir_snapshots_and_restores(tmp_path: Path) -> None:
    """qdrant-client's local mode keeps the vectors in the data dir: the same file layer."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for n in range(3):
        (folder / f"n{n}.md").write_text(
            f"# Note {n}\n\nThe beacon on islet {n} flashes {n + 2} times.\n"
        )
    store = StoreSettings(vector_backend="qdrant")
    settings = Settings(data_dir=tmp_path / "data", store=store)
    api.sync([folder], settings=settings)
    with Client(settings=settings) as c:
        info = c.snapshot()
        before = [
            r.point_id for r in c.retrieve("How often does the islet 1 beacon flash?").results
        ]
    restored = settings.model_copy(update={"data_dir": tmp_path / "restored"})
    snapshots.restore(settings, Path(info.path), restored.data_dir)
    with Client(settings=restored) as c:
        after = [r.point_id for r in c.retrieve(BEACON).results]
    assert before == after and len(before) == 3
    assert api.sync([folder], settings=restored).chunks_embedded == 0
