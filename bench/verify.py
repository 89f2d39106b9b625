"""How long `ragstream verify` takes at 10k and 100k chunks, full and `--sample`.

The index is written straight through the store APIs (Qdrant Edge + tantivy, or with
`--lexical sparse` the BM25 leg in the Edge points), the way the writer stores points, with
random unit 384-d vectors: verify never reads a vector or loads a model, so no encoding is
needed to measure it. Each document is a
real file on disk whose size, mtime and xxh3 digest the points record, `--per-doc` chunks per
file. Timed, each in a fresh store open (what `ragstream verify` does):

  full        every file stat'ed, every live point and BM25 id read, all classes checked
  sample      `--sample N` random documents, looked up one at a time
  touched     full again after 1% of the files got a new mtime with the same bytes (the
              audit hashes those files' bytes to tell a touch from an edit)

    .venv/bin/python bench/verify.py [--chunks 10000 100000] [--per-doc 20] [--sample 200]
        [--lexical tantivy|sparse] [--json]

Prints one JSON line per size as it is measured; with `--json`, stdout is instead one JSON
object at the end (`lexical`, `per_doc`, `sample` and `rows`, the same rows) and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np

from bench._stdout import print_json, stdout_to_stderr
from ragstream.connectors.fs import file_digest
from ragstream.connectors.state import SourcesBook
from ragstream.connectors.stores import open_configured, open_lexical_index
from ragstream.core.ids import content_hash, point_id
from ragstream.core.models import EmbedderVersion, IndexedChunk
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.service.audit import verify

EMBEDDER = EmbedderVersion(name="bench/random-384", fingerprint="0" * 16, dimension=384)
WORDS = ["index", "drift", "audit", "vector", "lexical", "chunk", "folder", "version", "sync"]


def build(base: Path, chunks: int, per_doc: int, lexical: str, seed: int = 7) -> Settings:
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    root = base / "docs"
    root.mkdir(parents=True)
    source = FolderConfig(name="docs", root=root)
    settings = Settings(
        data_dir=base / "data", sources=[source], store={"lexical_backend": lexical}
    )
    SourcesBook(settings.state_dir).record(settings.sources)
    vectors = open_configured(settings, EMBEDDER)
    index = open_lexical_index(settings.lexical, settings.lexical_dir, lambda: vectors)
    batch: list[IndexedChunk] = []
    for d in range(chunks // per_doc):
        texts = [" ".join(rng.choices(WORDS, k=60)) + f" {d}-{i}" for i in range(per_doc)]
        path = root / f"d{d // 100:03d}" / f"doc{d:06d}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n\n".join(texts))
        st, digest, did = path.stat(), file_digest(path), f"docs:{path.relative_to(root)}"
        for i, text in enumerate(texts):
            h = content_hash(text, "bench")
            batch.append(
                IndexedChunk(
                    point_id=point_id(did, h, 0), doc_id=did, source="docs", path=str(path),
                    file_type="md", ordinal=i, content_hash=h, text=text, char_start=0,
                    char_end=len(text), file_size=st.st_size, file_mtime_ns=st.st_mtime_ns,
                    file_digest=digest, indexed_at=time.time(),
                )
            )  # fmt: skip
        if len(batch) >= 1024:
            _write(vectors, index, batch, np_rng)
            batch = []
    if batch:
        _write(vectors, index, batch, np_rng)
    vectors.close()
    index.close()
    return settings


def _write(vectors, lexical, batch: list[IndexedChunk], rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    m = rng.standard_normal((len(batch), EMBEDDER.dimension)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    vectors.upsert(batch, m.tolist())
    vectors.flush()
    lexical.upsert(batch)
    lexical.commit()


def timed(settings: Settings, sample: int | None = None) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    report = verify(settings=settings, sample=sample)
    seconds = time.perf_counter() - start
    return seconds, {"ok": report.ok, "docs": report.docs_checked, "chunks": report.chunks_checked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--per-doc", type=int, default=20)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--lexical", choices=["tantivy", "sparse"], default="tantivy")
    ap.add_argument("--json", action="store_true", help="stdout: one JSON object at the end")
    args = ap.parse_args()
    with stdout_to_stderr(args.json):  # --json: nothing but the document on stdout
        rows = [measure(n, args) for n in args.chunks]
    if args.json:
        print_json(
            {"lexical": args.lexical, "per_doc": args.per_doc, "sample": args.sample, "rows": rows}
        )


def measure(n: int, args: argparse.Namespace) -> dict[str, object]:
    """One size: build, then full, sampled and touched verify; the row is printed unless
    `--json` (then it is in the one document at the end)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        settings = build(Path(tmp), n, args.per_doc, args.lexical)
        built = time.perf_counter() - t0
        full_s, full = timed(settings)
        sample_s, sampled = timed(settings, args.sample)
        files = sorted((settings.sources[0].root).rglob("*.md"))
        for path in files[::100]:  # 1%: new mtime, same bytes
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        touched_s, touched = timed(settings)
        row = {
            "chunks": n, "docs": len(files), "build_s": round(built, 1),
            "full_s": round(full_s, 2), "full": full,
            "sample_s": round(sample_s, 2), "sample": sampled,
            "touched_1pct_full_s": round(touched_s, 2), "touched": touched,
        }  # fmt: skip
        if not args.json:
            print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
