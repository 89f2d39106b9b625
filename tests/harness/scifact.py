"""SciFact helpers for the benchmarks: read from ../shared/data, never copied into the repo."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"


def corpus(limit: int | None = None, data: Path = SCIFACT) -> list[dict[str, str]]:
    out = []
    with (data / "corpus.jsonl").open() as fh:
        for line in fh:
            out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


def write_markdown(docs: list[dict[str, str]], folder: Path) -> list[Path]:
    """One Markdown file per abstract: `# title` then the abstract as a paragraph."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in docs:
        path = folder / f"{d['_id']}.md"
        path.write_text(f"# {d['title']}\n\n{d['text']}\n")
        paths.append(path)
    return paths


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values` by nearest rank (no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
