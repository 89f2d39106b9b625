"""A folder, a git repository and an S3 prefix (moto's S3 server on loopback, in its own
process) of the same N small text files, side by side: the first sync, the catch-up scan of
an unchanged source (a no-op sync, median of `--repeats`, and the listing alone, median of
`--repeats`), and the re-sync after one file
changes (git: one commit; S3: one object overwritten), all in one process after a warm-up
sync (the model loads once, outside the figures). The git and S3 sides count the blobs /
objects they read: a scan must read none, the one-file re-sync exactly one. Ratios against
the folder: the first sync's throughput and the no-op sync (S3 target: within 2x of the
folder's no-op).

Then, as a user runs them, the console script in subprocesses on each source's data dir:
a no-op `ragstream sync SOURCE --data-dir D` against `ragstream status --data-dir D`,
interleaved, `--repeats` times each; medians and their ratio (target: at most 1.5x). The
embedder (`RAGSTREAM_EMBEDDER`) is `--embedder`: a preset, or a directory by path.

    .venv/bin/python bench/sources.py [--files 2000] [--embedder minilm-l6] [--repeats 5]
        [--kinds folder,git,s3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream.connectors import git, s3
from ragstream.connectors.sources import open_source, path_filter_of
from ragstream.core.models import SyncReport
from ragstream.core.settings import Settings
from ragstream.service import ingest
from tests.harness.gitrepo import GitRepo
from tests.harness.s3server import S3Server

WORDS = [
    "river",
    "stone",
    "lantern",
    "orchard",
    "signal",
    "copper",
    "meadow",
    "harbor",
    "ledger",
    "violet",
    "quartz",
]


@dataclass(frozen=True)
class Run:
    """One source's figures (seconds; blob / object reads on the git and S3 sides only)."""

    kind: str
    first_s: float
    scan_s: float  # listing + fingerprints, no index
    noop_s: float  # a sync that finds nothing changed
    noop_reads: int
    one_s: float  # a sync after one file changed
    one_changed: int
    one_embedded: int
    one_reads: int
    cli_noop_s: float = 0.0  # median wall of `ragstream sync` (no-op), a subprocess
    cli_status_s: float = 0.0  # median wall of `ragstream status` on the same data dir


def text_of(i: int, rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(40))
    return f"Document {i}. It records entry {i * 7919 % 100003}: {words}.\n"


def files_of(n: int, seed: int = 5) -> dict[str, str]:
    rng = random.Random(seed)
    return {f"d{i // 100:02d}/doc{i:05d}.txt": text_of(i, rng) for i in range(n)}


def reads() -> int:
    return git.blob_reads() + s3.object_reads()


def timed(fn: Callable[[], SyncReport]) -> tuple[float, SyncReport, int]:
    before = reads()
    started = time.perf_counter()
    report = fn()
    return time.perf_counter() - started, report, reads() - before


def measure(
    kind: str, spec: str, settings: Settings, edit: Callable[[], None], repeats: int
) -> Run:
    def sync() -> SyncReport:
        return ingest.sync([spec], settings=settings)

    def listing() -> float:
        source = open_source(config, path_filter_of(settings))
        started = time.perf_counter()
        listed = [e.fingerprint for e in source.entries()]
        assert all(listed)
        return time.perf_counter() - started

    first_s, first, _ = timed(sync)
    assert not first.dead_letters, first.dead_letters
    (config,) = settings.with_paths([spec]).sources
    scan_s = statistics.median(listing() for _ in range(repeats))
    noops = [timed(sync) for _ in range(repeats)]
    assert all(report.docs_changed == 0 for _, report, _ in noops), noops
    noop_s = statistics.median(wall for wall, _, _ in noops)
    noop_reads = max(read for _, _, read in noops)
    edit()
    one_s, one, one_reads = timed(sync)
    return Run(
        kind,
        first_s,
        scan_s,
        noop_s,
        noop_reads,
        one_s,
        one.docs_changed,
        one.chunks_embedded,
        one_reads,
    )


def cli_noop(spec: str, data: Path, embedder: str, repeats: int) -> tuple[float, float]:
    """Median walls of a no-op `ragstream sync` and of `ragstream status`, interleaved."""
    env = os.environ | {"RAGSTREAM_EMBEDDER": embedder, "HF_HUB_OFFLINE": "1"}
    cli = str(Path(sys.executable).parent / "ragstream")
    where = ["--data-dir", str(data), "--json"]
    walls: dict[str, list[float]] = {"sync": [], "status": []}
    for _ in range(repeats):
        for verb, args in (("sync", [spec, *where]), ("status", where)):
            started = time.perf_counter()
            done = subprocess.run([cli, verb, *args], env=env, capture_output=True, text=True)
            walls[verb].append(time.perf_counter() - started)
            assert done.returncode == 0, done.stderr[-2000:]
            if verb == "sync":
                assert json.loads(done.stdout)["docs_changed"] == 0, done.stdout
    return statistics.median(walls["sync"]), statistics.median(walls["status"])


