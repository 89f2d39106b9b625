"""ragstream: keep a retrieval index in sync with folders; answer with verified citations.

Index: sync, watch, status, verify, files, file, fields, gc, optimize, rebuild-lexical, reindex.
Keep and move: snapshot, migrate, export, import.
Ask: query, ask, serve, log, mcp.
Measure: eval, tune. Settings: config. Every command takes --data-dir; most take --json.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Annotated

import typer

from ragstream.cli import ask, audit, index, mcp, measure, reindex, snapshot, tune
from ragstream.core.errors import EXIT_CODES, RagstreamError

EPILOG = (
    "Exit codes: "
    + ", ".join(f"{code} {meaning}" for code, meaning in sorted(EXIT_CODES.items()))
    + ". --debug (or RAGSTREAM_DEBUG=1) shows the traceback. Settings come from RAGSTREAM_* "
    "variables over ragstream.toml: `ragstream config` prints each effective value and where "
    "it came from, `ragstream config --env` lists every variable."
)
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, epilog=EPILOG)
COMMANDS: dict[str, Callable[..., None]] = {
    "sync": index.sync,
    "watch": index.watch,
    "status": index.status,
    "verify": audit.verify,
    "files": audit.files,
    "file": audit.file,
    "fields": audit.fields,
    "gc": index.gc,
    "optimize": index.optimize,
    "rebuild-lexical": index.rebuild_lexical,
    "migrate": snapshot.migrate,
    "export": snapshot.export,
    "import": snapshot.import_,
    "query": ask.query,
    "ask": ask.ask,
    "serve": ask.serve,
    "log": ask.log,
    "mcp": mcp.mcp,
    "eval": measure.eval_,
    "tune": tune.tune,
    "config": measure.config,
}
for name, command in COMMANDS.items():
    app.command(name=name)(command)
app.add_typer(reindex.app, name="reindex", help="blue/green reindex on an embedder upgrade")
app.add_typer(snapshot.app, name="snapshot", help="one file that holds the data dir, checked")


@app.callback()
def _options(
    debug: Annotated[
        bool, typer.Option("--debug", help="on an error, show the traceback (any position)")
    ] = False,
) -> None:
    """(`main` acts on --debug before the command line is parsed.)"""


def main(argv: list[str] | None = None) -> None:
    """The console script: user errors are one line on stderr and a documented exit code;
    `--debug` (anywhere) or RAGSTREAM_DEBUG=1 shows the traceback instead."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("RAGSTREAM_DEBUG", "") in ("1", "true")
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="ragstream")
    except RagstreamError as exc:
        if debug:
            traceback.print_exc()
        print(f"ragstream: error: {one_line(exc)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"ragstream: internal error: {type(exc).__name__}: {one_line(exc)} "
            "(run again with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
