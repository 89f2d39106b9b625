"""A data dir as one snapshot file and back: which files it holds, the tar that carries them
with a manifest of checksums as its last member, the check that every member is whole, and
the unpacking of a checked file into a new dir.

Each Qdrant Edge shard travels as a shard snapshot of its own (`vectors/<collection>.shard`,
a gzipped tar of the flushed shard) and is unpacked with `EdgeShard.unpack_snapshot`, the engine's
own restore. The collections of a Qdrant server travel as points files
(`points/<collection>.jsonl.gz`: a header line naming the collection and its embedder, then
one line per point with its payload and dense vector), which a restore upserts into the
target's stores. What a process recreates on its own is left out: the bytewax recovery
store, the retrieval log, the snapshots themselves, the endpoint record and the ingest lock.

A file is written as `<name>.partial` and renamed once whole and synced to disk, so a
process killed mid-write never leaves a file that `snapshot list` shows.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict
from qdrant_edge import EdgeShard

from ragstream.core.errors import BadSnapshotError
from ragstream.core.models import EmbedderVersion, IndexedChunk
from ragstream.core.snapshot import SnapshotManifest, SnapshotMember

MANIFEST = "ragstream-snapshot.json"
SHARD_SUFFIX = ".shard"
PARTIAL = ".partial"
SCRATCH = ".shards-"
LEFT_OUT_DIRS = frozenset({"recovery", "logs", "snapshots"})
LEFT_OUT_FILES = frozenset({"state/endpoint.json", "state/ingest.lock", "state/format.lock"})
CHUNK = 1 << 20
SHARD_GZIP_LEVEL = 1  # the zeros are what shrink; a higher level buys little on vectors
GZIP_MAGIC = b"\x1f\x8b"
POINTS_DIR = "points"
POINTS_SUFFIX = ".jsonl.gz"
POINTS_PAGE = 1024

PointPage = list[tuple[IndexedChunk, list[float]]]


class PointsHeader(BaseModel):
    """The first line of a points file: the collection its points are of, and its embedder."""

    model_config = ConfigDict(frozen=True)

    collection: str
    embedder: EmbedderVersion


def _is_shard(path: Path) -> bool:
    return path.parent.name == "vectors" and (path / "edge_config.json").is_file()


def data_files(data_dir: Path) -> Iterator[tuple[str, Path]]:
    """(member name, path) of every file a snapshot of `data_dir` holds, in a fixed order;
    an Edge shard's directory is one member, `vectors/<collection>.shard`."""
    for here, dirs, files in os.walk(data_dir):
        top = Path(here)
        rel = top.relative_to(data_dir)
        if rel.parts and (rel.parts[0] in LEFT_OUT_DIRS or rel.parts[-1].startswith(".")):
            dirs[:] = []
            continue
        for d in sorted(dirs):
            if _is_shard(top / d):
                yield (rel / d).as_posix() + SHARD_SUFFIX, top / d
        dirs[:] = sorted(d for d in dirs if not _is_shard(top / d))
        for f in sorted(files):
            name = (rel / f).as_posix()
            if name not in LEFT_OUT_FILES and not f.startswith("."):
                yield name, top / f


def _digest(fileobj: IO[bytes], size: int) -> str:
    sha = hashlib.sha256()
    left = size
    while left > 0:
        block = fileobj.read(min(CHUNK, left))
        if not block:
            raise EOFError("cut short")
        sha.update(block)
        left -= len(block)
    return sha.hexdigest()


def _shard_tar(shard: Path, scratch: Path) -> Path:
    """The shard's files as one gzipped tar (what `EdgeShard.unpack_snapshot` reads, once
    unzipped): the engine preallocates its files sparse, mostly zeros, which a plain tar
    would store in full (a 3-chunk shard: 220 MB plain, 50 kB gzipped)."""
    out = scratch / f"{shard.name}{SHARD_SUFFIX}"
    with tarfile.open(out, "w:gz", compresslevel=SHARD_GZIP_LEVEL) as tar:
        for path in sorted(p for p in shard.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(shard).as_posix(), recursive=False)
    return out


def _add(tar: tarfile.TarFile, name: str, path: Path) -> SnapshotMember:
    info = tar.gettarinfo(str(path), arcname=name)
    with path.open("rb") as f:
        digest = _digest(f, info.size)
        f.seek(0)
        tar.addfile(info, f)
    return SnapshotMember(name=name, size=info.size, sha256=digest)


def write_points(out: Path, header: PointsHeader, pages: Iterable[PointPage]) -> Path:
    """A points file at `out`: `header`, then each point of `pages` (its whole chunk and its
    dense vector) on a line of its own, gzipped."""
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=SHARD_GZIP_LEVEL) as fh:
        fh.write(header.model_dump_json() + "\n")
        for page in pages:
            for chunk, vector in page:
                fh.write(json.dumps({"chunk": chunk.model_dump(mode="json"), "vector": vector}))
                fh.write("\n")
    return out


def points_files(data_dir: Path) -> list[Path]:
    """The points files unpacked under `data_dir` (a snapshot of a server), in name order."""
    return sorted((data_dir / POINTS_DIR).glob(f"*{POINTS_SUFFIX}"))


