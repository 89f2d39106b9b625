"""CLI latency: what a user waits for, next to the floor of starting Python at all.

Side by side in one run, N times each, interleaved round-robin (so the machine's load hits
every row alike), wall time of:

  1. `python -c pass`                     the interpreter's own start-up (the floor)
  2. `ragstream --help`                   the console script: import the CLI, print help
  3. `ragstream query Q --url URL --json` the thin client against a running server
  4. `ragstream query Q --data-dir D`     what `make demo` tells a second terminal to run: the
                                          client finds the server recorded in D and asks it
  5. HTTP `POST URL/v1/query`             the same question with stdlib urllib, in-process

The folder (default: the repo's samples/) is synced once into the data dir (not timed), then
`ragstream serve --port 0` runs in the background; one warm-up query goes first. The table
gives p50/p95/min and each row's p50 minus `python -c pass`'s p50. Target: `--help` and
`query --url` each within 1.5 s of `python -c pass` on 2 cores.

    .venv/bin/python bench/cli_latency.py [--runs 10] [--docs FOLDER] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RAGSTREAM = str(BIN / "ragstream")
TARGET_MS = 1500.0


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{len(os.sched_getaffinity(0))} cores (nproc), {model}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Server:
    """`ragstream serve --port 0`: the URL from its stdout, "ready" from its stderr."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        cmd = [RAGSTREAM, "serve", "--data-dir", str(data_dir), "--port", "0"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.ready = threading.Event()
        self.log: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if line.strip() == "ready":
                self.ready.set()

    def start(self, timeout: float = 300.0) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the JSON line once listening
        if not line:
            raise SystemExit(f"serve exited: {''.join(self.log)}")
        url: str = json.loads(line)["url"]
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        if not self.ready.wait(timeout):
            raise SystemExit(f"serve not ready after {timeout:.0f} s: {''.join(self.log)}")
        return url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def timed_run(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=120, check=False)
    ms = (time.perf_counter() - t) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} -> {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return ms


def post_query(url: str, question: str) -> dict[str, object]:
    body = json.dumps({"query": question}).encode()
    req = urllib.request.Request(
        f"{url}/v1/query", data=body, headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    with opener.open(req, timeout=120) as resp:
        answer: dict[str, object] = json.loads(resp.read())
    return answer


def timed_post(url: str, question: str) -> float:
    t = time.perf_counter()
    post_query(url, question)
    return (time.perf_counter() - t) * 1000


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]  # nearest rank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="measurements of each (default 10)")
    ap.add_argument("--docs", type=Path, default=REPO / "samples", help="folder to sync")
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a temp dir")
    ap.add_argument("--question", default="how are deleted files handled?")
    args = ap.parse_args()

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("RAGSTREAM_URL", None)
    scratch: Path | None = None
    data_dir: Path = args.data_dir
    if data_dir is None:
        scratch = Path(tempfile.mkdtemp(prefix="cli-latency-"))
        data_dir = scratch / "data"
    print(f"machine: {machine()}; python {sys.version.split()[0]}; load avg {load()}")
    print(f"docs: {args.docs}; data dir: {data_dir}; question: {args.question!r}")

    t = time.perf_counter()
    sync = [RAGSTREAM, "sync", str(args.docs), "--data-dir", str(data_dir), "--json"]
    subprocess.run(sync, capture_output=True, env=env, check=True, timeout=1800)
    print(f"synced in {time.perf_counter() - t:.1f} s (not timed below)")

    server = Server(data_dir, env)
    try:
        url = server.start()
        warm = post_query(url, args.question)
        print(f"server {url}; warm-up answer refusal={warm.get('refusal') is not None}")
        query = [RAGSTREAM, "query", args.question, "--url", url, "--json"]
        by_dir = [RAGSTREAM, "query", args.question, "--data-dir", str(data_dir), "--json"]
        things: dict[str, Callable[[], float]] = {
            "`python -c pass`": lambda: timed_run([sys.executable, "-c", "pass"], env),
            "`ragstream --help`": lambda: timed_run([RAGSTREAM, "--help"], env),
            "`ragstream query --url`": lambda: timed_run(query, env),
            "`ragstream query --data-dir` (served)": lambda: timed_run(by_dir, env),
            "HTTP `POST /v1/query` (urllib)": lambda: timed_post(url, args.question),
        }
        times: dict[str, list[float]] = {name: [] for name in things}
        for _ in range(args.runs):  # round-robin: load drifts hit every row alike
            for name, measure in things.items():
                times[name].append(measure())
    finally:
        server.stop()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    floor = statistics.median(times["`python -c pass`"])
    print(f"\n{args.runs} runs each, interleaved; load avg after {load()}\n")
    print("| what | p50 ms | p95 ms | min ms | Δ p50 vs `python -c pass` | target (< 1500 ms) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, xs in times.items():
        p50 = statistics.median(xs)
        delta = p50 - floor
        gated = "--help" in name or "--url" in name
        met = ("met" if delta < TARGET_MS else "MISSED") if gated else "-"
        row = f"| {name} | {p50:.0f} | {p95(xs):.0f} | {min(xs):.0f} | {delta:+.0f} | {met} |"
        print(row)


if __name__ == "__main__":
    main()
