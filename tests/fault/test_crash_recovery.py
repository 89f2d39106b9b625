"""SIGKILL the real ingest process at seeded points, restart it, and prove nothing is lost.

The campaign (bench/_crash.py) runs `ragstream sync` through tests/harness/crash_worker.py on
≥ 100 real documents (SciFact abstracts + real docs), kills it once at each step of the
write order (seeded order and batch: the campaign is reproducible), mutates the folder
between runs, lets a last run finish, and then checks index == folder against a fresh sync,
and that no text whose vector was already durably stored was ever encoded again. The long
version, with kills after random delays too, is bench/crash.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.core.settings import Settings
from tests.harness.chaos import abstracts, read_index, render
from tests.harness.crash import CrashResult, crash_campaign, run_worker

pytestmark = pytest.mark.slow  # a campaign of SIGKILLed CLI subprocesses

SEED = 6
KILLS = 5  # one per write step
# The static model2vec embedder: kills, restarts and index == folder do not depend on the
# embedder, and with MiniLM encoding was most of the campaign's CPU
EMBEDDER = "static"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> CrashResult:
    work = tmp_path_factory.mktemp("crash")
    return crash_campaign(
        work, SEED, KILLS, docs=100, timer_share=0.0, shared_docs=shared_docs, embedder=EMBEDDER
    )


def test_every_planned_kill_landed_and_every_encode_was_counted(campaign: CrashResult) -> None:
    kills = [(r.kill, r.returncode) for r in campaign.runs]
    assert len(kills) == KILLS + 1 and all(r.killed for r in campaign.runs[:-1]), kills
    assert campaign.docs >= 100
    assert campaign.encoded > 0
    assert campaign.unaudited == 0, "a live vector no audited encode produced: counting is off"


def test_no_text_whose_vector_was_stored_is_encoded_again(campaign: CrashResult) -> None:
    assert campaign.violations == []
    assert campaign.reencoded_unstored > 0, "the encode-kill must force a legitimate re-encode"


def test_index_equals_folder_after_the_restarts(campaign: CrashResult) -> None:
    wrong = [str(m) for m in campaign.mismatches if m.kind != "doc_payload"]
    assert wrong == []


def test_kept_and_moved_points_carry_the_current_title_and_fingerprint(
    campaign: CrashResult,
) -> None:
    assert [str(m) for m in campaign.mismatches if m.kind == "doc_payload"] == []


def test_kill_between_lexical_and_vector_write_then_delete_leaves_no_bm25_orphan(
    tmp_path: Path,
) -> None:
    root, data, audit = tmp_path / "notes", tmp_path / "data", tmp_path / "audit.jsonl"
    root.mkdir()
    docs = abstracts(40)
    (root / "a.md").write_text(render(docs[:1], ".md"))
    (root / "b.md").write_text(render(docs[1:2], ".md"))
    assert not run_worker(root, data, audit, "r0", "none", EMBEDDER).killed
    (root / "a.md").write_text(render(docs[2:3], ".md"))
    assert run_worker(root, data, audit, "r1", "lexical.commit:1", EMBEDDER).killed
    (root / "a.md").unlink()
    assert not run_worker(root, data, audit, "r2", "none", EMBEDDER).killed
    tantivy = Settings(data_dir=data, embedder=EMBEDDER, store={"lexical_backend": "tantivy"})
    view = read_index(tantivy.with_paths([root]))
    assert list(view.docs) == ["notes:b.md"]
    assert view.lexical_live == view.vector_live
