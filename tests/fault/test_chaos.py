"""Chaos under watch: random file operations on a tree a real `ragstream watch` follows.

A seeded stream of creates, edits, appends, heading edits, renames, atomic saves (temp +
`os.replace`), save bursts, deletes, re-creations of deleted text, directory moves (within
the tree, out of it and back in) and directory deletes runs against a watched tree, some of
it while the watcher is mid-batch. After quiesce the index must equal a fresh sync of the
same folder (bench/_chaos.py). The long version is bench/chaos.py (1,000 ops, several runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.chaos import ChaosResult, chaos_run, chaos_tree

pytestmark = pytest.mark.slow  # a watch subprocess under a storm of file operations

SEED = 11
OPS = 150
EMBEDDER = "static"  # what chaos probes does not depend on the embedder; MiniLM's encodes would


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    work = tmp_path_factory.mktemp("chaos")
    return chaos_run(work, seed=SEED, ops=OPS, n_docs=30, embedder=EMBEDDER)


def test_the_operation_stream_is_seeded(tmp_path: Path) -> None:
    """Same seed, same operations, same tree: a failing seed can be replayed."""
    trees = []
    for name in ("one", "two"):
        chaos = chaos_tree(tmp_path / name, SEED, n_docs=30)
        log = []
        for _ in range(OPS):
            chaos.pause()  # drawn as in a real run, not slept
            log.append(chaos.step())
        files = {p.relative_to(chaos.root).as_posix(): p.read_text() for p in chaos.files()}
        trees.append((log, files))
    assert trees[0] == trees[1]
    assert len(trees[0][1]) > 10


def test_every_kind_of_operation_ran_while_watched(chaos: ChaosResult) -> None:
    assert sum(chaos.counts.values()) == OPS
    kinds = {"create", "edit", "rename", "atomic_save", "burst", "delete", "move_dir", "move_out"}
    assert kinds <= set(chaos.counts), chaos.counts
    assert chaos.outcomes > OPS // 2, "the watcher reported far fewer outcomes than changes"


def test_index_equals_folder_after_quiesce(chaos: ChaosResult) -> None:
    assert [str(m) for m in chaos.mismatches if m.kind != "doc_payload"] == []


def test_kept_and_moved_points_carry_the_current_title_and_fingerprint(
    chaos: ChaosResult,
) -> None:
    assert [str(m) for m in chaos.mismatches if m.kind == "doc_payload"] == []
