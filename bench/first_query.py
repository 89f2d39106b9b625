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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.harness.helpers import watch_serving  # noqa: E402

QUESTIONS = ("how are deleted files handled?", "How does a blue/green reindex swap embedders?")


def one_run(warm: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder, data = Path(tmp) / "samples", Path(tmp) / "data"
        shutil.copytree(REPO / "samples", folder)
        env = dict(os.environ, RAGSTREAM_SERVER__WARM=str(warm).lower(), HF_HUB_OFFLINE="1")
        cli = [sys.executable, "-m", "ragstream.cli", "sync", str(folder), "--data-dir", str(data)]
        subprocess.run(cli, env=env, check=True, capture_output=True)
        started = time.perf_counter()
        with watch_serving(folder, data, env) as (url, _):
            ready_s = time.perf_counter() - started
            walls, embeds = [], []
            for question in QUESTIONS:
                t = time.perf_counter()
                reply = httpx.post(f"{url}/v1/query", json={"query": question}, timeout=300)
                walls.append(time.perf_counter() - t)
                reply.raise_for_status()
                assert reply.json()["citations"], f"no answer to {question!r}: {reply.text}"
                embeds.append(reply.json()["timings_ms"].get("retrieve.embed", 0.0))
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
