"""Freshness: how long after a save does `watch --serve` answer from the new text?

Indexes N SciFact abstracts as one Markdown file each (~10k chunks at N=2200), caches that
folder + data dir under bench/out/ (keyed by N and the embedder, so re-runs skip the slow
build), copies both into a temp dir (file mtimes kept, so the catch-up scan finds nothing to
do) and starts a real `ragstream watch --serve` subprocess on the copy. Then, one at a time:

- edit:   append a paragraph carrying unique marker words to a random existing file;
- new:    create a file (an abstract not in the index + a marker paragraph);
- delete: remove a random existing file (never one edited before);
- scan:   drop a one-page scan into the folder (a PNG of an A4 page at 150 dpi with a typed
          marker paragraph, renamed in whole), which the watcher reads by OCR.

After each save it polls the HTTP endpoint the watcher recorded (through `ragstream.Client`)
until the change is visible, and reports p50/p95/max of save → visible.

What "visible" means (the cleanest signal the query API gives): a `generate=False` query
filtered to the one doc_id (filters inside both stores, so nothing else competes):
- edit/new/scan: the query is the marker words, and one returned chunk is ranked by BOTH legs,
  i.e. the lexical leg matched the markers (only the new text has them) and the same point
  is live in the vector store. That is "answerable from the new text by hybrid retrieval";
  generation/verification time is not included (see bench/query.py for that).
- delete: the query is the doc's title, and neither leg returns any chunk of the doc.
Polling adds up to one poll interval + one query round trip (printed as `resolution`).

The cache is keyed by N and the embedder only: delete bench/out/freshness-* after a change
to chunking or to the data dir layout.

    nice -n 10 .venv/bin/python bench/freshness.py [--docs 2200] [--edits 100] \
        [--debounce-ms MS] [--poll-ms 20] [--seed 0] [--vector edge|qdrant] \
        [--lexical sparse|tantivy] [--cache DIR] [--json]

`--vector qdrant` runs the server code path (qdrant-client's local mode: the only server
installable here); `--lexical` picks the BM25 leg (default: a new data dir's, sparse). `--json`
prints the figures as one JSON object (`edit_p50_s`, `edit_p95_s`, `edit_max_s`, `new_…`,
`delete_…`, `*_timeouts`, and the settings) instead of the text report: that document is the
only thing on stdout; progress (`built index: …`) always goes to stderr. `--cache` puts the
cached index elsewhere than bench/out/ (a test's temp dir).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._stdout import print_json, stdout_to_stderr
from ragstream import api
from ragstream.client import Client
from ragstream.core.answers import Answer, QueryFilters, QueryRequest
from ragstream.core.settings import Settings
from tests.harness.scifact import corpus, pct, write_markdown

OUT = Path(__file__).resolve().parent / "out"
FOLDER = "scifact"  # the source name, so doc ids are `scifact:<id>.md`
TIMEOUT_S = 30.0


def cached_index(
    docs: list[dict[str, str]], settings: Settings, out: Path = OUT
) -> tuple[Path, dict[str, int]]:
    """The built folder + data dir for this corpus size and these stores, built once
    (minutes on 2 cores)."""
    store = settings.store
    lexical = store.lexical_backend.replace("auto", "sparse")
    cache = out / f"freshness-{len(docs)}-{settings.embedder}-{store.vector_backend}-{lexical}"
    marker = cache / "built.json"
    if not marker.exists():
        shutil.rmtree(cache, ignore_errors=True)
        write_markdown(docs, cache / FOLDER)
        t = time.perf_counter()
        report = api.sync([cache / FOLDER], settings=Settings(data_dir=cache / "data"))
        built = {"docs": report.docs_seen, "chunks": report.chunks_live}
        seconds = time.perf_counter() - t
        print(f"built index: {built} in {seconds:.0f} s -> {cache}", file=sys.stderr, flush=True)
        marker.write_text(json.dumps(built))
    return cache, json.loads(marker.read_text())


@dataclass
class Watcher:
    """A `ragstream watch --serve --json` subprocess; when each doc's outcome line arrived."""

    proc: subprocess.Popen[str]
    outcomes: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def start(cls, folder: Path, data: Path, log: Path) -> Watcher:
        cmd = [sys.executable, "-m", "ragstream.cli", "watch", str(folder)]
        cmd += ["--data-dir", str(data), "--json", "--serve", "--port", "0"]
        with log.open("w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        watcher = cls(proc)
        threading.Thread(target=watcher._read, daemon=True).start()
        return watcher

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                doc_id = json.loads(line).get("doc_id", "")
                self.outcomes.setdefault(doc_id, []).append(time.perf_counter())

    def wait_serving(self, data: Path, log: Path, timeout: float = 300) -> None:
        endpoint = data / "state" / "endpoint.json"
        deadline = time.monotonic() + timeout
        while not endpoint.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"watch --serve did not start; its stderr:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


Visible = Callable[[Answer, str], bool]


def both_legs(answer: Answer, doc_id: str) -> bool:
    """A chunk of the doc matched the markers lexically and is live in the vector store."""
    return any(
        c.doc_id == doc_id and {"dense", "lexical"} <= c.ranks.keys() for c in answer.candidates
    )


def no_chunk(answer: Answer, doc_id: str) -> bool:
    return not any(c.doc_id == doc_id for c in answer.candidates)


@dataclass
class Trial:
    doc_id: str
    t0: float  # perf_counter just before the save
    seconds: float | None  # save -> visible; None: not within TIMEOUT_S
    polls: int
    query_ms: list[float]

    def outcome_s(self, watcher: Watcher) -> float | None:
        """Save -> the flow's outcome line for this doc (printed after its batch is written)."""
        after = [t - self.t0 for t in watcher.outcomes.get(self.doc_id, []) if t >= self.t0]
        return min(after, default=None)


def measure(
    client: Client,
    doc_id: str,
    query: str,
    visible: Visible,
    save: Callable[[], object],
    poll_s: float,
) -> Trial:
    request = QueryRequest(
        query=query, k=10, n=10, generate=False, filters=QueryFilters(doc_ids=[doc_id])
    )
    if visible(client.query(request), doc_id):  # the check must be able to fail
        raise AssertionError(f"{doc_id}: already 'visible' before the save")
    query_ms: list[float] = []
    t0 = time.perf_counter()
    save()
    while time.perf_counter() - t0 < TIMEOUT_S:
        q0 = time.perf_counter()
        answer = client.query(request)
        query_ms.append((time.perf_counter() - q0) * 1000)
        if visible(answer, doc_id):
            return Trial(doc_id, t0, time.perf_counter() - t0, len(query_ms), query_ms)
        time.sleep(poll_s)
    return Trial(doc_id, t0, None, len(query_ms), query_ms)


def words(rng: random.Random, n: int = 3) -> list[str]:
    return ["".join(rng.choices(string.ascii_lowercase, k=12)) for _ in range(n)]


def paragraph(markers: list[str]) -> str:
    a, b, c = markers
    return (
        f"Addendum: in the follow-up cohort {a}, the marker {b} rose sharply "
        f"under the {c} protocol, which the original analysis did not report."
    )


def scan_page(text: str, dpi: int = 150, points: float = 11.0) -> Image.Image:
    """An A4 page at `dpi` with `text` typed on it (DejaVu Sans, one-inch margins)."""
    page = Image.new("L", (round(8.27 * dpi), round(11.69 * dpi)), 255)
    font = ImageFont.truetype(
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", round(points * dpi / 72)
    )
    draw, lines, line = ImageDraw.Draw(page), [], ""
    for word in text.split():
        if font.getlength(f"{line} {word}") > page.width - 2 * dpi:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    for row, typed in enumerate([*lines, line]):
        draw.text((dpi, dpi + row * round(points * 1.45 * dpi / 72)), typed, fill=0, font=font)
    return page


def drop_scan(page: Image.Image, path: Path) -> Callable[[], object]:
    """Save the page beside the folder, then rename it in: the watcher sees it whole."""
    staged = path.parent.parent / f".{path.name}"
    page.save(staged, dpi=(150, 150))
    return lambda: os.replace(staged, path)


def summary(kind: str, trials: list[Trial], watcher: Watcher) -> str:
    seen = [t.seconds for t in trials if t.seconds is not None]
    flow = [s for t in trials if (s := t.outcome_s(watcher)) is not None]
    if not seen:
        return f"{kind:<6} n={len(trials)} never visible within {TIMEOUT_S:.0f} s"
    flow_p50 = f"{pct(flow, 0.5):.3f} s" if flow else "n/a"
    return (
        f"{kind:<6} n={len(trials)} save->visible p50={pct(seen, 0.5):.3f} s "
        f"p95={pct(seen, 0.95):.3f} s max={max(seen):.3f} s | timeouts={len(trials) - len(seen)}"
        f" | flow outcome line p50={flow_p50} | polls p50={pct([t.polls for t in trials], 0.5)}"
    )


def figures(
    results: dict[str, list[Trial]],
    built: dict[str, int],
    settings: Settings,
    query_ms: list[float],
) -> dict[str, object]:
    out: dict[str, object] = {
        "docs": built["docs"], "chunks": built["chunks"], "vectors": settings.store.vector_backend,
        "lexical": settings.store.lexical_backend.replace("auto", "sparse"),
        "debounce_ms": settings.sync.debounce_ms, "query_p50_ms": round(pct(query_ms, 0.5), 1),
    }  # fmt: skip
    for kind, trials in results.items():
        seen = [t.seconds for t in trials if t.seconds is not None]
        out[f"{kind}_n"] = len(trials)
        out[f"{kind}_timeouts"] = len(trials) - len(seen)
        for name, value in (("p50", pct(seen, 0.5)), ("p95", pct(seen, 0.95))):
            out[f"{kind}_{name}_s"] = round(value, 3) if seen else None
        out[f"{kind}_max_s"] = round(max(seen), 3) if seen else None
    return out


def run_trials(
    folder: Path, client: Client, docs: list[dict[str, str]], fresh: list[dict[str, str]],
    args: argparse.Namespace,
) -> dict[str, list[Trial]]:  # fmt: skip
    """Warm-up edits, then `--edits` edits, new files and deletes, one at a time."""
    rng = random.Random(args.seed)
    n_edit = args.warmup + args.edits
    picked = [folder / f"{d['_id']}.md" for d in rng.sample(docs, n_edit + args.edits)]
    poll_s, gap_s = args.poll_ms / 1000, args.gap_ms / 1000
    results: dict[str, list[Trial]] = {"edit": [], "new": [], "delete": [], "scan": []}

    def doc_id(path: Path) -> str:
        return f"{FOLDER}:{path.name}"

    def append(path: Path, text: str) -> Callable[[], object]:
        return lambda: path.write_text(path.read_text() + f"\n{text}\n")

    def write(path: Path, text: str) -> Callable[[], object]:
        return lambda: path.write_text(text)

    for i, path in enumerate(picked[:n_edit]):
        markers = words(rng)
        save = append(path, paragraph(markers))
        trial = measure(client, doc_id(path), " ".join(markers), both_legs, save, poll_s)
        if i >= args.warmup:
            results["edit"].append(trial)
        time.sleep(gap_s)
    for i, d in enumerate(fresh):
        markers = words(rng)
        path = folder / f"new_{i}.md"
        save = write(path, f"# {d['title']}\n\n{d['text']}\n\n{paragraph(markers)}\n")
        results["new"].append(
            measure(client, doc_id(path), " ".join(markers), both_legs, save, poll_s)
        )
        time.sleep(gap_s)
    for i in range(args.edits if args.scans is None else args.scans):
        markers = words(rng)
        path = folder / f"scan_{i}.png"
        save = drop_scan(scan_page(paragraph(markers)), path)
        results["scan"].append(
            measure(client, doc_id(path), " ".join(markers), both_legs, save, poll_s)
        )
        time.sleep(gap_s)
    titles = {f"{d['_id']}.md": d["title"] for d in docs}
    for path in picked[n_edit:]:
        results["delete"].append(
            measure(client, doc_id(path), titles[path.name], no_chunk, path.unlink, poll_s)
        )
        time.sleep(gap_s)
    return results


def run_watched(
    cache: Path, docs: list[dict[str, str]], fresh: list[dict[str, str]],
    args: argparse.Namespace,
) -> tuple[dict[str, list[Trial]], Watcher]:  # fmt: skip
    """A copy of the cached index under a real `watch --serve`, and the trials against it."""
    with tempfile.TemporaryDirectory(prefix="ragstream-fresh-") as tmp:
        folder, data, log = Path(tmp) / FOLDER, Path(tmp) / "data", Path(tmp) / "watch.log"
        shutil.copytree(cache / FOLDER, folder)  # copy2 keeps mtimes: nothing to catch up
        shutil.copytree(cache / "data", data)
        watcher = Watcher.start(folder, data, log)
        try:
            watcher.wait_serving(data, log)
            with Client(data) as client:
                assert client.mode == "http", "the watcher must own the data dir"
                results = run_trials(folder, client, docs, fresh, args)
        finally:
            watcher.stop()
    return results, watcher


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2200, help="abstracts indexed (2200: ~10k chunks)")
    ap.add_argument("--edits", type=int, default=100, help="trials per kind (edit, new, delete)")
    ap.add_argument("--scans", type=int, default=None, help="scan trials (default: --edits)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed edits first (lazy imports)")
    ap.add_argument("--debounce-ms", type=int, default=None, help="default: the setting")
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=200.0, help="quiet time between trials")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vector", choices=["edge", "qdrant"], default="edge")
    ap.add_argument("--lexical", choices=["sparse", "tantivy"], default=None)
    ap.add_argument("--cache", type=Path, default=OUT, help="where the built index is kept")
    ap.add_argument("--json", action="store_true", help="stdout: one JSON object of figures")
    args = ap.parse_args()
    os.environ["RAGSTREAM_STORE__VECTOR_BACKEND"] = args.vector  # the watcher inherits these
    if args.lexical:
        os.environ["RAGSTREAM_STORE__LEXICAL_BACKEND"] = args.lexical
    if args.debounce_ms is not None:  # the watcher subprocess inherits the environment
        os.environ["RAGSTREAM_SYNC__DEBOUNCE_MS"] = str(args.debounce_ms)
    pool = corpus(args.docs + args.edits)
    docs, fresh = pool[: args.docs], pool[args.docs :]
    if len(fresh) < args.edits or args.warmup + 2 * args.edits > len(docs):
        sys.exit("not enough abstracts: edits, deletes and new files use distinct ones")
    settings = Settings()
    with stdout_to_stderr(args.json):  # --json: nothing but the document on stdout
        cache, built = cached_index(docs, settings, args.cache)
        results, watcher = run_watched(cache, docs, fresh, args)
    query_ms = [ms for trials in results.values() for t in trials for ms in t.query_ms]
    if args.json:
        print_json(figures(results, built, settings, query_ms))
        return
    print(
        f"settings: docs={built['docs']} chunks={built['chunks']} embedder={settings.embedder} "
        f"vectors={settings.store.vector_backend} lexical={settings.lexical} "
        f"debounce_ms={settings.sync.debounce_ms} "
        f"ingest_batch_docs={settings.sync.ingest_batch_docs} "
        f"poll_ms={args.poll_ms:g} gap_ms={args.gap_ms:g} seed={args.seed} cpus={os.cpu_count()}"
    )
    print(
        f"resolution: poll {args.poll_ms:g} ms + query round trip p50 {pct(query_ms, 0.5):.1f} ms"
        f" / p95 {pct(query_ms, 0.95):.1f} ms (HTTP, generate=False, filtered to the doc)"
    )
    for kind, trials in results.items():
        print(summary(kind, trials, watcher))
    print("targets: p50 < 0.5 s, p95 < 1 s; scan p95 < 3 s")


if __name__ == "__main__":
    main()
