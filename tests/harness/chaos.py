"""Fault-injection helpers shared by the chaos/crash tests and their long bench versions.

The operation generator and the index == folder check live here, once, so that the short
CI run (tests/fault/test_chaos.py, tests/fault/test_crash_recovery.py) and the long one
(bench/chaos.py, bench/crash.py) exercise exactly the same code: a bench pass would prove
nothing about the test otherwise.

"index == folder" is judged against a *fresh* `sync` of the same folder into another data
dir (the reference): for every document, the live points of the index under test must be
exactly the reference's (same point ids, text, content hash, position, title, file
fingerprint), present and live in both stores (vector and lexical), with no live point
left over anywhere. The reference is built by the product itself, so the check needs no
second implementation of parsing or chunking.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench scripts run with bench/ first on the path
    sys.path.insert(0, str(REPO))

from ragstream.core.models import IndexedChunk  # noqa: E402
from ragstream.core.settings import Settings  # noqa: E402
from ragstream.flows.runtime import open_runtime  # noqa: E402
from tests.harness.helpers import json_lines  # noqa: E402
from tests.harness.scifact import corpus  # noqa: E402

# The product's default embedder. The fault tests pass "static" (the 64-d model2vec model):
# what they check (write order, kills, restarts, index == folder) does not depend on the
# embedder, and encoding is most of their cost with MiniLM; the benches keep the default.
DEFAULT_EMBEDDER = Settings.model_fields["embedder"].default

# Point fields that must match the reference (`embedder` differs by store; `deleted_at` and
# `status` are implied: only live points are compared). CONTENT says which points a doc has
# and where; DOC_PAYLOAD is what every point repeats about its file (title, (size, mtime)).
CONTENT = (
    "point_id",
    "content_hash",
    "text",
    "ordinal",
    "char_start",
    "char_end",
    "section_path",
    "page",
    "path",
    "file_type",
)
DOC_PAYLOAD = ("title", "file_size", "file_mtime_ns")
FIELDS = CONTENT + DOC_PAYLOAD
REAL_DOCS = ("md/docling_concepts_chunking.md", "html/python311_tutorial_appetite.html")


# ---- content --------------------------------------------------------------------------------


def abstracts(limit: int = 1500) -> list[dict[str, str]]:
    """Real SciFact abstracts (title + text): the text every generated file is made of."""
    return [d for d in corpus(limit) if d["text"].count(". ") >= 2]


def render(docs: Sequence[dict[str, str]], suffix: str) -> str:
    """A Markdown file gets `# title` headings; a .txt file plain title lines."""
    mark = "# " if suffix == ".md" else ""
    return "".join(f"{mark}{d['title']}\n\n{d['text']}\n\n" for d in docs)


def build_tree(
    root: Path,
    n_docs: int,
    rng: random.Random,
    pool: Sequence[dict[str, str]],
    shared_docs: Path | None = None,
    n_dirs: int = 4,
) -> None:
    """`n_docs` abstract files spread over `n_dirs` folders (+ a few real docs if given)."""
    dirs = [root / f"d{i}" for i in range(n_dirs)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(rng.sample(list(pool), n_docs)):
        suffix = ".md" if rng.random() < 0.7 else ".txt"
        (rng.choice(dirs) / f"doc{i:04d}{suffix}").write_text(render([doc], suffix))
    if shared_docs is not None:
        (root / "real").mkdir(exist_ok=True)
        for rel in REAL_DOCS:
            (root / "real" / Path(rel).name).write_bytes((shared_docs / rel).read_bytes())


# ---- the operation generator ------------------------------------------------------------------

# How often each operation is drawn (relative weights).
WEIGHTS = {
    "create": 14,
    "edit": 14,
    "append": 7,
    "retitle": 4,
    "rename": 10,
    "atomic_save": 12,
    "burst": 6,
    "delete": 10,
    "resurrect": 4,
    "move_dir": 6,
    "delete_dir": 1,
    "move_out": 2,
    "move_in": 2,
}
DIR_OPS = frozenset({"move_dir", "delete_dir", "move_out", "move_in"})


@dataclass
class Chaos:
    """Seeded random file operations on a tree: the same seed gives the same operations.

    `outside` is a folder beside the watched root: directories are moved out to it (a mass
    delete of one subtree) and back in (a mass create). Deleted contents are remembered so a
    later `resurrect` writes them again under a new name (vectors must come from tombstones).
    Below `min_files` files nothing is deleted and creation is drawn more often; at
    `max_files` nothing is created.
    """

    root: Path
    rng: random.Random
    pool: Sequence[dict[str, str]]
    outside: Path
    max_files: int = 120
    min_files: int = 20
    dir_ops: bool = True
    counter: int = 0
    graveyard: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def files(self) -> list[Path]:
        """Indexable files, the quiesce sentinel (`_*`) left alone."""
        found = self.root.rglob("*")
        return sorted(
            p for p in found if p.is_file() and p.suffix in (".md", ".txt") and p.name[0] != "_"
        )

    def dirs(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_dir())

    def _name(self, suffix: str) -> str:
        self.counter += 1
        return f"c{self.counter:05d}{suffix}"

    def _some_dir(self) -> Path:
        dirs = [self.root, *self.dirs()]
        target = self.rng.choice(dirs)
        if self.rng.random() < 0.1:  # sometimes a new nested folder
            self.counter += 1
            target = target / f"n{self.counter:05d}"
            target.mkdir(parents=True)
        return target

    def _content(self, suffix: str) -> str:
        return render(self.rng.sample(list(self.pool), self.rng.choice((1, 1, 1, 2, 3))), suffix)

    def _edited(self, path: Path) -> str:
        """One sentence of one prose paragraph replaced by a sentence from another abstract."""
        paras = path.read_text().split("\n\n")
        prose = [i for i, p in enumerate(paras) if p.count(". ") >= 1]
        if not prose:
            return path.read_text() + render([self.rng.choice(self.pool)], path.suffix)
        i = self.rng.choice(prose)
        sentences = paras[i].split(". ")
        donor = self.rng.choice(self.pool)["text"].split(". ")
        sentences[self.rng.randrange(len(sentences))] = self.rng.choice(donor).rstrip(".")
        paras[i] = ". ".join(sentences)
        return "\n\n".join(paras)

    def step(self) -> str:
        """Perform one random operation; returns what it did (for a reproducible log)."""
        files, subdirs = self.files(), [d for d in self.dirs() if d.parent == self.root]
        weights = dict(WEIGHTS)
        if not self.dir_ops:
            for op in DIR_OPS:
                weights[op] = 0
        if len(files) >= self.max_files:
            weights["create"] = weights["resurrect"] = weights["move_in"] = 0
        if len(files) < self.min_files:  # keep the tree from emptying: regrow it
            weights["delete"] = weights["delete_dir"] = weights["move_out"] = 0
            for op in ("create", "resurrect", "move_in"):
                weights[op] *= 3
        if not files:
            for op in ("edit", "append", "retitle", "rename", "atomic_save", "burst"):
                weights[op] = 0
        if not subdirs:
            weights["move_dir"] = weights["delete_dir"] = weights["move_out"] = 0
        if not self.graveyard:
            weights["resurrect"] = 0
        if not any(self.outside.iterdir()):
            weights["move_in"] = 0
        ops = [op for op in weights if weights[op]]
        op = self.rng.choices(ops, [weights[o] for o in ops])[0]
        self.counts[op] = self.counts.get(op, 0) + 1
        return f"{op} {getattr(self, '_' + op)(files, subdirs)}"

    # each operation returns a short description -------------------------------------------
    def _create(self, files: list[Path], subdirs: list[Path]) -> str:
        suffix = self.rng.choice((".md", ".md", ".txt"))
        path = self._some_dir() / self._name(suffix)
        path.write_text(self._content(suffix))
        return self._rel(path)

    def _edit(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        path.write_text(self._edited(path))
        return self._rel(path)

    def _append(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        with path.open("a") as fh:
            fh.write(render([self.rng.choice(self.pool)], path.suffix))
        return self._rel(path)

    def _retitle(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        lines = path.read_text().split("\n")
        first = next((i for i, line in enumerate(lines) if line.strip()), 0)
        mark = "# " if lines[first].startswith("# ") else ""
        lines[first] = f"{mark}{self.rng.choice(self.pool)['title']}"
        path.write_text("\n".join(lines))
        return self._rel(path)

    def _rename(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        dst = self._some_dir() / self._name(path.suffix)
        path.rename(dst)
        return f"{self._rel(path)} -> {self._rel(dst)}"

    def _atomic_save(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        tmp = path.with_name(f".{path.name}.{self.rng.randrange(10**6)}.tmp")
        tmp.write_text(self._edited(path))
        os.replace(tmp, path)
        return self._rel(path)

    def _burst(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        for _ in range(self.rng.randint(2, 5)):
            path.write_text(self._edited(path))
        return self._rel(path)

    def _delete(self, files: list[Path], subdirs: list[Path]) -> str:
        path = self.rng.choice(files)
        self.graveyard.append(path.read_text())
        path.unlink()
        return self._rel(path)

    def _resurrect(self, files: list[Path], subdirs: list[Path]) -> str:
        text = self.graveyard.pop(self.rng.randrange(len(self.graveyard)))
        suffix = ".txt" if not text.startswith("# ") else ".md"
        path = self._some_dir() / self._name(suffix)
        path.write_text(text)
        return self._rel(path)

    def _move_dir(self, files: list[Path], subdirs: list[Path]) -> str:
        src = self.rng.choice(subdirs)
        parents = [d for d in (self.root, *self.dirs()) if d != src and src not in d.parents]
        self.counter += 1
        dst = self.rng.choice(parents) / f"m{self.counter:05d}"
        src.rename(dst)
        return f"{self._rel(src)}/ -> {self._rel(dst)}/"

    def _delete_dir(self, files: list[Path], subdirs: list[Path]) -> str:
        src = self.rng.choice(subdirs)
        shutil.rmtree(src)
        return f"{self._rel(src)}/"

    def _move_out(self, files: list[Path], subdirs: list[Path]) -> str:
        src = self.rng.choice(subdirs)
        self.counter += 1
        src.rename(self.outside / f"o{self.counter:05d}")
        return f"{self._rel(src)}/"

    def _move_in(self, files: list[Path], subdirs: list[Path]) -> str:
        src = self.rng.choice(sorted(self.outside.iterdir()))
        dst = self.root / src.name
        src.rename(dst)
        return f"{self._rel(dst)}/"

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def pause(self) -> float:
        """Seconds to wait before the next operation: mostly none, sometimes enough for the
        watcher to pick a batch up mid-stream (so operations race with indexing)."""
        r = self.rng.random()
        if r < 0.6:
            return 0.0
        return self.rng.uniform(0, 0.02) if r < 0.95 else self.rng.uniform(0.2, 0.6)


# ---- index == folder ------------------------------------------------------------------------


Row = tuple[object, ...]  # a live point's FIELDS
_CONTENT = len(CONTENT)  # a Row starts with the CONTENT fields


def _row(chunk: IndexedChunk) -> Row:
    return tuple(getattr(chunk, f) for f in FIELDS)


@dataclass(frozen=True)
class Mismatch:
    """One way an index differs from a fresh sync of its folder.

    kind: "points" (a doc missing or extra, or other live points, text or positions),
    "stores" (the vector and lexical stores disagree on which points are live or on their
    content), "doc_payload" (the right points, but some carry an old title or file
    (size, mtime)), "dead_letter" (the dead letters differ).
    """

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}"


@dataclass
class IndexView:
    """What an index holds: live points per doc, store counts, store disagreements."""

    docs: dict[str, list[Row]]
    vector_live: int
    lexical_live: int
    problems: list[Mismatch]  # found within this index (the two stores disagree)
    dead_letters: set[str]


def read_index(settings: Settings) -> IndexView:
    """Read every live point of both stores (opens the data dir: no writer may hold it)."""
    docs: dict[str, list[Row]] = {}
    problems: list[Mismatch] = []
    with open_runtime(settings) as rt:
        for did in sorted(rt.vectors.live_doc_fingerprints()):
            chunks = sorted(rt.vectors.live_chunks(did), key=lambda c: (c.ordinal, c.point_id))
            docs[did] = [_row(c) for c in chunks]
            lexical = {c.point_id: c for c in rt.lexical.get([c.point_id for c in chunks])}
            problems += [Mismatch("stores", f"{did}: {p}") for p in _store_gaps(chunks, lexical)]
            if any(lexical[c.point_id].title != c.title for c in chunks if c.point_id in lexical):
                problems.append(Mismatch("doc_payload", f"{did}: title differs by store"))
        vector_live, lexical_live = rt.vectors.count("live"), rt.lexical.count("live")
        if vector_live != sum(len(v) for v in docs.values()):
            problems.append(Mismatch("stores", f"{vector_live} live vectors, not all listed"))
        if lexical_live != vector_live:
            detail = f"{lexical_live} live points in lexical, {vector_live} in vectors"
            problems.append(Mismatch("stores", detail))
        dead = {d.doc_id for d in rt.dead_letters.all()}
    return IndexView(docs, vector_live, lexical_live, problems, dead)


def _store_gaps(chunks: list[IndexedChunk], lexical: dict[str, IndexedChunk]) -> list[str]:
    """How the lexical copies of one doc's live vector points fall short (the file
    fingerprint is not compared: the lexical index never reads it)."""
    out = []
    ordinals = [c.ordinal for c in chunks]
    if len(set(ordinals)) != len(ordinals):
        out.append(f"two live points share an ordinal {ordinals}")
    for c in chunks:
        lex = lexical.get(c.point_id)
        if lex is None or lex.status != "live":
            out.append(
                f"point {c.point_id} live in vectors, {lex.status if lex else 'absent'} in lexical"
            )
        elif _row(lex)[:_CONTENT] != _row(c)[:_CONTENT]:
            out.append(f"point {c.point_id} has other content in lexical")
    return out


def index_mismatches(actual: IndexView, reference: IndexView) -> list[Mismatch]:
    """Every way the index under test differs from the fresh reference (empty = equal)."""
    out = list(actual.problems)
    out += [Mismatch(m.kind, f"reference: {m.detail}") for m in reference.problems]
    for did in sorted(set(actual.docs) | set(reference.docs)):
        have, want = actual.docs.get(did), reference.docs.get(did)
        if have is None:
            out.append(Mismatch("points", f"{did}: missing ({len(want or [])} in a fresh sync)"))
        elif want is None:
            out.append(Mismatch("points", f"{did}: {len(have)} live points, file not in folder"))
        elif have != want:
            out.append(_doc_difference(did, have, want))
    for did in sorted(actual.dead_letters ^ reference.dead_letters):
        side = "index" if did in actual.dead_letters else "fresh sync"
        out.append(Mismatch("dead_letter", f"{did}: dead letter only in the {side}"))
    return out


def _doc_difference(did: str, have: list[Row], want: list[Row]) -> Mismatch:
    if len(have) != len(want):
        return Mismatch("points", f"{did}: {len(have)} live points, fresh sync has {len(want)}")
    for a, b in zip(have, want, strict=True):
        for name, x, y in zip(FIELDS, a, b, strict=True):
            if x != y and name in CONTENT:
                return Mismatch("points", f"{did}: {name} {str(x)[:50]!r} != {str(y)[:50]!r}")
    stale = sorted(
        {
            f
            for a, b in zip(have, want, strict=True)
            for f, x, y in zip(FIELDS, a, b, strict=True)
            if x != y
        }
    )
    ordinals = [a[FIELDS.index("ordinal")] for a, b in zip(have, want, strict=True) if a != b]
    return Mismatch("doc_payload", f"{did}: points at ordinals {ordinals} carry an old {stale}")


def reference_view(
    roots: Sequence[Path], data_dir: Path, embedder: str = DEFAULT_EMBEDDER
) -> IndexView:
    """A fresh `sync` of the folders into `data_dir`, read back (the expected index)."""
    from ragstream import api

    settings = Settings(data_dir=data_dir, embedder=embedder).with_paths(list(roots))
    api.sync(list(roots), settings=settings)
    return read_index(settings)


# ---- a watching subprocess ---------------------------------------------------------------


@dataclass
class Watcher:
    """`ragstream watch --json` as a real subprocess; outcome lines are collected as they come."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[dict[str, Any]]
    seen: int = 0

    @classmethod
    def start(
        cls, root: Path, data_dir: Path, debounce_ms: int = 150, embedder: str = DEFAULT_EMBEDDER
    ) -> Watcher:
        env = dict(os.environ, RAGSTREAM_SYNC__DEBOUNCE_MS=str(debounce_ms), HF_HUB_OFFLINE="1")
        env["RAGSTREAM_EMBEDDER"] = embedder
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragstream.cli", "watch", str(root), "--data-dir",
             str(data_dir), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        return cls(proc, json_lines(proc))

    def outcomes(self, timeout: float) -> Iterator[dict[str, object]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and self.lines.empty():
                raise AssertionError(f"watcher exited with {self.proc.returncode}")
            try:
                item = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen += 1
            yield item

    def quiesce(
        self, sentinel: Path, token: str, quiet_s: float = 1.5, timeout: float = 600
    ) -> float:
        """Write `sentinel` and wait for its outcome, then for `quiet_s` without any outcome.

        Every earlier change was touched before the sentinel, so its debounce expires no later
        and it is read in the same batch or an earlier one: the sentinel's outcome means the
        watcher has caught up. Returns the seconds this took.
        """
        started = time.monotonic()
        sentinel.write_text(f"# Sentinel\n\nQuiesce marker {token}, written after every change.\n")
        did = f"{sentinel.parent.name}:{sentinel.name}"
        for item in self.outcomes(timeout):
            if item.get("doc_id") == did:
                break
        else:
            raise AssertionError(f"no outcome for the sentinel within {timeout}s")
        while True:
            try:
                self.lines.get(timeout=quiet_s)
                self.seen += 1
            except queue.Empty:
                break
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class ChaosResult:
    ops: int
    mismatches: list[Mismatch]
    quiesce_s: float
    outcomes: int
    counts: dict[str, int]
    log: list[str]


def chaos_tree(work: Path, seed: int, n_docs: int = 30) -> Chaos:
    """A fresh seeded tree under `work/tree` (+ `work/outside`) and its operation generator."""
    rng = random.Random(seed)
    root, outside = work / "tree", work / "outside"
    outside.mkdir(parents=True)
    pool = abstracts()
    build_tree(root, n_docs, rng, pool)
    return Chaos(root, rng, pool, outside, max_files=3 * n_docs, min_files=2 * n_docs // 3)


def chaos_run(
    work: Path, seed: int, ops: int, n_docs: int = 30, embedder: str = DEFAULT_EMBEDDER
) -> ChaosResult:
    """One run: a fresh tree and data dir, `watch` started, `ops` operations, quiesce, check."""
    chaos = chaos_tree(work, seed, n_docs)
    root = chaos.root
    watcher = Watcher.start(root, work / "data", embedder=embedder)
    log: list[str] = []
    try:
        watcher.quiesce(root / "_sentinel.md", "ready")
        for _ in range(ops):
            time.sleep(chaos.pause())
            log.append(chaos.step())
        quiesce_s = watcher.quiesce(root / "_sentinel.md", f"done-{seed}")
    finally:
        watcher.stop()
    actual = read_index(Settings(data_dir=work / "data", embedder=embedder).with_paths([root]))
    expected = reference_view([root], work / "reference", embedder)
    return ChaosResult(
        ops, index_mismatches(actual, expected), quiesce_s, watcher.seen, chaos.counts, log
    )