def run(n: int, embedder: str, base: Path, repeats: int, kinds: list[str]) -> list[Run]:
    files = files_of(n)
    edited = sorted(files)[n // 2]
    new_text = files[edited].replace("Document", "Edited document", 1)
    folder = base / "folder"
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    repo = GitRepo(base / "repo")
    for rel, text in files.items():
        (repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / rel).write_text(text)
    from dulwich import porcelain

    porcelain.add(repo.repo, [str(repo.root / rel) for rel in files])
    repo.commit("the files")

    def edit_folder() -> None:
        path = folder / edited
        mtime = path.stat().st_mtime_ns + 10**9
        path.write_text(new_text)
        os.utime(path, ns=(mtime, mtime))

    def edit_repo() -> None:
        repo.write(edited, new_text)
        repo.commit("edit one file")

    server = S3Server(process=True).start()  # a store of its own, as on another machine
    os.environ.update(server.environment())  # as a user's shell holds them (the CLI too)
    bucket = server.bucket(files, prefix="docs/") if "s3" in kinds else ""

    def edit_object() -> None:
        server.put(bucket, f"docs/{edited}", new_text)

    try:
        return measure_each(base, embedder, repeats, kinds, [
            ("folder", str(folder), edit_folder),
            ("git", f"{repo.url}@main", edit_repo),
            ("s3", f"s3://{bucket}/docs", edit_object),
        ])  # fmt: skip
    finally:
        server.stop()  # never left running, whatever failed


def measure_each(
    base: Path,
    embedder: str,
    repeats: int,
    kinds: list[str],
    sources: list[tuple[str, str, Callable[[], None]]],
) -> list[Run]:
    """After a warm-up sync, each chosen source's figures in one process, then its CLI rows."""
    warm = base / "warm"
    (warm / "w.txt").parent.mkdir(parents=True)
    (warm / "w.txt").write_text("A warm-up file: the model loads here, not in the figures.\n")
    ingest.sync([warm], settings=Settings(data_dir=base / "data-warm", embedder=embedder))
    out = []
    for kind, spec, edit in sources:
        if kind not in kinds:
            continue
        settings = Settings(data_dir=base / f"data-{kind}", embedder=embedder)
        measured = measure(kind, spec, settings, edit, repeats)
        noop, status = cli_noop(spec, settings.data_dir, embedder, repeats)
        out.append(replace(measured, cli_noop_s=noop, cli_status_s=status))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--embedder", default="minilm-l6", help="a preset or a directory")
    parser.add_argument(
        "--repeats", type=int, default=5, help="no-op syncs and listings, and CLI runs of each verb"
    )
    parser.add_argument("--kinds", default="folder,git,s3", help="sources to run (folder first)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = run(args.files, args.embedder, Path(tmp), args.repeats, args.kinds.split(","))
    print(f"{args.files} files, embedder {args.embedder}")
    print(
        f"{'source':<8} {'first sync':>11} {'listing':>9} {'no-op sync':>11} {'reads':>6} "
        f"{'1-file sync':>12} {'changed':>8} {'embedded':>9} {'reads':>6}"
    )
    for r in runs:
        reads = (str(r.noop_reads), str(r.one_reads)) if r.kind != "folder" else ("-", "-")
        print(
            f"{r.kind:<8} {r.first_s:>10.1f}s {r.scan_s:>8.3f}s {r.noop_s:>10.2f}s {reads[0]:>6} "
            f"{r.one_s:>11.2f}s {r.one_changed:>8} {r.one_embedded:>9} {reads[1]:>6}"
        )
    print(f"CLI subprocesses, median of {args.repeats} each (target: no-op sync <= 1.5x status)")
    print(f"{'source':<8} {'no-op sync':>11} {'status':>8} {'ratio':>6}")
    for r in runs:
        ratio = r.cli_noop_s / r.cli_status_s
        print(f"{r.kind:<8} {r.cli_noop_s:>10.2f}s {r.cli_status_s:>7.2f}s {ratio:>5.2f}x")
    folder = next((r for r in runs if r.kind == "folder"), None)
    if folder is not None:
        print("against the folder (throughput: files per second of the first sync)")
        print(f"{'source':<8} {'throughput':>11} {'no-op sync':>11}")
        for r in runs:
            speed = folder.first_s / r.first_s
            print(f"{r.kind:<8} {speed:>10.2f}x {r.noop_s / folder.noop_s:>10.2f}x")


if __name__ == "__main__":
    main()
