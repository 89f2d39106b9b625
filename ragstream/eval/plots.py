"""`ragstream eval --plot DIR`: the retrieval report as two PNGs, the same figures the
console's Quality page draws (nDCG@10 per configuration; each stage's latency spread).

matplotlib with the Agg backend (no display, no font download: its bundled DejaVu fonts),
imported only here, so nothing else pays its import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.core.errors import InvalidRequestError

if TYPE_CHECKING:
    from ragstream.eval.evaluation import EvalReport

NDCG_PNG = "ndcg.png"
LATENCY_PNG = "latency.png"
WHISKERS = (5.0, 95.0)  # the box plot's whiskers: p5..p95 (p50 is the line in the box)


def write_plots(report: EvalReport, folder: Path) -> list[Path]:
    """Write `ndcg.png` (and `latency.png` when the report has stage timings) into `folder`;
    returns the files written. Only a retrieval-mode report has rows to plot."""
    if not report.rows:
        raise InvalidRequestError(
            f"--plot draws the retrieval rows; a --mode {report.mode} report has none"
        )
    import matplotlib

    matplotlib.use("Agg")  # before pyplot: no display here
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    title = f"{report.dataset} {report.split}: {report.queries} queries"
    written = []

    names = [r.name for r in report.rows]
    scores = [r.ndcg_10 for r in report.rows]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2), dpi=100)
    bars = ax.barh(names, scores, color="#4c72b0")
    ax.bar_label(bars, labels=[f"{s:.4f}" for s in scores], padding=3, fontsize=9)
    ax.set_xlim(0, 1)
    what = ("nDCG@10", f"nDCG@10 per configuration — {title}")
    written.append(_finish(plt, fig, ax, *what, folder / NDCG_PNG))

    stages = {k: v for k, v in (report.stage_ms or {}).items() if v}
    if stages:
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(stages) + 1.2), dpi=100)
        floor = 1e-3  # a log axis cannot show 0 ms (a stage too fast for the clock)
        data = [[max(x, floor) for x in v] for v in stages.values()]
        ax.boxplot(data, orientation="horizontal", whis=WHISKERS, showfliers=False)
        ax.set_yticks(range(1, len(stages) + 1), list(stages))
        ax.set_xscale("log")
        label = "ms per query (box p25–p75, line p50, whiskers p5–p95)"
        what = (label, f"Retrieval latency per stage — {title}")
        written.append(_finish(plt, fig, ax, *what, folder / LATENCY_PNG))
    return written


def _finish(plt: Any, fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
    """Rows top to bottom in the report's order, labels, then the PNG; the figure closed."""
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
