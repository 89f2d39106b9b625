"""The real `ragstream` CLI with every encoder call audited and an optional self-SIGKILL.

Not a test module (no `test_` prefix): tests/fault/test_crash_recovery.py and bench/crash.py
start it as a subprocess in place of `ragstream`, with the CLI's own arguments:

    python tests/harness/crash_worker.py sync ROOT --data-dir D --json

Why a wrapper and not a product hook: counting encodes must not need product code that
exists only for tests. The wrapper replaces `Embedder.encode_passages` with a version that
appends the encoded texts to an audit file, flushed and fsynced *before* the vectors are
returned, so a kill right after the encode still leaves its record. It also wraps the write
methods of the store classes so that a kill can land at an exact step of the write order:
after the encode (vectors never stored), after the lexical commit (lexical ahead of
vectors), after the vector upsert (fingerprints and tombstones not yet written), after the
lexical tombstone (vectors not yet tombstoned).

Environment:
  CRASH_AUDIT  audit file: one JSON line per encode call, {"run": RUN, "texts": [...]}
  CRASH_RUN    run label written into each audit line
  CRASH_KILL   "" or "<hook>:<n>": SIGKILL this process right after the n-th <hook>
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HOOKS = (
    "encode",
    "lexical.commit",
    "vectors.upsert",
    "vectors.set_fingerprint",
    "lexical.tombstone",
    "vectors.tombstone",
)


class Hooks:
    """Counts each hook; SIGKILLs the process when the configured one reaches its count."""

    def __init__(self, kill: str) -> None:
        name, _, nth = kill.partition(":")
        if name and name not in HOOKS:
            raise SystemExit(f"unknown hook {name!r}; one of {HOOKS}")
        self.kill = (name, int(nth or 1)) if name else None
        self.counts: Counter[str] = Counter()

    def fire(self, name: str) -> None:
        self.counts[name] += 1
        if self.kill == (name, self.counts[name]):
            os.kill(os.getpid(), signal.SIGKILL)


def watch_stores(hooks: Hooks) -> None:
    """Fire `<store>.<method>` after each protocol write method of every store class returns.

    Patched on the classes that define the methods (found by name, so a new backend is
    covered too); a reentrancy guard fires once when one wrapped method calls another.
    """
    from ragstream.connectors import lexical, qdrant_edge, qdrant_server, vector_stores

    depth = threading.local()

    def wrap(method: Callable[..., Any], hook: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            depth.n = getattr(depth, "n", 0) + 1
            try:
                result = method(*args, **kwargs)
            finally:
                depth.n -= 1
            if depth.n == 0:
                hooks.fire(hook)
            return result

        return call

    targets = [
        (
            "vectors",
            (vector_stores, qdrant_edge, qdrant_server),
            ("upsert", "set_fingerprint", "tombstone"),
        ),
        ("lexical", (lexical,), ("commit", "tombstone")),
    ]
    for prefix, modules, names in targets:
        for module in modules:
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != module.__name__:
                    continue
                for name in names:
                    if name in cls.__dict__:
                        setattr(cls, name, wrap(cls.__dict__[name], f"{prefix}.{name}"))


def install(audit: Path, run: str, hooks: Hooks) -> None:
    from ragstream.operators.embed import Embedder

    encode: Callable[..., Any] = Embedder.encode_passages

    def audited_encode(self: Embedder, texts: Sequence[str], batch_size: int = 64) -> Any:
        matrix = encode(self, texts, batch_size)
        if texts:
            with audit.open("a") as fh:
                fh.write(json.dumps({"run": run, "texts": list(texts)}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            hooks.fire("encode")
        return matrix

    Embedder.encode_passages = audited_encode  # type: ignore[method-assign]
    watch_stores(hooks)


def main() -> None:
    install(
        Path(os.environ["CRASH_AUDIT"]),
        os.environ.get("CRASH_RUN", ""),
        Hooks(os.environ.get("CRASH_KILL", "")),
    )
    from ragstream.cli import main as cli_main

    sys.argv = ["ragstream", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
