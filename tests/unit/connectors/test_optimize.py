"""`optimize` builds Qdrant Edge's HNSW graph: afterwards a search still finds each point by
its own vector, every metadata filter still returns only what the oracle allows, and the CLI
runs it on a synced data dir."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ragstream import api
from ragstream.cli import app
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import open_vector_store
from ragstream.core.filters import check, chunk_fields, matches, parse_where
from ragstream.core.settings import load_settings
from tests.harness.helpers import synthetic_chunk
from tests.unit.connectors.test_vector_stores import EMB

TYPES = {"team": "keyword", "year": "integer", "draft": "bool"}
N = 3000


def test_an_optimized_store_finds_the_same_points_under_every_filter(tmp_path: Path) -> None:
    rng = random.Random(0)
    draft = [rng.choice(["true", "false"]) for _ in range(N)]
    points = [
        synthetic_chunk(
            i, f"note {i}", meta={"team": f"t{i % 7}", "year": 2000 + i % 25, "draft": draft[i]}
        )
        for i in range(N)
    ]
    vectors = np.random.default_rng(0).standard_normal((N, EMB.dimension)).tolist()
    store = open_vector_store("edge", tmp_path, "idx", EMB)
    store.index_fields(TYPES)  # type: ignore[arg-type]
    store.upsert(points, vectors)
    store.optimize()
    probes = rng.sample(range(N), 50)
    own = [store.search(vectors[i], 1, SearchFilter())[0].chunk.point_id for i in probes]
    assert own == [points[i].point_id for i in probes]  # the graph finds each point itself
    for text in ("team = t3", "not draft and year >= 2010", "year in (2001, 2002) or team = t6"):
        where = check(parse_where(text), TYPES)  # type: ignore[arg-type]
        allowed = {p.point_id for p in points if matches(where, chunk_fields(p))}
        for i in probes[:10]:
            hits = store.search(vectors[i], 50, SearchFilter(where=where))
            assert hits and {h.chunk.point_id for h in hits} <= allowed, text
            if points[i].point_id in allowed:
                assert hits[0].chunk.point_id == points[i].point_id
    store.close()


def test_the_cli_optimizes_a_synced_data_dir(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Note\n\nThe valve opens at dawn.\n")
    settings = load_settings(tmp_path / "data", embedder="static")
    api.sync([docs], settings=settings)
    done = CliRunner().invoke(app, ["optimize", "--json", "--data-dir", str(settings.data_dir)])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["live_points"] == 1 and report["collection"]