def read_points(path: Path) -> tuple[PointsHeader, Iterator[PointPage]]:
    """The header of a points file and its points, `POINTS_PAGE` at a time."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        header = PointsHeader.model_validate_json(fh.readline())

    def pages() -> Iterator[PointPage]:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            fh.readline()
            page: PointPage = []
            for line in fh:
                point = json.loads(line)
                page.append((IndexedChunk.model_validate(point["chunk"]), point["vector"]))
                if len(page) >= POINTS_PAGE:
                    yield page
                    page = []
            if page:
                yield page

    return header, pages()


def write_snapshot(
    data_dir: Path,
    out: Path,
    manifest_of: Callable[[list[SnapshotMember]], SnapshotManifest],
    more: Callable[[Path], Iterator[tuple[str, Path]]] | None = None,
) -> SnapshotManifest:
    """Write the snapshot of `data_dir` to `out` (the caller keeps writers out meanwhile);
    `manifest_of(members)` says the rest of the manifest. `more(scratch)` yields further
    members (name, a file it wrote under `scratch`), each removed once copied in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + PARTIAL)
    members: list[SnapshotMember] = []
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=SCRATCH) as scratch:
        with tarfile.open(partial, "w") as tar:
            for name, path in data_files(data_dir):
                src = _shard_tar(path, Path(scratch)) if name.endswith(SHARD_SUFFIX) else path
                members.append(_add(tar, name, src))
                if src != path:
                    src.unlink()
            for name, src in more(Path(scratch)) if more is not None else ():
                members.append(_add(tar, name, src))
                src.unlink()
            manifest = manifest_of(members)
            body = manifest.model_dump_json(indent=2).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime = len(body), int(manifest.created_at)
            tar.addfile(info, io.BytesIO(body))
        with partial.open("rb") as f:
            os.fsync(f.fileno())
    partial.replace(out)
    _sync_dir(out.parent)
    return manifest


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(path: Path) -> SnapshotManifest:
    """The manifest alone (no checksum is checked): what `snapshot list` shows."""
    try:
        with tarfile.open(path, "r:") as tar:
            member = tar.getmember(MANIFEST)
            body = tar.extractfile(member)
            assert body is not None
            return SnapshotManifest.model_validate_json(body.read())
    except (tarfile.TarError, KeyError, OSError, ValueError, EOFError) as exc:
        raise BadSnapshotError(f"{path}: not a readable snapshot ({exc})") from exc


def checked(path: Path, unpack_to: Path | None = None) -> SnapshotManifest:
    """The manifest of `path` once every member is read and matches its checksum and
    size, none missing and none extra; with `unpack_to`, the members are written there too
    (shards through the engine's own unpacking). `BadSnapshotError` names the first fault."""
    manifest = read_manifest(path)
    expected = {m.name: m for m in manifest.members}
    seen: set[str] = set()
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                if info.name == MANIFEST:
                    continue
                _check_member(tar, info, expected, unpack_to)
                seen.add(info.name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadSnapshotError(f"{path}: cut short or unreadable ({exc})") from exc
    missing = sorted(set(expected) - seen)
    if missing:
        raise BadSnapshotError(f"{path}: member {missing[0]} is missing")
    return manifest


def _check_member(
    tar: tarfile.TarFile,
    info: tarfile.TarInfo,
    expected: dict[str, SnapshotMember],
    unpack_to: Path | None,
) -> None:
    want = expected.get(info.name)
    if want is None or not info.isfile():
        raise BadSnapshotError(f"member {info.name} is not in the manifest")
    body = tar.extractfile(info)
    assert body is not None
    try:
        digest = _digest(body, info.size)
    except EOFError as exc:
        raise BadSnapshotError(f"member {info.name} is cut short") from exc
    if (info.size, digest) != (want.size, want.sha256):
        raise BadSnapshotError(f"member {info.name} does not match its checksum")
    if unpack_to is not None:
        _unpack_member(tar, info, unpack_to)


def _unpack_member(tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path) -> None:
    """One checked member under `target` (names that would leave it are refused)."""
    dest = (target / info.name).resolve()
    if not dest.is_relative_to(target.resolve()):
        raise BadSnapshotError(f"member {info.name} points outside the data dir")
    dest.parent.mkdir(parents=True, exist_ok=True)
    body = tar.extractfile(info)
    assert body is not None
    if info.name.endswith(SHARD_SUFFIX):
        shard_tar = dest.with_name(dest.name + PARTIAL)
        with shard_tar.open("wb") as out:
            zipped = body.read(2) == GZIP_MAGIC
            body.seek(0)
            shutil.copyfileobj(gzip.GzipFile(fileobj=body) if zipped else body, out, CHUNK)
        EdgeShard.unpack_snapshot(str(shard_tar), str(dest.with_suffix("")))
        shard_tar.unlink()
        return
    with dest.open("wb") as f:
        while block := body.read(CHUNK):
            f.write(block)
    os.utime(dest, (info.mtime, info.mtime))


def listed(folder: Path) -> list[Path]:
    """The whole snapshot files in `folder`, newest name first (partial ones left out)."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("*.tar") if p.is_file()), reverse=True)


def sweep_partials(folder: Path) -> None:
    """Remove what a killed `create` left half written (the file and its scratch dir)."""
    for leftover in folder.glob(f"*{PARTIAL}") if folder.is_dir() else ():
        leftover.unlink(missing_ok=True)
    for scratch in folder.glob(f"{SCRATCH}*") if folder.is_dir() else ():
        shutil.rmtree(scratch, ignore_errors=True)
