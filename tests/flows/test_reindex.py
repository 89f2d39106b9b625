"""Blue/green reindex on real files, real models and both store pairings.

all-MiniLM-L6-v2 (384-d) is the live embedder; the upgrade goes to the 64-d static model
(another real model from an installed package, with a different dimension). Each test is one
acceptance criterion; they run in order on one data dir per store pairing.
"""

from __future__ import annotations

import random
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import StorePairing
from ragstream import api
from ragstream.client import Client
from ragstream.connectors.stores import list_collections
from ragstream.connectors.vector_stores import collection_name
from ragstream.core.errors import RefusedError
from ragstream.core.models import IndexedChunk
from ragstream.core.settings import Settings
from ragstream.flows import reindex as steps
from ragstream.flows.runtime import open_runtime
from ragstream.http import Serving, serving
from ragstream.operators.embed import load_embedder
from ragstream.service import ingest
from ragstream.service.served import ServedIndex, open_engine
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow  # real syncs and backfills with two embedders, both pairings

FILES = [
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_OCR.md",
    "html/python311_tutorial_appetite.html",
    "docx/docling__word_sample.docx",
]
QUESTION = "What does OCR do in docling?"


@pytest.fixture(scope="module")
def settings(
    store_pairing: StorePairing, tmp_path_factory: pytest.TempPathFactory, shared_docs: Path
) -> Settings:
    vector, lexical = store_pairing
    root = copy_docs(shared_docs, FILES, tmp_path_factory.mktemp("rx") / "docs", flat=True)
    s = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        store={"vector_backend": vector, "lexical_backend": lexical},
    ).with_paths([root])
    api.sync([root], settings=s)
    return s


def folder(s: Settings) -> Path:
    return s.sources[0].root


def side_points(s: Settings, collection: str) -> dict[str, IndexedChunk]:
    """Live points of one side, by id, read from the store itself."""
    with open_runtime(s) as rt:
        store = rt.sides.side(collection).vectors
        return {c.point_id: c for page in store.live_pages() for c in page}


def expected_docs(s: Settings) -> set[str]:
    return {f"{s.sources[0].name}:{p.name}" for p in folder(s).iterdir()}


def same_points(a: dict[str, IndexedChunk], b: dict[str, IndexedChunk]) -> bool:
    strip = {"embedder"}
    return a.keys() == b.keys() and all(
        a[i].model_dump(exclude=strip) == b[i].model_dump(exclude=strip) for i in a
    )


def static_collection(s: Settings) -> str:
    return collection_name(s.store.index_name, load_embedder("static").version)


