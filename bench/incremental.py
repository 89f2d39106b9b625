"""Re-embedded chunks per changed chunk over random one-paragraph edits (target <= 1.1).

Builds 20 long Markdown files (10 SciFact abstracts each, one section per abstract),
indexes them, then applies E random edits — each rewrites one sentence of one random
paragraph — syncing after each. "Changed chunks" counts the chunks of the new version
that contain the edited paragraph's new text (what a perfect system must re-embed);
"re-embedded" is what the sync actually encoded. The chunker settings come from the
settings sources (defaults, TOML, env); `--max-tokens/--min-tokens/--modulus` override them
(bench/chunk_ablation.py calls `measure` once per config it compares).

    .venv/bin/python bench/incremental.py [--edits 50] [--seed 7]
        [--max-tokens 256] [--min-tokens 32] [--modulus 8]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ragstream import api
from ragstream.core.ids import normalize_text
from ragstream.core.settings import ChunkSettings, Settings
from ragstream.flows.runtime import open_runtime
from tests.harness.scifact import corpus


@dataclass(frozen=True)
class IncrementalResult:
    """What one run measured: the initial encode, then the edits' changed vs re-embedded."""

    initial_embedded: int
    edits: int
    changed: int
    re_embedded: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.re_embedded / max(self.changed, 1)

    @property
    def mean_sync_s(self) -> float:
        return self.seconds / max(self.edits, 1)


def measure(
    edits: int = 50, seed: int = 7, chunk: ChunkSettings | None = None
) -> IncrementalResult:
    """Index the 20 long files in a temporary data dir with `chunk` (None: whatever the
    settings sources say, as before the options existed), then apply `edits` edits."""
    rng = random.Random(seed)
    docs = corpus(200)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "long"
        folder.mkdir()
        for i in range(20):
            parts = [f"# Collection {i}"]
            for d in docs[i * 10 : (i + 1) * 10]:
                parts += [f"## {d['title']}", d["text"]]
            (folder / f"long_{i}.md").write_text("\n\n".join(parts) + "\n")
        settings = Settings(data_dir=Path(tmp) / "data").with_paths([folder])
        if chunk is not None:  # else defaults / TOML / env, as before the options existed
            settings = settings.model_copy(update={"chunk": chunk})
        first = api.sync([folder], settings=settings)
        embedded = changed = 0
        t0 = time.perf_counter()
        for n in range(edits):
            path = folder / f"long_{rng.randrange(20)}.md"
            paras = path.read_text().split("\n\n")
            i = rng.choice([k for k, p in enumerate(paras) if not p.startswith("#")])
            sentences = paras[i].split(". ")
            j = rng.randrange(len(sentences))
            sentences[j] = f"Edit {n} rewrote this sentence about sample {rng.random():.6f}"
            paras[i] = ". ".join(sentences)
            path.write_text("\n\n".join(paras))
            report = api.sync([folder], settings=settings)
            embedded += report.chunks_embedded
            marker = normalize_text(sentences[j])
            with open_runtime(settings) as rt:
                doc = f"long:{path.name}"
                changed += sum(
                    marker in normalize_text(c.text) for c in rt.vectors.live_chunks(doc)
                )
        elapsed = time.perf_counter() - t0
    return IncrementalResult(first.chunks_embedded, edits, changed, embedded, elapsed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=None, help="chunk.max_tokens")
    ap.add_argument("--min-tokens", type=int, default=None, help="chunk.min_tokens")
    ap.add_argument("--modulus", type=int, default=None, help="chunk.boundary_modulus")
    args = ap.parse_args()
    given = {
        "max_tokens": args.max_tokens,
        "min_tokens": args.min_tokens,
        "boundary_modulus": args.modulus,
    }
    base = Settings().chunk.model_dump()  # defaults < TOML < env, as the other benches
    chunk = ChunkSettings(**base | {k: v for k, v in given.items() if v is not None})
    r = measure(args.edits, args.seed, chunk)
    print(f"initial: {r.initial_embedded} chunks embedded for 20 docs")
    print(
        f"edits={r.edits} changed_chunks={r.changed} re_embedded={r.re_embedded} "
        f"ratio={r.ratio:.3f} mean_sync_s={r.mean_sync_s:.2f}"
    )


if __name__ == "__main__":
    main()
