"""The crash-recovery campaign shared by tests/fault/test_crash_recovery.py and bench/crash.py.

A real `ragstream sync` subprocess (tests/harness/crash_worker.py: the CLI with encoder calls
audited) indexes a folder of real documents and is SIGKILLed, run after run, either at an
exact step of the write order (a hook in the worker) or after a random delay (from here);
the folder is mutated between runs with the same operation generator as the chaos test.
A final run is left to finish, and then:

- index == folder: the same check as the chaos test (bench/_chaos.py), against a fresh sync;
- no content hash is embedded twice for the same embedder version, in the honest sense: a
  kill between the encode and the vector write loses the vector, and encoding that text
  again is required, not a waste. So after every run the set of audited hashes whose vector
  is durably in the store is read back, and an encode of a hash already in that set (in a
  later run) is a violation, as is a hash encoded twice within one run (batches run one
  after another, each writing its vectors before the next one embeds).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ragstream.core.ids import content_hash
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from tests.harness.chaos import (
    DEFAULT_EMBEDDER,
    FIELDS,
    REPO,
    Chaos,
    Mismatch,
    abstracts,
    build_tree,
    index_mismatches,
    read_index,
    reference_view,
)

WORKER = REPO / "tests" / "harness" / "crash_worker.py"
# Hooks that fire in every run with new content; tombstone/fingerprint hooks need a change.
FIRST_RUN_HOOKS = ("encode", "lexical.commit", "vectors.upsert")
LATER_HOOKS = ("lexical.tombstone", "vectors.set_fingerprint")


@dataclass
class CrashRun:
    kill: str  # "<hook>:<n>", "timer:<seconds>", or "none" (the final, clean run)
    returncode: int
    seconds: float
    encoded: int  # texts encoded in this run

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


@dataclass
class CrashResult:
    runs: list[CrashRun] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    encoded: int = 0  # texts encoded over all runs
    reencoded_unstored: int = 0  # encoded again because the kill came before the vector write
    unaudited: int = 0  # live hashes no audited encode produced (0 = the counting is complete)
    docs: int = 0

    @property
    def kills(self) -> int:
        return sum(r.killed for r in self.runs)


def plan_kills(rng: random.Random, kills: int, timer_share: float) -> list[str]:
    """Each point hook once (in a seeded order) before any repeats; `timer_share` of the
    kills (never the first) come after a random delay instead.

    The first run has nothing to tombstone yet, so it always dies at an upsert-side hook.
    Point kills make a campaign deterministic (same seed, same kills, same batches); timed
    ones can land anywhere, inside a store write too, and are not reproducible.
    """
    points = [rng.choice(FIRST_RUN_HOOKS)]
    rest = [h for h in FIRST_RUN_HOOKS + LATER_HOOKS if h != points[0]]
    rng.shuffle(rest)
    points += rest
    plan = []
    for i in range(kills):
        if i > 0 and rng.random() < timer_share:
            plan.append(f"timer:{rng.uniform(0.0, 3.0):.2f}")
        else:
            nth = rng.randint(1, 3) if i == 0 else 1
            plan.append(f"{points[i % len(points)]}:{nth}")
    return plan


def _audited(audit: Path, run: str) -> list[str]:
    if not audit.exists():
        return []
    texts = []
    for line in audit.read_text().splitlines():
        record = json.loads(line)
        if record["run"] == run:
            texts += record["texts"]
    return texts


def run_worker(
    root: Path, data: Path, audit: Path, run: str, kill: str, embedder: str = DEFAULT_EMBEDDER
) -> CrashRun:
    env = dict(
        os.environ,
        RAGSTREAM_EMBEDDER=embedder,
        CRASH_AUDIT=str(audit),
        CRASH_RUN=run,
        CRASH_KILL="" if kill.startswith(("timer", "none")) else kill,
        RAGSTREAM_SYNC__INGEST_BATCH_DOCS="16",  # several batches per run, so kills land mid-run
        # the two-store write order (BM25 first, vectors last) is what the kills probe; the
        # sparse leg has no such window (one write per chunk)
        RAGSTREAM_STORE__LEXICAL_BACKEND="tantivy",
        HF_HUB_OFFLINE="1",
    )
    cmd = [sys.executable, str(WORKER), "sync", str(root), "--data-dir", str(data), "--json"]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if kill.startswith("timer:"):
        delay = float(kill.split(":")[1])
        threading.Thread(target=_kill_later, args=(proc, audit, run, delay), daemon=True).start()
    _, stderr = proc.communicate(timeout=600)
    if proc.returncode not in (0, -signal.SIGKILL):
        tail = stderr.decode(errors="replace")[-2000:]
        raise AssertionError(f"run {run} ({kill}) exited {proc.returncode}:\n{tail}")
    return CrashRun(kill, proc.returncode, time.monotonic() - started, len(_audited(audit, run)))


def _kill_later(proc: subprocess.Popen[bytes], audit: Path, run: str, delay: float) -> None:
    """SIGKILL `delay` seconds after this run's first encode (indexing has begun by then)."""
    while proc.poll() is None and not _audited(audit, run):
        time.sleep(0.05)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)


def crash_campaign(
    work: Path,
    seed: int,
    kills: int,
    docs: int = 110,
    ops_between: int = 10,
    timer_share: float = 0.3,
    shared_docs: Path | None = None,
    embedder: str = DEFAULT_EMBEDDER,
) -> CrashResult:
    rng = random.Random(seed)
    root, data, audit = work / "corpus", work / "data", work / "audit.jsonl"
    outside = work / "outside"
    outside.mkdir(parents=True)
    pool = abstracts()
    build_tree(root, docs, rng, pool, shared_docs)
    chaos = Chaos(root, rng, pool, outside, dir_ops=False)
    settings = Settings(data_dir=data, embedder=embedder, store={"lexical_backend": "tantivy"})
    settings = settings.with_paths([root])
    result = CrashResult()
    stored: set[str] = set()  # audited hashes whose vector is durably in the store
    audited: set[str] = set()
    plan = [*plan_kills(rng, kills, timer_share), "none"]
    for i, kill in enumerate(plan):
        if i > 0:
            for _ in range(ops_between):
                chaos.step()
        run = f"run{i}"
        outcome = run_worker(root, data, audit, run, kill, embedder)
        result.runs.append(outcome)
        with open_runtime(settings) as rt:
            key = rt.chunker.key
            hashes = [content_hash(t, key) for t in _audited(audit, run)]
            seen: set[str] = set()
            for h in hashes:
                if h in stored:
                    result.violations.append(f"{run} ({kill}): re-encoded stored hash {h}")
                elif h in seen:
                    result.violations.append(f"{run} ({kill}): encoded {h} twice in one run")
                elif h in audited:
                    result.reencoded_unstored += 1
                seen.add(h)
            result.encoded += len(hashes)
            audited |= seen
            stored = set(rt.vectors.vectors_for_hashes(audited))
    if result.runs[-1].killed:
        raise AssertionError("the final run must finish on its own")
    actual = read_index(settings)
    result.docs = len(actual.docs)
    at = FIELDS.index("content_hash")
    live_hashes = {str(row[at]) for rows in actual.docs.values() for row in rows}
    result.unaudited = len(live_hashes - audited)
    expected = reference_view([root], work / "reference", embedder)
    result.mismatches = index_mismatches(actual, expected)
    return result