def test_1_backfill_with_changes_then_promote(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    s = settings
    spans.clear()
    before = ingest.status(settings=s)
    old = before.collection
    assert old is not None
    assert before.warnings == []  # the shipped decision was fitted on this embedder
    with open_runtime(s) as rt:  # a partial backfill: stopped after its first page
        steps.start(rt.sides, "static")
        stop = threading.Event()
        steps.PAGE, page = 16, steps.PAGE
        try:
            steps.backfill(rt.sides, on_progress=lambda p: stop.set(), stop=stop)
        finally:
            steps.PAGE = page
        assert rt.sides.record is not None and rt.sides.record.phase == "backfilling"
        partial = rt.sides.side(static_collection(s)).vectors.count("live")
    assert 0 < partial < len(side_points(s, old))
    # edit, add and delete while the reindex is open: the sync dual-writes
    root = folder(s)
    ocr = root / "docling_concepts_OCR.md"
    ocr.write_text(ocr.read_text() + "\n\nReindexing keeps zebra-marker text searchable.\n")
    (root / "docling__word_sample.docx").unlink()
    shutil.copy(root / "docling_concepts_chunking.md", root / "copy_of_chunking.md")
    report = api.sync([root], settings=s)
    assert report.docs_changed == 2 and report.docs_deleted == 1
    with Client(settings=s) as client:
        refused = client.reindex_status()
        assert refused.record is not None and refused.lag is not None and refused.lag > 0
        done = client.reindex_run()
        assert done.record is not None and done.record.phase == "ready" and done.lag == 0
        promoted = client.reindex_promote()
        assert promoted.embedder == load_embedder("static").version
        answer = client.query(QUESTION)
    new = static_collection(s)
    old_points, new_points = side_points(s, old), side_points(s, new)
    assert same_points(old_points, new_points)  # no missing, no stale, no duplicate
    assert {c.doc_id for c in new_points.values()} == expected_docs(s)
    assert any("zebra-marker" in c.text for c in new_points.values())
    assert answer.embedder == load_embedder("static").version.slug
    assert {c.embedder for c in answer.candidates} - {""} == {answer.embedder}
    status = ingest.status(settings=s)
    assert status.embedder == load_embedder("static").version and status.collection == new
    assert status.reindex is not None and status.reindex.phase == "promoted"
    # the answerability decision reads the static side's cosines on MiniLM's scale: no
    # warning to refit it (query.cosine_scale), and the scale was measured on this side
    assert not [w for w in status.warnings if "answerability decision" in w]
    static = load_embedder("static").version.slug
    assert (s.scales_dir / f"{static}.json").exists()
    names = {sp.name for sp in spans.get_finished_spans()}
    assert {
        "ragstream.reindex.start",
        "ragstream.reindex.backfill",
        "ragstream.reindex.promote",
    } <= names


def test_2_rollback_restores_the_old_side_and_its_answers(settings: Settings) -> None:
    s = settings
    l6 = load_embedder("minilm-l6").version
    with Client(settings=s) as client:
        rolled = client.reindex_rollback()
        assert rolled.embedder == l6 and rolled.record is not None
        assert rolled.record.phase == "rolled_back"
        first = client.query(QUESTION)
        again = client.reindex_promote()  # both sides stayed current: promote is instant
        assert again.embedder == load_embedder("static").version
        client.reindex_rollback()
        second = client.query(QUESTION)
    assert first.embedder == second.embedder == l6.slug
    assert first.text == second.text and first.citations == second.citations
    # a write after the rollback reaches both sides (dual-write continues until cleanup)
    (folder(s) / "late.md").write_text("# Late\n\nA quokka-marker paragraph arrives late.\n")
    api.sync([folder(s)], settings=s)
    old, new = collection_name(s.store.index_name, l6), static_collection(s)
    assert same_points(side_points(s, old), side_points(s, new))


def test_4_failing_gates_refuse_and_leave_the_live_side(settings: Settings, tmp_path: Path) -> None:
    s = settings
    l6 = load_embedder("minilm-l6").version
    with open_runtime(s) as rt:  # coverage short: a chunk missing on the new side
        new = rt.sides.side(static_collection(s))
        victim = next(iter(next(new.vectors.live_pages())))
        new.vectors.tombstone([victim.point_id], 0.0)
        with pytest.raises(steps.ReindexError, match="coverage"):
            steps.promote(rt.sides)
        assert rt.sides.live.collection == collection_name(s.store.index_name, l6)
        record = rt.sides.record
        assert record is not None and record.gate is not None and not record.gate.passed
        assert record.gate.missing == 1
    assert ingest.status(settings=s).embedder == l6
    # eval below margin: a real BEIR-format eval over this index, with a margin the new side
    # cannot meet (it must beat the old side by 2.0 nDCG)
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("")  # already indexed: the eval reads queries + qrels
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "optical character recognition"}\n')
    (data / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tdocling_concepts_OCR\t1\n"
    )
    with Client(settings=s) as client:
        client.reindex_run()  # repairs the tombstoned chunk
        with pytest.raises(steps.ReindexError, match="eval"):
            client.reindex_promote(eval_dataset=str(data), eval_margin=-2.0)
        status = client.reindex_status()
    assert status.embedder == l6
    assert status.record is not None and status.record.gate is not None
    assert status.record.gate.eval_old is not None and status.record.gate.eval_new is not None


def test_5_queries_during_promote_never_error_or_mix(settings: Settings) -> None:
    s = settings
    errors: list[BaseException] = []
    seen: set[str] = set()
    stop = threading.Event()
    with Client(settings=s) as client:

        def ask() -> None:
            while not stop.is_set():
                try:
                    answer = client.query(QUESTION)
                    slugs = {c.embedder for c in answer.candidates} - {""}
                    assert slugs == {answer.embedder}, slugs
                    seen.add(answer.embedder)
                except BaseException as exc:
                    errors.append(exc)
                    return

        thread = threading.Thread(target=ask)
        thread.start()
        try:
            for _ in range(3):
                client.reindex_promote()
                client.reindex_rollback()
        finally:
            stop.set()
            thread.join()
    assert errors == []
    assert len(seen) >= 1


STRESS_SECONDS = 12.0  # per pairing: swap for this long (and at least STRESS_SWAPS times)
STRESS_SWAPS = 20
STRESS_QUESTIONS = [QUESTION, "What is Python good for?", "How does docling chunk a document?"]


