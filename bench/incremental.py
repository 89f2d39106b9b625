"""Re-embedded chunks per changed chunk over random one-paragraph edits (target <= 1.1).

Builds 20 long Markdown files (10 SciFact abstracts each, one section per abstract),
indexes them, then applies E random edits — each rewrites one sentence of one random
paragraph — syncing after each. "Changed chunks" counts the chunks of the new version
that contain the edited paragraph's new text (what a perfect system must re-embed);
"re-embedded" is what the sync actually encoded.

    .venv/bin/python bench/incremental.py [--edits 50] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _scifact import corpus

from core.ids import normalize_text
from core.settings import Settings
from flows.runtime import open_runtime
from ragstream import api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
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
        first = api.sync([folder], settings=settings)
        embedded = changed = 0
        t0 = time.perf_counter()
        for n in range(args.edits):
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
    print(f"initial: {first.chunks_embedded} chunks embedded for 20 docs")
    print(
        f"edits={args.edits} changed_chunks={changed} re_embedded={embedded} "
        f"ratio={embedded / max(changed, 1):.3f} mean_sync_s={elapsed / args.edits:.2f}"
    )


if __name__ == "__main__":
    main()
