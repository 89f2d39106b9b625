"""The first answer after `watch --serve` starts, against the second, with the models opened
before readiness (`server.warm`, the default) and without, side by side in one run.

Each run copies `samples/` into a fresh folder and indexes it (`ragstream sync`), then starts
`ragstream watch FOLDER --serve` over it as `make demo` does (its catch-up embeds nothing),
waits until `/v1/ready` answers 200 (timed from the start), then asks two different
questions over HTTP and times each whole request. Printed per mode: seconds to
ready, the first and second query's wall time, their ratio (target <= 1.5), and the first
query's own `embed` timing.

    .venv/bin/python bench/first_query.py [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ("how are deleted files handled?", "How does a blue/green reindex swap embedders?")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(warm: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "samples"
        shutil.copytree(REPO / "samples", folder)
        port, data = free_port(), str(Path(tmp) / "data")
        env = dict(os.environ, RAGSTREAM_SERVER__WARM=str(warm).lower(), HF_HUB_OFFLINE="1")
        cli = [sys.executable, "-m", "ragstream.cli"]
        subprocess.run([*cli, "sync", str(folder), "--data-dir", data], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        cmd = [*cli, "watch", str(folder), "--serve", "--data-dir", data, "--port", str(port)]
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    if httpx.get(f"{url}/v1/ready", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError("watch --serve exited")
                time.sleep(0.1)
            ready_s = time.perf_counter() - started
            walls, embeds = [], []
            for question in QUESTIONS:
                t = time.perf_counter()
                reply = httpx.post(f"{url}/v1/query", json={"query": question}, timeout=300)
                walls.append(time.perf_counter() - t)
                reply.raise_for_status()
                assert reply.json()["citations"], f"no answer to {question!r}: {reply.text}"
                embeds.append(reply.json()["timings_ms"].get("retrieve.embed", 0.0))
        finally:
            proc.terminate()
            proc.wait(60)
    return {
        "ready_s": round(ready_s, 2),
        "first_s": round(walls[0], 3),
        "second_s": round(walls[1], 3),
        "ratio": round(walls[0] / walls[1], 2),
        "first_embed_ms": round(embeds[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.runs):
        for warm in (True, False):
            print(json.dumps({"warm": warm, **one_run(warm)}), flush=True)


if __name__ == "__main__":
    main()
