"""The BM25 leg as Qdrant sparse vectors (`store.lexical_backend = "sparse"`).

Pure: the stored weights are Okapi's saturated term frequencies. Congruence: over real
SciFact abstracts, the sparse leg ranks like tantivy (the same analyzer, text and idf
formula); the only differences are tantivy's quantized field norms and the average length,
which tantivy takes from the index and the sparse leg fixes at write time — so with the
corpus's own average the top 10 agree almost exactly, and the test allows 5% for the norms.
End to end, on both vector backends: a synced folder answers through both legs, an edit is
searchable and a delete is gone from both legs at once, and verify sees no drift.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from ragstream import api
from ragstream.client import Client
from ragstream.connectors import sparse
from ragstream.connectors.lexical import lexical_text, tokenize
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.stores import open_lexical_index, open_vector_store
from ragstream.core.errors import InvalidRequestError
from ragstream.core.models import EmbedderVersion, IndexedChunk
from ragstream.core.settings import Settings
from ragstream.service.audit import verify

EMB = EmbedderVersion(name="test/random-8", fingerprint="f" * 16, dimension=8)


def test_weights_are_saturated_term_frequencies() -> None:
    terms = ["tea", "green", "tea", "steep"]
    indices, values = sparse.doc_vector(terms, avgdl=8.0)
    weight = dict(zip(indices, values, strict=True))
    norm = 1.2 * (1 - 0.75 + 0.75 * 4 / 8.0)
    assert math.isclose(weight[sparse.term_id("tea")], 2 * 2.2 / (2 + norm))
    assert math.isclose(weight[sparse.term_id("green")], 2.2 / (1 + norm))
    assert indices == sorted(indices) and len(indices) == 3
    asked = dict(zip(*sparse.query_vector(["tea", "tea", "milk"]), strict=True))
    assert asked == {sparse.term_id("tea"): 2.0, sparse.term_id("milk"): 1.0}
    assert sparse.doc_vector([]) == ([], [])


def _abstracts(scifact_dir: Path, n: int) -> list[IndexedChunk]:
    out = []
    with (scifact_dir / "corpus.jsonl").open() as fh:
        for line, _ in zip(fh, range(n), strict=False):
            d = json.loads(line)
            text = f"{d['title']} {d['text']}"
            out.append(
                IndexedChunk(
                    point_id=f"00000000-0000-0000-0000-{int(d['_id']):012d}",
                    doc_id=f"s:{d['_id']}", source="s", path="/x", file_type="md", ordinal=0,
                    content_hash=d["_id"], text=text, char_start=0, char_end=len(text),
                )
            )  # fmt: skip
    return out


@pytest.mark.parametrize("kind", ["edge", "qdrant"])
def test_the_sparse_leg_ranks_like_tantivy(
    kind: str, scifact_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _abstracts(scifact_dir, 800)
    mean = statistics.mean(len(tokenize(lexical_text(d))) for d in docs)
    monkeypatch.setattr(sparse, "DEFAULT_AVGDL", mean)
    store = open_vector_store(kind, tmp_path / "v", "idx", EMB, sparse=True)
    store.upsert(docs, [[1.0] * 8] * len(docs))
    tantivy = open_lexical_index("tantivy", tmp_path / "lex")
    tantivy.upsert(docs)
    tantivy.commit()
    queries = [d.text.split(". ")[0][:120] for d in docs[::16]]  # each abstract's opening
    overlaps = []
    for q in queries:
        ours = [h.chunk.point_id for h in store.search_text(q, 10, SearchFilter())]
        ref = [h.chunk.point_id for h in tantivy.search(q, 10, SearchFilter())]
        overlaps.append(len(set(ours) & set(ref)) / max(len(ref), 1))
        assert ours[0] == ref[0], q  # the abstract a query opens is first in both
    assert statistics.mean(overlaps) >= 0.95, overlaps
    n, df = store.term_doc_freqs(["cell", "zzzunseen"])
    assert n == len(docs) and df["zzzunseen"] == 0
    assert df["cell"] == tantivy.doc_freqs(["cell"])[1]["cell"]
    store.close()
    tantivy.close()


@pytest.mark.slow
@pytest.mark.parametrize("vector", ["edge", "qdrant"])
def test_sync_query_edit_and_delete_through_the_sparse_leg(vector: str, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    (root / "coffee.md").write_text("# Coffee\n\nEspresso is brewed at nine bars of pressure.\n")
    s = Settings(data_dir=tmp_path / "data", store={"vector_backend": vector})  # "auto": a new dir
    api.sync([root], settings=s)
    assert not (s.lexical_dir).exists()  # no separate lexical index at all
    assert s.lexical_marker.read_text().strip() == "sparse" == s.lexical

    def lexical_docs(client: Client, q: str) -> set[str]:
        return {r.doc_id for r in client.retrieve(q).results if "lexical" in r.ranks}

    with Client(settings=s) as client:
        answer = client.query("At what pressure is espresso brewed?")
        assert answer.refusal is None and "nine bars" in answer.text
        assert answer.candidates[0].ranks.keys() == {"dense", "lexical"}
        assert lexical_docs(client, "espresso pressure") == {"notes:coffee.md"}
    (root / "coffee.md").unlink()
    (root / "tea.md").write_text("# Tea\n\nOolong tea is steeped at 90 degrees, three minutes.\n")
    api.sync([root], settings=s)
    with Client(settings=s) as client:
        assert lexical_docs(client, "espresso pressure") == set()
        assert "notes:coffee.md" not in {r.doc_id for r in client.retrieve("espresso").results}
        assert lexical_docs(client, "oolong") == {"notes:tea.md"}
        status = client.status()
        assert status.lexical_live == status.chunks_live
    assert verify(settings=s).ok
    with pytest.raises(InvalidRequestError, match="sparse"):
        api.rebuild_lexical(settings=s)


def test_auto_keeps_what_a_data_dir_was_built_with(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path / "new").lexical == "sparse"  # a new data dir
    old = tmp_path / "old"
    (old / "lexical").mkdir(parents=True)
    (old / "lexical" / "meta.json").write_text("{}")
    assert Settings(data_dir=old).lexical == "tantivy"
    ref = tmp_path / "ref"
    (ref / "lexical").mkdir(parents=True)
    (ref / "lexical" / "chunks.jsonl").write_text("")
    assert Settings(data_dir=ref).lexical == "rank-bm25"
    pre = tmp_path / "pre"
    (pre / "vectors" / "idx__x").mkdir(parents=True)  # vectors, no marker: built before it
    assert Settings(data_dir=pre).lexical == "tantivy"
    marked = Settings(data_dir=pre)
    marked.lexical_marker.parent.mkdir(parents=True)
    marked.lexical_marker.write_text("sparse\n")
    assert marked.lexical == "sparse"
    assert Settings(data_dir=pre, store={"lexical_backend": "rank-bm25"}).lexical == "rank-bm25"


@pytest.mark.slow
def test_a_running_query_service_sees_edits_and_deletes_in_both_legs(tmp_path: Path) -> None:
    """Server mode (qdrant-client, here its local mode): the query side opens no lexical
    index of its own, so what the sync side writes is what both of its legs read — a delete
    is never returned afterwards, an edit is found at once, with no restart or rebuild."""
    from ragstream.core.answers import QueryRequest
    from ragstream.query.engine import QueryEngine

    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nGreen tea is steeped at 80 degrees for two minutes.\n")
    (root / "coffee.md").write_text("# Coffee\n\nEspresso is brewed at nine bars of pressure.\n")
    s = Settings(data_dir=tmp_path / "data", store={"vector_backend": "qdrant"})
    api.sync([root], settings=s)

    def found(engine: QueryEngine, q: str) -> dict[str, set[str]]:
        got = engine.retrieve(QueryRequest(query=q, generate=False))
        return {r.doc_id: set(r.ranks) for r in got.results}

    with QueryEngine.open(s) as engine:  # the running query service
        assert found(engine, "espresso pressure")["notes:coffee.md"] == {"dense", "lexical"}
        (root / "coffee.md").unlink()
        (root / "tea.md").write_text("# Tea\n\nOolong tea is steeped at 90 degrees.\n")
        api.sync([root], settings=s)  # the sync side, while the service runs
        assert "notes:coffee.md" not in found(engine, "espresso pressure")
        assert found(engine, "oolong")["notes:tea.md"] >= {"lexical"}
    assert not s.lexical_dir.exists()
