"""The dataflow's parse step in bytewax's own test harness (`bytewax.testing`): the same
`parse_key` routing and `_ParseLogic` the sync flow runs, over real files, on 1 and on 2
workers, with no subprocess and no store. Every event comes out once, parsed the same
whichever worker it was routed to; a bad file comes out as a dead letter."""

from __future__ import annotations

from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, cluster_main, run_main

from ragstream.connectors.fs import fingerprint_of
from ragstream.core.ids import doc_id
from ragstream.core.models import FileEvent
from ragstream.flows.indexer import DocReader, ParsedWork
from ragstream.flows.sync import _ParseLogic, parse_key

FILES = ("md", "html")  # the shared folders read here: fast to parse, real documents


@pytest.fixture(scope="module")
def events(shared_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> list[FileEvent]:
    paths = [p for kind in FILES for p in sorted((shared_docs / kind).iterdir())[:3]]
    bad = tmp_path_factory.mktemp("bad") / "broken.pdf"
    bad.write_bytes(b"%PDF-1.7 not really")
    found = []
    for path in [*paths, bad]:
        root = path.parent
        found.append(
            FileEvent(
                source="docs",
                root=str(root),
                path=str(path),
                doc_id=doc_id("docs", path.relative_to(root).as_posix()),
                kind="upsert",
                fingerprint=fingerprint_of(path),
            )
        )
    return found


def parse_flow(events: list[FileEvent], out: list[tuple[str, ParsedWork]]) -> Dataflow:
    reader = DocReader(max_file_bytes=50 * 1024 * 1024, parse_timeout_s=120.0)
    flow = Dataflow("parse_step")
    keyed = op.key_on("by_doc", op.input("events", flow, TestingSource(events)), parse_key)
    parsed = op.stateful_batch("parse", keyed, lambda resume: _ParseLogic(reader))
    op.output("parsed", parsed, TestingSink(out))
    return flow


def summary(out: list[tuple[str, ParsedWork]]) -> dict[str, tuple[str, int, str]]:
    """Per doc id: what came out (doc / dead), its block count, its first block's text."""
    seen = {}
    for routed, work in out:
        assert routed == parse_key(work.event)
        key = work.event.path
        assert key not in seen, f"{key} came out twice"
        if work.doc is not None:
            seen[key] = ("doc", len(work.doc.blocks), work.doc.blocks[0].text[:40])
        else:
            assert work.dead is not None
            seen[key] = ("dead", 0, work.dead.stage)
    return seen


def test_one_worker_parses_every_event_once(events: list[FileEvent]) -> None:
    out: list[tuple[str, ParsedWork]] = []
    run_main(parse_flow(events, out))
    got = summary(out)
    assert set(got) == {e.path for e in events}
    assert got[events[-1].path] == ("dead", 0, "parse")
    assert all(kind == "doc" and blocks > 0 for kind, blocks, _ in list(got.values())[:-1])


def test_two_workers_parse_the_same_as_one(events: list[FileEvent]) -> None:
    one: list[tuple[str, ParsedWork]] = []
    run_main(parse_flow(events, one))
    two: list[tuple[str, ParsedWork]] = []
    cluster_main(parse_flow(events, two), addresses=[], proc_id=0, worker_count_per_proc=2)
    assert summary(two) == summary(one)
