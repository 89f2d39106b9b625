"""`--json` output of the benches: exactly one JSON document on stdout, everything else on stderr.

A bench run with `--json` does its work inside `stdout_to_stderr()`: for that time stdout,
both the Python stream and file descriptor 1 (what native code and inheriting subprocesses
write to), points at stderr, so no progress line, log or notice of the bench or of a library
it calls can land on stdout before the document. Then `print_json()` prints the document, on
one line, to the real stdout. Not a bench itself (the `_` prefix); tests/cli/test_json_output.py
runs every bench's `--json` and parses its stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True) -> Iterator[None]:
    """While inside, whatever is written to stdout goes to stderr (a no-op when disabled)."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()  # what was buffered meanwhile still goes to stderr
        os.dup2(saved, 1)
        os.close(saved)


def print_json(document: object) -> None:
    """The one JSON document of a `--json` run, on one line of stdout."""
    print(json.dumps(document), flush=True)
