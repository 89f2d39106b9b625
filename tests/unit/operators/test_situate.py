"""The LLM-written situating sentence through the real ingest.

The LLM is the OpenAI-compatible stub (a test double at the endpoint boundary, which
tests/unit/query/test_generate_verify.py and tests/unit/query/test_transforms.py drive with
the real openai client too); documents, chunker, embedder, stores and cache are the real
ones. Each test shows what the sentence claims to change (the embedded and BM25 text, never
the cited text) and what it must not cost (no second call for the same content, no chunk
indexed without it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream import api
from ragstream.connectors.lexical import lexical_text
from ragstream.connectors.protocols import SearchFilter
from ragstream.connectors.situate_cache import SituateCache
from ragstream.core.answers import QueryRequest
from ragstream.core.models import EmbedderVersion, IndexedChunk, SyncReport
from ragstream.core.settings import ChunkSettings, GeneratorSettings, Settings
from ragstream.flows import reindex as steps
from ragstream.flows.runtime import chunker_for, open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import Embedder, load_embedder
from ragstream.operators.situate import (
    SituateUnavailable,
    document_excerpt,
    parse_sentence,
    situation_of,
)
from ragstream.query.engine import QueryEngine
from ragstream.service import ingest
from tests.conftest import Stub
from tests.harness.helpers import copy_docs

DOC = "md/docling_concepts_chunking.md"
OTHER = "md/docling_concepts_architecture.md"
MARKER = "quokkaflux"  # in no shared document: only a sentence (or an edit) brings it in
SENTENCE = f"This chunk is from the {MARKER} guide to Docling chunkers."


def _settings(tmp: Path, url: str | None, **chunk: object) -> Settings:
    return Settings(
        data_dir=tmp / "data",
        chunk=ChunkSettings.model_validate({"situate": True, **chunk}),
        generator=GeneratorSettings(base_url=url, model="stub-model"),
    ).with_paths([tmp / "docs"])


def _sync(settings: Settings) -> SyncReport:
    return api.sync([s.root for s in settings.sources], settings=settings)


def _live(settings: Settings) -> list[IndexedChunk]:
    with open_runtime(settings) as rt:
        return sorted(
            (c for page in rt.vectors.live_pages() for c in page),
            key=lambda c: (c.doc_id, c.ordinal),
        )


def _touch(folder: Path) -> None:
    for path in folder.iterdir():
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _situate_spans(spans: InMemorySpanExporter) -> list[dict[str, object]]:
    return [
        dict(s.attributes or {})
        for s in spans.get_finished_spans()
        if s.name.endswith("ingest.situate")
    ]


@pytest.mark.slow
def test_sentence_is_embedded_and_bm25_indexed_but_never_cited(
    tmp_path: Path, shared_docs: Path, stub: Stub, spans: InMemorySpanExporter
) -> None:
    copy_docs(shared_docs, [DOC], tmp_path / "docs", flat=True)
    settings = _settings(tmp_path, stub.url, header_tokens=16)
    stub.replies += [f'Context: "{SENTENCE}"\nsecond line'] * 50  # label, quotes, 2 lines
    spans.clear()
    report = _sync(settings)
    chunks = _live(settings)
    assert report.chunks_embedded == len(chunks) > 3
    hashes = {c.content_hash for c in chunks}
    assert len(stub.requests) == len(hashes)  # one call per distinct content
    body = stub.requests[0]["body"]
    prompt = body["messages"][1]["content"]
    assert "<document>" in prompt and "<chunk>" in prompt and body["model"] == "stub-model"
    assert body["max_tokens"] == 2 * settings.chunk.situate_tokens
    assert any(c.text in p["body"]["messages"][1]["content"] for c in chunks for p in stub.requests)
    (situate,) = _situate_spans(spans)
    assert situate["generated"] == len(hashes) and situate["cached"] == 0
    assert any(c.context.partition("\n")[0] for c in chunks)  # header and sentence together
    for c in chunks:  # one line, after the header line; never in the cited text
        assert situation_of(c.context) == SENTENCE
        assert MARKER not in c.text and MARKER in lexical_text(c)
        # … and the only line it adds to the BM25 text (the header is not indexed twice)
        header_only = c.model_copy(update={"context": c.context.partition("\n")[0]})
        assert lexical_text(c).replace(situation_of(c.context) + "\n", "") == lexical_text(
            header_only
        )
    with open_runtime(settings) as rt:
        stored = rt.vectors.vectors_for_hashes(hashes)
        sample = chunks[:4]
        situated = rt.embedder.encode_passages([embedding_text(c.context, c.text) for c in sample])
        headed = rt.embedder.encode_passages(
            [embedding_text(c.context.partition("\n")[0], c.text) for c in sample]
        )
        hits = rt.lexical.search(MARKER, 100, SearchFilter())
    for c, with_sentence, header_only in zip(sample, situated, headed, strict=True):
        v = np.asarray(stored[c.content_hash])
        assert float(v @ np.asarray(with_sentence)) > 0.999  # the sentence is embedded
        assert float(v @ np.asarray(header_only)) < 0.995
    assert {h.chunk.point_id for h in hits} == {c.point_id for c in chunks}  # BM25 has it
    # what reaches the prompt, whatever the answerability judge would decide
    unjudged = settings.query.model_copy(update={"judge": "none"})
    with QueryEngine.open(settings.model_copy(update={"query": unjudged})) as engine:
        answer = engine.answer(QueryRequest(query="What does the BaseChunker API define?"))
    assert answer.sources
    by_id = {c.point_id: c for c in chunks}
    for source in answer.sources:
        assert source.text == by_id[source.point_id].text and MARKER not in source.text


@pytest.mark.slow
def test_paid_once_resync_move_rename_restart_and_backfill(
    tmp_path: Path, shared_docs: Path, stub: Stub, spans: InMemorySpanExporter
) -> None:
    folder = copy_docs(shared_docs, [DOC, OTHER], tmp_path / "docs", flat=True)
    settings = _settings(tmp_path, stub.url)
    stub.replies += [SENTENCE] * 100
    first = _sync(settings)
    paid = len(stub.requests)
    assert paid == len({c.content_hash for c in _live(settings)}) > 3
    assert _sync(settings).chunks_embedded == 0 and len(stub.requests) == paid  # re-sync
    # a paragraph inserted at the top: every later chunk moves, only new content is paid
    doc = folder / Path(DOC).name
    doc.write_text(f"{MARKER} notes.\n\n{doc.read_text()}")
    moved = _sync(settings)
    assert moved.chunks_moved > 0
    assert len(stub.requests) - paid == moved.chunks_embedded >= 1
    paid = len(stub.requests)
    # a file renamed: a new doc id whose chunks reuse vectors and sentences by content hash
    doc.rename(folder / "renamed.md")
    spans.clear()
    renamed = _sync(settings)
    assert renamed.chunks_embedded == 0 and renamed.chunks_reused > 0
    assert len(stub.requests) == paid
    (situate,) = _situate_spans(spans)
    assert situate["generated"] == 0 and situate["cached"] == renamed.chunks_reused
    # a crash after the sentences were paid but before any chunk was written: a fresh index
    # with the same state dir re-embeds everything and asks for nothing
    fresh = tmp_path / "fresh"
    shutil.copytree(folder, fresh / "docs")
    (fresh / "data" / "state").mkdir(parents=True)
    shutil.copy(settings.state_dir / "situate.sqlite3", fresh / "data" / "state")
    restarted = _situate_settings_like(settings, fresh)
    again = _sync(restarted)
    assert again.chunks_embedded == again.chunks_live > 0 and len(stub.requests) == paid
    assert {c.context for c in _live(restarted)} <= {c.context for c in _live(settings)}
    # a blue/green backfill copies contexts from the stored points: no LLM either
    with open_runtime(settings) as rt:
        record = steps.start(rt.sides, "static")
        steps.backfill(rt.sides)
        new = rt.sides.side(record.new.collection).vectors
        copied = [c for page in new.live_pages() for c in page]
    assert copied and all(situation_of(c.context) == SENTENCE for c in copied)
    assert len(stub.requests) == paid and first.dead_letters == []


def _situate_settings_like(settings: Settings, tmp: Path) -> Settings:
    return settings.model_copy(update={"data_dir": tmp / "data"}).with_paths([tmp / "docs"])


@pytest.mark.slow
def test_toggling_or_changing_model_reembeds_and_off_changes_nothing(
    tmp_path: Path, shared_docs: Path, stub: Stub
) -> None:
    folder = copy_docs(shared_docs, [OTHER, DOC], tmp_path / "docs", flat=True)
    on = _settings(tmp_path, stub.url)
    off = on.model_copy(update={"chunk": ChunkSettings()})
    embedder = load_embedder(on.embedder)
    assert chunker_for(off, embedder).key == chunker_for(Settings(), embedder).key
    assert chunker_for(on, embedder).key != chunker_for(off, embedder).key
    stub.replies += [SENTENCE] * 200
    _sync(on)
    paid = len(stub.requests)
    _touch(folder)  # the catch-up scan re-reads only files whose size/mtime changed
    bare = _sync(off)  # off: the plain index again, all of it, with no call
    assert bare.chunks_embedded == bare.chunks_live and len(stub.requests) == paid
    assert all(situation_of(c.context) == "" for c in _live(off))  # the header may stay
    _touch(folder)
    back = _sync(on)  # back on: sentences from the cache, vectors from the tombstones
    assert back.chunks_embedded == 0 and len(stub.requests) == paid
    assert all(situation_of(c.context) == SENTENCE for c in _live(on))
    other = on.model_copy(
        update={"chunk": on.chunk.model_copy(update={"situate_model": "another-model"})}
    )
    assert chunker_for(other, embedder).key != chunker_for(on, embedder).key
    _touch(folder)
    changed = _sync(other)  # another model: every chunk re-situated and re-embedded
    assert changed.chunks_embedded == changed.chunks_live
    assert len(stub.requests) - paid == changed.chunks_live
    assert {r["body"]["model"] for r in stub.requests[paid:]} == {"another-model"}


@pytest.mark.slow
def test_endpoint_failure_never_indexes_without_the_sentence(
    tmp_path: Path, shared_docs: Path, stub: Stub
) -> None:
    folder = copy_docs(shared_docs, [DOC], tmp_path / "docs", flat=True)
    settings = _settings(tmp_path, stub.url)
    stub.replies += [503, *[SENTENCE] * 50]  # a transient error is retried by the client
    first = _sync(settings)
    before = _live(settings)
    assert first.dead_letters == [] and len(stub.requests) == len(before) + 1
    # an edit while the endpoint refuses (a 4xx is not retried): the doc is dead-lettered,
    # its indexed version stays live, and nothing is indexed without its sentence
    doc = folder / Path(DOC).name
    doc.write_text(doc.read_text() + f"\n\nA closing {MARKER} paragraph about chunk sizes.\n")
    (folder / "new.md").write_text(f"# New\n\nA new {MARKER} document.\n")
    stub.replies[:] = [400] * 10
    failed = _sync(settings)
    assert {d.path for d in failed.dead_letters} == {str(doc), str(folder / "new.md")}
    assert all("situating" in d.reason and d.stage == "embed" for d in failed.dead_letters)
    assert _live(settings) == before
    status = ingest.status(settings=settings)
    assert len(status.dead_letters) == 2
    # the endpoint is back: the next sync retries both, though neither file changed again
    stub.replies[:] = [SENTENCE] * 50
    fixed = _sync(settings)
    after = _live(settings)
    assert fixed.dead_letters == [] and ingest.status(settings=settings).dead_letters == []
    assert any(MARKER in c.text for c in after if c.doc_id.endswith("new.md"))
    assert all(situation_of(c.context) == SENTENCE for c in after)


def test_situate_without_endpoint_fails_before_opening_anything(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    settings = _settings(tmp_path, None)
    with pytest.raises(SituateUnavailable, match=r"generator\.base_url"):
        _sync(settings)
    assert not settings.vectors_dir.exists()


def test_cache_is_durable_and_keyed_by_hash(tmp_path: Path) -> None:
    cache = SituateCache(tmp_path)
    cache.put({"h1": "one", "h2": "two"}, "m|prompt1|tokens48")
    cache.put({"h1": "one"}, "m|prompt1|tokens48")  # idempotent
    cache.close()
    reopened = SituateCache(tmp_path)
    assert reopened.get(["h1", "h3", "h2"]) == {"h1": "one", "h2": "two"} and len(reopened) == 2
    reopened.close()


def test_excerpt_and_reply_cleaning() -> None:
    text = "".join(f"{i:04d} " for i in range(2000))  # 10k chars
    head_chunk = document_excerpt(text, 10, 40, budget=1000)
    assert head_chunk.startswith(text[:1000]) and len(head_chunk) < 1010
    far = document_excerpt(text, 8000, 8050, budget=1000)
    assert far.startswith(text[:500]) and text[8000:8050] in far and len(far) < 1020
    words = lambda ws: [1] * len(ws)  # noqa: E731  one token per word
    assert parse_sentence('Context: "A b c d e."\nf g', 4, words) == "A b c d"
    assert parse_sentence("Context:\n\n'A b.'\n", 4, words) == "A b."
    assert parse_sentence("  \n ", 4, words) == ""


def test_ablation_runs_a_situate_config_only_with_an_endpoint_and_shows_its_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.chunk_ablation import ConfigResult, main, markdown_ablation, parse_spec

    monkeypatch.setattr("sys.argv", ["chunk_ablation.py", "base=256/32/8", "sit=256/32/8/s"])
    with pytest.raises(SystemExit, match="--generator-url"):
        main()  # refused before anything is indexed: no row that was not measured

    name, chunk = parse_spec("sit=256/32/8/h16/s")
    assert (name, chunk.situate, chunk.header_tokens) == ("sit", True, 16)
    assert not parse_spec("plain=256/32/8")[1].situate
    rows = [
        {"name": n, "ndcg@10": 0.7, "recall@10": 0.8, "recall@100": 0.9, "mrr@10": 0.6}
        | {"p50_ms": 1.0, "p95_ms": 2.0}
        for n in ("bm25", "dense", "hybrid-rrf", "hybrid-dbsf")
    ]
    common = dict(split="train", queries=5, docs=20, chunks=30, index_s=3.0, rows=rows)
    plain = ConfigResult.model_validate(
        {"name": "plain", "chunk": ChunkSettings(), "edits": 2, "changed": 2, "re_embedded": 2}
        | common
    )
    sit = plain.model_copy(
        update={"name": "sit", "chunk": chunk, "llm_calls": 31, "llm_s": 12.4, "edit_llm_calls": 3}
    )
    lines = markdown_ablation([plain, sit]).splitlines()
    header = lines[0].split("|")
    assert "LLM calls (s)" in lines[0]
    plain_cells, sit_cells = ([c.strip() for c in line.split("|")] for line in lines[2:])
    assert len(plain_cells) == len(sit_cells) == len(header)
    assert "31 (12)" in sit_cells and "3" in sit_cells[-3:] and "256/32/8/h16/s" in lines[3]
    assert plain_cells[-3:-1] == ["-", "-"]


def test_header_and_sentence_must_leave_room_for_text() -> None:
    short = Embedder(  # only the sequence length matters here; the model is never called
        EmbedderVersion(name="seq-128", fingerprint="0", dimension=4),
        max_seq_length=128,
        tokenizer_name="seq-128",
        _count=lambda texts: [len(t.split()) for t in texts],
        _encode=lambda texts, batch: [],
    )
    fits = ChunkSettings(situate=True, situate_tokens=48, header_tokens=16)
    assert chunker_for(Settings(chunk=fits), short).max_tokens == 126 - 64
    too_much = ChunkSettings(situate=True, situate_tokens=128, header_tokens=0)
    with pytest.raises(ValueError, match="leave -2 tokens"):
        chunker_for(Settings(chunk=too_much), short)
