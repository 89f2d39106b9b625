"""Options shared by the CLI's command modules (`cli`, `audit_cli`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="index data directory")]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Paths = Annotated[list[Path], typer.Argument(help="folders to keep in sync")]
AllowMass = Annotated[
    bool, typer.Option("--allow-mass-delete", help="proceed even if most docs vanished")
]
Workers = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        envvar="RAGSTREAM_WORKERS",
        help="bytewax worker threads (parsing is shared; one writes)",
    ),
]