def test_5b_promote_swap_loop_under_load_never_mixes_embedders(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    """test_5 under load: promote/rollback in a loop while two threads answer, one retrieves
    and one burns CPU in Python, with a short GIL switch interval so threads interleave at
    many more points. Every answer and retrieval must come from one side: its candidates
    carry one embedder, the one it reports, and the model that chose and checked its
    sentences (the `query.generate` span) is that side's too."""
    s = settings
    versions = [load_embedder("minilm-l6").version, load_embedder("static").version]
    sides = {v.slug for v in versions}
    name_of = {v.slug: v.name for v in versions}
    spans.clear()
    errors: list[BaseException] = []
    mixed: list[str] = []
    seen: dict[str, int] = dict.fromkeys(sides, 0)
    count_lock = threading.Lock()
    stop = threading.Event()

    def check(kind: str, reported: str, tags: set[str]) -> None:
        slugs = tags - {""}  # a lexical-only candidate carries no embedder
        if slugs != {reported}:
            mixed.append(f"{kind}: reported {reported}, candidates {sorted(slugs)}")
        with count_lock:
            seen[reported] = seen.get(reported, 0) + 1

    with Client(settings=s) as client:

        def ask(offset: int) -> None:
            i = offset
            while not stop.is_set():
                try:
                    question = STRESS_QUESTIONS[i % len(STRESS_QUESTIONS)]
                    answer = client.query(question)
                    check("answer", answer.embedder, {c.embedder for c in answer.candidates})
                    i += 1
                except BaseException as exc:
                    errors.append(exc)
                    return

        def fetch() -> None:
            i = 0
            while not stop.is_set():
                try:
                    got = client.retrieve(STRESS_QUESTIONS[i % len(STRESS_QUESTIONS)])
                    check("retrieval", got.embedder, {r.embedder for r in got.results})
                    i += 1
                except BaseException as exc:
                    errors.append(exc)
                    return

        def burn() -> None:
            while not stop.is_set():
                sum(i * i for i in range(20_000))

        threads = [
            threading.Thread(target=ask, args=(0,)),
            threading.Thread(target=ask, args=(1,)),
            threading.Thread(target=fetch),
            threading.Thread(target=burn),
        ]
        rng = random.Random(5)
        swaps = 0
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        try:
            for thread in threads:
                thread.start()
            start = time.monotonic()
            while not errors and (
                swaps < STRESS_SWAPS or time.monotonic() - start < STRESS_SECONDS
            ):
                client.reindex_promote()
                time.sleep(rng.uniform(0.0, 0.08))
                client.reindex_rollback()  # ends rolled back, as the next test expects
                time.sleep(rng.uniform(0.0, 0.08))
                swaps += 1
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            sys.setswitchinterval(interval)
    assert errors == []
    assert mixed == []
    assert swaps >= STRESS_SWAPS
    assert set(seen) == sides and all(n > 0 for n in seen.values()), seen  # both sides served
    embedded: dict[int, str] = {}
    generated: dict[int, str] = {}
    for sp in spans.get_finished_spans():
        trace_id = sp.context.trace_id if sp.context is not None else 0
        model = str((sp.attributes or {}).get("model", ""))
        if sp.name == "ragstream.query.embed":
            embedded[trace_id] = model
        elif sp.name == "ragstream.query.generate":
            generated[trace_id] = model
    assert generated, "no answer was generated"
    crossed = [t for t, m in generated.items() if name_of.get(embedded.get(t, "")) != m]
    assert crossed == [], f"{len(crossed)} of {len(generated)} answers switched models mid-way"


def test_same_api_over_http_and_cleanup(settings: Settings) -> None:
    s = settings
    with open_engine(s) as (engine, maintainer):
        state = Serving(s, ServedIndex(engine, maintainer))
        with serving(state, "127.0.0.1", 0) as url, Client(url=url) as remote:
            status = remote.reindex_status()
            assert status.record is not None and status.record.phase == "rolled_back"
            # over HTTP a refused command is the base type the embedded ReindexError extends
            with pytest.raises(RefusedError, match="roll back"):
                remote.reindex_rollback()
            promoted = remote.reindex_promote()
            assert promoted.embedder == load_embedder("static").version
            assert remote.query(QUESTION).embedder == promoted.embedder.slug  # type: ignore[union-attr]
            with pytest.raises(RefusedError, match="confirm"):
                remote.reindex_cleanup()
            cleaned = remote.reindex_cleanup(confirm=True)
            assert cleaned.record is None and len(cleaned.sides) == 1
    names = list_collections(
        s.store.vector_backend, s.vectors_dir, s.store.index_name, s.store.qdrant_url
    )
    assert set(names) == {static_collection(s)}
