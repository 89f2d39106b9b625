"""The sync flow on several bytewax workers and processes builds the same index as one.

Real documents from the shared set (PDF, DOCX, HTML, Markdown), a 1-worker `sync` as the
reference, then `--workers 2` (threads, in process), `python -m bytewax.run -w 2` and a real
two-process cluster (`-i 0/1 -a ...`): every point id, chunk text, position and file
fingerprint per doc must equal the reference, in both stores. In the cluster, the process that
does not own the data dir must have parsed some documents and written none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.workers import free_ports
from ragstream import api
from ragstream.connectors.vector_stores import StoreBusyError
from ragstream.core.models import FileEvent
from ragstream.core.settings import Settings
from ragstream.flows.sync import StoreOwner, parse_key, run_sync
from tests.harness.chaos import IndexView, index_mismatches, read_index, reference_view

pytestmark = pytest.mark.slow  # bytewax workers and processes

DOCS = (
    "pdf/docling__2305.03393v1-pg9.pdf",
    "docx/docling__word_sample.docx",
    "html/python311_tutorial_errors.html",
    "html/python311_tutorial_appetite.html",
    "md/docling_concepts_chunking.md",
    "md/docling_faq_index.md",
    "md/docling_usage_gpu.md",
)
REPO = Path(__file__).resolve().parents[2]
FLOW_ONCE = "ragstream.flows.sync:get_flow(watch=False)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, shared_docs: Path) -> Path:
    root = tmp_path_factory.mktemp("workers") / "docs"
    root.mkdir()
    for rel in DOCS:
        shutil.copy2(shared_docs / rel, root / Path(rel).name)
    return root


@pytest.fixture(scope="module")
def reference(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexView:
    view = reference_view([folder], tmp_path_factory.mktemp("ref") / "data")
    assert len(view.docs) == len(DOCS) and view.vector_live > 20
    return view


def _equal(data: Path, folder: Path, reference: IndexView) -> None:
    actual = read_index(Settings(data_dir=data).with_paths([folder]))
    assert index_mismatches(actual, reference) == []


def test_parse_keys_spread_docs_and_are_stable_across_processes() -> None:
    """The bucket is crc32-based: Python's salted `hash` would route a doc differently in
    each process of a cluster."""
    names = [Path(rel).name for rel in DOCS]
    keys = {parse_key(_event(n)) for n in names}
    assert len(keys) > 1
    here = " ".join(parse_key(_event(n)) for n in names)
    other_seed = subprocess.run(
        [sys.executable, "-c", "import sys; from core.models import FileEvent as E; "
         "from flows.sync import parse_key as k; print(' '.join(k(E(source='docs', root='/r', "
         "path=f'/r/{n}', doc_id=f'docs:{n}', kind='upsert')) for n in sys.argv[1:]))", *names],
        cwd=REPO, capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONHASHSEED="123"),
    )  # fmt: skip
    assert other_seed.stdout.strip() == here


def _event(name: str) -> FileEvent:
    return FileEvent(source="docs", root="/r", path=f"/r/{name}", doc_id=f"docs:{name}",
                     kind="upsert")  # fmt: skip


def test_one_owner_per_data_dir(tmp_path: Path, folder: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data").with_paths([folder])
    first, second = StoreOwner(settings), StoreOwner(settings)
    try:
        assert first.owns() and not second.owns()
        assert first.holder() == str(os.getpid())
        with pytest.raises(StoreBusyError, match="may only parse"):
            second.runtime()  # a non-owner never opens a store
        with pytest.raises(StoreBusyError, match="already synced by another process"):
            run_sync(settings)
    finally:
        first.close()
        second.close()
    third = StoreOwner(settings)  # the lock is released on close
    assert third.owns()
    third.close()


def test_two_worker_threads_build_the_same_index(
    folder: Path, reference: IndexView, tmp_path: Path
) -> None:
    report = api.sync([folder], data_dir=tmp_path / "data", workers=2)
    assert report.docs_changed == len(DOCS) and report.dead_letters == []
    assert report.chunks_live == reference.vector_live
    _equal(tmp_path / "data", folder, reference)


def _runner_env(folder: Path, data: Path) -> dict[str, str]:
    sources = json.dumps([{"name": folder.name, "root": str(folder)}])
    return dict(
        os.environ,
        RAGSTREAM_DATA_DIR=str(data),
        RAGSTREAM_SOURCES=sources,
        RAGSTREAM_TELEMETRY__EXPORTER="console",  # each process prints its own spans
    )


def _spans(stdout: str) -> set[str]:
    """Stage span names a process printed (console exporter: indented JSON objects)."""
    return {
        line.split('"')[3].removeprefix("ragstream.")
        for line in stdout.splitlines()
        if line.startswith('    "name": "ragstream.')
    }


def _outcomes(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"doc_id"')]


def test_bytewax_run_with_two_workers_builds_the_same_index(
    folder: Path, reference: IndexView, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "bytewax.run", FLOW_ONCE, "-w", "2"],
        cwd=REPO, env=_runner_env(folder, data), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert {o["doc_id"] for o in _outcomes(done.stdout)} == set(reference.docs)
    _equal(data, folder, reference)


def test_two_processes_build_the_same_index_with_one_writer(
    folder: Path, reference: IndexView, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(2))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bytewax.run",
                FLOW_ONCE,
                "-i",
                str(i),
                "-a",
                addresses,
            ],
            cwd=REPO,
            env=_runner_env(folder, data),
            stdout=(tmp_path / f"p{i}.out").open("w"),
            stderr=(tmp_path / f"p{i}.err").open("w"),
        )
        for i in range(2)
    ]
    for p in procs:
        p.wait(timeout=600)
    results = [((tmp_path / f"p{i}.out").read_text(), (tmp_path / f"p{i}.err").read_text())
               for i in range(2)]  # fmt: skip
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-2000:]
    owner_pid = int((data / "state" / "ingest.lock").read_text())
    assert owner_pid in {p.pid for p in procs}
    outs = {p.pid: (out, err) for p, (out, err) in zip(procs, results, strict=True)}
    owner_out = outs.pop(owner_pid)[0]
    ((other_out, other_err),) = outs.values()
    assert "parses only" in other_err
    # one writer: every outcome and every store write is the owner's ...
    assert {o["doc_id"] for o in _outcomes(owner_out)} == set(reference.docs)
    assert _outcomes(other_out) == []
    assert {"ingest.write", "ingest.embed"} <= _spans(owner_out)
    # ... while the parsing was shared: the other process parsed its buckets, nothing else
    assert "ingest.parse" in _spans(other_out)
    assert all(name.startswith("ingest.parse") for name in _spans(other_out))
    _equal(data, folder, reference)
