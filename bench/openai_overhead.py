"""What OpenAI's dialect costs: `POST /v1/chat/completions` against `POST /v1/chat` on the
same questions, one at a time, against one real `ragstream serve` (docs/guide/openai.md).

The bench syncs the repo's samples/ into a data dir under `--out` (reused when built before),
then runs the server twice as a subprocess: with the offline extractive generator, and with
its generator pointed at the load bench's slow OpenAI-compatible stub (`--llm-delay`
seconds per answer). For each, every question of the load bench is asked `--rounds` times,
each time through both routes in turn (so both see the same machine), and as a stream through
both. It prints, per generator, p50 / p95 of each route's latency and their ratio (target
<= 1.1x at p50), and the time to the first streamed text: the first `text` event of
`/v1/chat`, the first chunk with content of `/v1/chat/completions`.

    .venv/bin/python bench/openai_overhead.py [--rounds 5] [--llm-delay 0.2] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import QUESTIONS, REPO, Server, StubLLM, child_env, sync

ROUTES = {
    "chat": ("/v1/chat", lambda q: {"messages": [{"role": "user", "content": q}]}),
    "completions": (
        "/v1/chat/completions",
        lambda q: {"model": "ragstream", "messages": [{"role": "user", "content": q}]},
    ),
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def timed(client: httpx.Client, url: str, body: dict[str, object]) -> float:
    start = time.perf_counter()
    reply = client.post(url, json=body)
    reply.raise_for_status()
    return time.perf_counter() - start


def first_text(client: httpx.Client, url: str, body: dict[str, object], route: str) -> float:
    """Seconds to the first streamed text of the answer (the stream is then read to its end)."""
    start, first = time.perf_counter(), None
    with client.stream("POST", url, json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if first is None and _has_text(line, route):
                first = time.perf_counter() - start
    return first if first is not None else time.perf_counter() - start


def _has_text(line: str, route: str) -> bool:
    if route == "chat":
        return line.startswith("event: text") or line.startswith("event: answer")
    return line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line


@contextmanager
def server(docs: Path, data_dir: Path, log: Path, stub: str | None) -> Iterator[str]:
    served = Server("serve", docs, data_dir, log, child_env(stub))
    try:
        yield served.start()
    finally:
        served.stop()


def measure(url: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    with httpx.Client(timeout=300, trust_env=False) as client:
        for q in QUESTIONS:  # warm: models loaded, caches filled for both routes alike
            for path, body in ROUTES.values():
                timed(client, url + path, body(q))
        for _ in range(rounds):
            for q in QUESTIONS:
                for route, (path, body) in ROUTES.items():
                    out.setdefault(route, []).append(timed(client, url + path, body(q)))
                    first = first_text(client, url + path, body(q), route)
                    out.setdefault(route + " first text", []).append(first)
    return out


def report(name: str, got: dict[str, list[float]]) -> None:
    chat, comp = got["chat"], got["completions"]
    print(f"{name} ({len(chat)} questions per route):")
    for route in ("chat", "completions", "chat first text", "completions first text"):
        t = got[route]
        print(f"  {route:24s} p50 {pct(t, 50) * 1e3:8.1f} ms  p95 {pct(t, 95) * 1e3:8.1f} ms")
    print(
        f"  completions / chat: p50 x{pct(comp, 50) / pct(chat, 50):.3f}, "
        f"p95 x{pct(comp, 95) / pct(chat, 95):.3f}, "
        f"mean x{statistics.mean(comp) / statistics.mean(chat):.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--llm-delay", type=float, default=0.2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="openai-bench-"))
    docs, data_dir = REPO / "samples", out / "data-samples"
    sync(docs, data_dir, child_env(None))
    for name, delay in (("extractive", None), (f"LLM stub ({args.llm_delay} s)", args.llm_delay)):
        with (
            StubLLM(delay) if delay is not None else nullcontext() as stub,
            server(docs, data_dir, out / "server.log", stub.url if stub else None) as url,
        ):
            report(name, measure(url, args.rounds))


if __name__ == "__main__":
    main()
