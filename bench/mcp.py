"""MCP against the direct `Client` on the same index, side by side in one run, and MCP
sessions at once against the server's admission limits.

The index: the first `--docs` SciFact abstracts that its test claims cite (then others), one
`.txt` file each in a temporary folder, synced once (not timed); the questions: those claims
(`search` asks each way the same `--search-calls`, `ask` each way its own `--calls`, or
with `--no-memo` the same ones).
Each figure is the wall time of one call as its caller sees it (`search` k=8 = `retrieve`;
`ask` = `query` with the offline extractive generator, the default), after untimed warm-up
calls of each way (`warm_up`):

  embedded   `Client(data_dir)` in this process (its blocking calls in a worker thread,
             as in `direct`) and `ragstream mcp --data-dir D` as a
             subprocess over stdio opening D itself; one process holds a data dir, so they
             take turns: half the direct calls, all the stdio calls, the other half
  served     `ragstream serve` over D; interleaved round-robin, one question at a time:
             `Client(url)` (HTTP `/v1/*`), MCP over streamable HTTP at `/mcp`, and `ragstream
             mcp --data-dir D` over stdio, which finds the server recorded in D and asks it
  sessions   `--sessions` MCP sessions over HTTP at once, each `--per-session` tool calls
             (search and ask in turn) against the default admission limits; every HTTP
             status the clients get is counted (5xx must be 0; a 429 is retried after its
             Retry-After and counted)

The ratio is MCP's p50 over the direct call's p50 in the same mode (target for `search`:
at most 1.2x); for `search` served, also the median over rounds of each round's ratio (the
same question asked each way within seconds, so a shift in the machine's load cancels), and
with `--no-memo` (the engine's vector memo off) the same for `ask`.

    .venv/bin/python bench/mcp.py [--docs 60] [--calls 12] [--search-calls 40] [--no-memo]
                                  [--sessions 8] [--per-session 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)  # not bench/: this file's name would hide the `mcp` SDK

from bench.load import Server  # noqa: E402

SCIFACT = REPO.parent / "shared" / "data" / "scifact"
TARGET = 1.2  # MCP search over the direct call, p50
Timed = Callable[[str], Awaitable[None]]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def corpus(scifact: Path, n: int, folder: Path) -> list[str]:
    """Write `n` abstracts as files (the cited ones first); the claims that cite them."""
    lines = (scifact / "qrels" / "test.tsv").read_text().splitlines()[1:]
    qrels = [line.split("\t") for line in lines if line]
    cited = list(dict.fromkeys(doc for _, doc, _ in qrels))
    docs = {}
    for line in (scifact / "corpus.jsonl").open():
        row = json.loads(line)
        docs[row["_id"]] = f"{row['title']}\n\n{row['text']}\n"
    chosen = (cited + [d for d in docs if d not in set(cited)])[:n]
    folder.mkdir(parents=True)
    for doc in chosen:
        (folder / f"{doc}.txt").write_text(docs[doc])
    kept = {q for q, doc, _ in qrels if doc in set(chosen)}
    claims = {}
    for line in (scifact / "queries.jsonl").open():
        row = json.loads(line)
        if row["_id"] in kept:
            claims[row["_id"]] = row["text"]
    return list(claims.values())


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(fn: Timed, questions: list[str], into: list[float]) -> None:
    for q in questions:
        started = time.perf_counter()
        await fn(q)
        into.append(time.perf_counter() - started)


def direct(client: Any, tool: str) -> Timed:
    """The blocking `Client` call in a worker thread, as an async program (and each MCP
    transport) makes it; on this event loop's thread its first calls measured 0.4-1 s."""
    method = client.retrieve if tool == "search" else client.query

    async def run(q: str) -> None:
        await asyncio.to_thread(method, q, k=8)

    return run


def mcp(session: Any, tool: str) -> Timed:
    from tests.harness.mcp_client import call

    async def run(q: str) -> None:
        await call(session, tool, **({"query": q} if tool == "search" else {"question": q}))

    return run


WAYS = ("direct", "http", "stdio")
WARM = 12  # the last claims: untimed warm-up calls of each way
Plan = dict[str, dict[str, list[str]]]  # tool -> way -> its questions, in order


def plan(questions: list[str], search_calls: int, ask_calls: int, memo: bool) -> Plan:
    """`search`: every way the same questions (a search keeps no memo), so each round is a
    pair; `ask`: each way its own while the engine keeps its vector memo (a repeated question
    would find its sentences' vectors there and flatter whoever asks it second), else the
    same ones, paired like `search`. The same ones in either mode."""
    timed = questions[:-WARM]
    same = [timed[i % len(timed)] for i in range(search_calls)]
    own = {w: timed[i :: len(WAYS)][:ask_calls] for i, w in enumerate(WAYS)}
    return {
        "search": dict.fromkeys(WAYS, same),
        "ask": own if memo else dict.fromkeys(WAYS, timed[:ask_calls]),
    }


