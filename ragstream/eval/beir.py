"""BEIR-format datasets: loading, slicing, and indexing a corpus through the real ingest.

A corpus is written as one Markdown file per document (`<data_dir>/corpus/<id>.md`), so the
file stem is the BEIR id (`doc_key`) and the index is built exactly as a user's folder is.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ragstream.core.settings import Settings
from ragstream.service import ingest

log = logging.getLogger(__name__)

Corpus = dict[str, dict[str, str]]  # doc id -> {"title", "text"}
Queries = dict[str, str]  # query id -> text
Qrels = dict[str, dict[str, int]]  # query id -> doc id -> graded relevance


def load_corpus(dataset_dir: str | Path) -> Corpus:
    """corpus.jsonl of a BEIR dataset (all a label-free run reads)."""
    corpus: Corpus = {}
    with (Path(dataset_dir) / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in filter(str.strip, fh):
            d = json.loads(line)
            corpus[str(d["_id"])] = {"title": d.get("title") or "", "text": d.get("text") or ""}
    return corpus


def load_beir(dataset_dir: str | Path, split: str = "test") -> tuple[Corpus, Queries, Qrels]:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv (with header) of a BEIR dataset."""
    root = Path(dataset_dir)
    corpus = load_corpus(root)
    queries: Queries = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in filter(str.strip, fh):
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: Qrels = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        next(rows, None)  # header: query-id, corpus-id, score
        for row in rows:
            if row:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return corpus, queries, qrels


def beir_subset(
    corpus: Corpus, queries: Queries, qrels: Qrels, n_queries: int, n_distractors: int
) -> tuple[Corpus, Queries, Qrels]:
    """A small fixed slice for tests and quick runs: the first `n_queries` judged queries,
    every document they judge, and the first `n_distractors` other documents of the corpus
    (so retrieval still has to pick the relevant ones out)."""
    qids = [q for q in queries if q in qrels][:n_queries]
    judged = {d for q in qids for d in qrels[q]}
    others = set([d for d in corpus if d not in judged][:n_distractors])
    sub = {d: doc for d, doc in corpus.items() if d in judged or d in others}
    return sub, {q: queries[q] for q in qids}, {q: qrels[q] for q in qids}


def write_beir(
    root: str | Path, corpus: Corpus, queries: Queries, qrels: Qrels, split: str = "test"
) -> Path:
    """The inverse of `load_beir`: `corpus.jsonl`, `queries.jsonl` and `qrels/<split>.tsv`
    under `root`, so a slice (`beir_subset`) runs through the same loader, CLI and harness
    as a full dataset."""
    root = Path(root)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    docs = [{"_id": d, **doc} for d, doc in corpus.items()]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    rows = [{"_id": q, "text": t} for q, t in queries.items()]
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [f"{q}\t{d}\t{rel}\n" for q, ds in qrels.items() for d, rel in ds.items()]
    (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))
    return root


def markdown_doc(doc: Mapping[str, str]) -> str:
    """A BEIR document as the Markdown a user would keep: the title as the heading."""
    title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
    return f"# {title}\n\n{text}\n" if title else f"{text}\n"


def index_corpus(
    corpus: Corpus, data_dir: str | Path, settings_overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Write `<data_dir>/corpus/<id>.md` and sync that folder as `ragstream sync` does
    (`service.ingest.sync`).

    Unchanged files are not rewritten (their mtime is the ingest's change signal), files of
    ids no longer in the corpus are removed, so the index always equals this corpus."""
    data = Path(data_dir)
    folder = data / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for doc_id, doc in corpus.items():
        if not doc_id or "/" in doc_id or "\\" in doc_id or doc_id.startswith("."):
            raise ValueError(f"document id {doc_id!r} cannot be a file name")
        path = folder / f"{doc_id}.md"
        wanted.add(path.name)
        text = markdown_doc(doc)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for stale in folder.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    settings = Settings(**{**(settings_overrides or {}), "data_dir": data}).with_paths([folder])
    report = ingest.sync([folder], settings=settings, allow_mass_delete=True)
    log.info("indexed %d docs (%d chunks embedded)", report.docs_seen, report.chunks_embedded)
    if report.dead_letters:
        log.warning("%d documents could not be indexed", len(report.dead_letters))
    return settings


def doc_key(doc_id: str) -> str:
    """The BEIR id of a chunk's document: the file stem of `<source>:<path>`."""
    return PurePosixPath(doc_id.split(":", 1)[-1]).stem


def beir_doc_id(settings: Settings, key: str) -> str:
    """The index's doc id of BEIR document `key` (the inverse of `doc_key`: `index_corpus`
    writes `<key>.md` into the single source it indexes)."""
    return f"{settings.sources[0].name}:{key}.md"