async def warm_up(fn: Timed, questions: list[str]) -> None:
    """Untimed calls first: the models load, and the first encodes of each new input length
    are slow (measured in-process: a dozen calls at 0.4-1 s each, then ~30 ms)."""
    for q in questions[-WARM:]:
        await fn(q)


async def embedded(data: Path, questions: list[str], asked: Plan) -> dict[str, list[float]]:
    from ragstream.client import Client
    from tests.harness.mcp_client import stdio_session

    out: dict[str, list[float]] = {}
    for turn in ("first half", "stdio", "second half"):  # direct calls bracket the stdio ones
        if turn == "stdio":
            async with stdio_session(data) as session:
                for tool in ("search", "ask"):
                    await warm_up(mcp(session, tool), questions)
                    rows = out.setdefault(f"stdio {tool}", [])
                    await timed(mcp(session, tool), asked[tool]["stdio"], rows)
            continue
        with Client(data) as client:
            assert client.mode == "embedded"
            for tool in ("search", "ask"):
                mine = asked[tool]["direct"]
                part = mine[: len(mine) // 2] if turn == "first half" else mine[len(mine) // 2 :]
                await warm_up(direct(client, tool), questions)
                await timed(direct(client, tool), part, out.setdefault(f"direct {tool}", []))
    return out


async def served(url: str, data: Path, questions: list[str], asked: Plan) -> dict[str, list[float]]:
    from ragstream.client import Client
    from tests.harness.mcp_client import http_session, stdio_session

    out: dict[str, list[float]] = {}
    async with AsyncExitStack() as stack:
        client = stack.enter_context(Client(url=url))
        http = await stack.enter_async_context(http_session(url))
        stdio = await stack.enter_async_context(stdio_session(data))  # routed to the server
        for tool in ("search", "ask"):
            ways = {"direct": direct(client, tool), "http": mcp(http, tool)}
            ways["stdio"] = mcp(stdio, tool)
            for fn in ways.values():
                await warm_up(fn, questions)
            for i in range(min(map(len, asked[tool].values()))):
                turn = WAYS[i % 3 :] + WAYS[: i % 3]  # round-robin, who goes first rotates
                for way in turn:
                    await timed(
                        ways[way], [asked[tool][way][i]], out.setdefault(f"{way} {tool}", [])
                    )
    return out


def paired(rows: dict[str, list[float]], way: str, tool: str) -> float:
    """The median over rounds of a way's time over the direct one's in that round."""
    ratios = zip(rows[f"{way} {tool}"], rows[f"direct {tool}"], strict=True)
    return statistics.median(m / d for m, d in ratios)


async def sessions(url: str, questions: list[str], n: int, per: int) -> dict[str, Any]:
    """`n` sessions at once, each `per` calls; every HTTP status the clients get, counted."""
    from mcp.shared.exceptions import MCPError

    from tests.harness.mcp_client import call, http_session

    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def one(i: int) -> None:
        mine: Counter[int] = Counter()

        def seen(method: str, status: int) -> None:
            statuses[f"{method} {status}"] += 1
            mine[status] += 1

        for _ in range(20):  # an initialize answered 429 is retried after its Retry-After
            before = mine[429]
            try:
                async with http_session(url, on_status=seen) as s:
                    for j in range(per):
                        q = questions[(i * per + j) % len(questions)]
                        tool = "search" if j % 2 == 0 else "ask"
                        args = {"query": q} if tool == "search" else {"question": q}
                        while True:
                            before = mine[429]
                            started = time.perf_counter()
                            try:
                                await call(s, tool, **args)
                            except MCPError as exc:
                                if mine[429] == before:
                                    errors[str(exc)] += 1
                                    break
                                await asyncio.sleep(1.0)
                                continue
                            latencies.append(time.perf_counter() - started)
                            break
                return
            except Exception as exc:
                if mine[429] == before:
                    errors[f"session: {type(exc).__name__}: {exc}"] += 1
                    return
                await asyncio.sleep(1.0)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - started
    fives = sum(v for k, v in statuses.items() if k.split()[1].startswith("5"))
    return {
        "sessions": n,
        "calls": len(latencies),
        "wanted": n * per,
        "wall_s": round(wall, 2),
        "p50_s": round(p(latencies, 0.5), 3) if latencies else None,
        "p95_s": round(p(latencies, 0.95), 3) if latencies else None,
        "http_statuses": dict(sorted(statuses.items())),
        "5xx": fives,
        "429": sum(v for k, v in statuses.items() if k.endswith(" 429")),
        "errors": dict(errors),
    }


def table(rows: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        k: {"p50_ms": round(1000 * statistics.median(v), 1), "p95_ms": round(1000 * p(v, 0.95), 1)}
        for k, v in rows.items()
    }


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    folder, data = base / "docs", base / "data"
    questions = corpus(args.scifact, args.docs, folder)[: 3 * args.calls + WARM]
    if len(questions) < 3 * args.calls + WARM:
        raise SystemExit(f"{args.docs} abstracts answer {len(questions)} claims: fewer than needed")
    if args.no_memo:  # this process, its Client and every subprocess it starts
        os.environ["RAGSTREAM_QUERY__VECTOR_MEMO"] = "0"
    asked = plan(questions, args.search_calls, args.calls, memo=not args.no_memo)
    note(f"syncing {args.docs} abstracts ...")
    started = time.perf_counter()
    sync = [str(Path(sys.executable).parent / "ragstream"), "sync", str(folder)]
    done = subprocess.run(
        [*sync, "--data-dir", str(data), "--json"], env=_env(), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"sync failed:\n{done.stderr[-3000:]}")
    chunks = json.loads(done.stdout)["chunks_live"]  # a subprocess: this one stays model-free
    note(f"synced {chunks} chunks in {time.perf_counter() - started:.0f} s")
    rows = asyncio.run(embedded(data, questions, asked))
    note("served mode ...")
    server = Server("serve", folder, data, base / "serve.log", env=_env())
    try:
        url = server.start()
        served_rows = asyncio.run(served(url, data, questions, asked))
        rows |= {f"served {k}": v for k, v in served_rows.items()}
        note(f"{args.sessions} sessions at once ...")
        crowd = asyncio.run(sessions(url, questions, args.sessions, args.per_session))
    finally:
        server.stop()
    figures = table(rows)
    ratios = {}
    for mode, prefix in (("embedded", ""), ("served", "served ")):
        for tool in ("search", "ask"):
            base_p50 = figures[f"{prefix}direct {tool}"]["p50_ms"]
            for way in ("stdio", "http") if mode == "served" else ("stdio",):
                key = f"{prefix}{way} {tool}"
                ratios[f"{mode} {way} {tool}"] = round(figures[key]["p50_ms"] / base_p50, 2)
    return {
        "docs": args.docs,
        "chunks": chunks,
        "calls": {"search": args.search_calls, "ask": args.calls},
        "latency": figures,
        "ratio_p50": ratios,
        "ratio_paired": {
            tool: {w: round(paired(served_rows, w, tool), 2) for w in ("http", "stdio")}
            for tool in (("search",) if not args.no_memo else ("search", "ask"))
        },
        "memo": not args.no_memo,
        "target_search": TARGET,
        "sessions": crowd,
    }


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def show(result: dict[str, Any]) -> None:
    calls = result["calls"]
    print(
        f"{result['docs']} SciFact abstracts, {result['chunks']} chunks; calls per row: "
        f"search {calls['search']}, ask {calls['ask']}; load average {load()}"
    )
    print(
        f"{'mode':<9} {'tool':<7} {'direct p50':>11} {'MCP':<6} {'p50':>9} {'p95':>9} {'ratio':>6}"
    )
    lat = result["latency"]
    for name, ratio in result["ratio_p50"].items():
        mode, way, tool = name.split()
        prefix = "served " if mode == "served" else ""
        d, m = lat[f"{prefix}direct {tool}"], lat[f"{prefix}{way} {tool}"]
        print(
            f"{mode:<9} {tool:<7} {d['p50_ms']:>9.1f}ms {way:<6} {m['p50_ms']:>7.1f}ms "
            f"{m['p95_ms']:>7.1f}ms {ratio:>5.2f}x"
        )
    for tool, pairs in result["ratio_paired"].items():
        print(
            f"served {tool}, median of per-round ratios (same question, same round): "
            f"http {pairs['http']:.2f}x, stdio {pairs['stdio']:.2f}x"
            + (f" (target <= {TARGET}x)" if tool == "search" else "")
        )
    if not result["memo"]:
        print("(query.vector_memo = 0: every ask encodes its sentences afresh)")
    c = result["sessions"]
    print(
        f"{c['sessions']} sessions at once: {c['calls']}/{c['wanted']} calls in {c['wall_s']} s, "
        f"p50 {c['p50_s']} s, p95 {c['p95_s']} s; 5xx: {c['5xx']}, 429: {c['429']}; "
        f"statuses {c['http_statuses']}; errors {c['errors'] or 'none'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--docs", type=int, default=60, help="abstracts in the index")
    parser.add_argument("--calls", type=int, default=12, help="timed `ask` calls per way")
    parser.add_argument("--search-calls", type=int, default=40, help="timed `search` calls")
    parser.add_argument(
        "--no-memo", action="store_true", help="query.vector_memo=0: `ask` paired like search"
    )
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--per-session", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        show(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
