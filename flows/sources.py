"""The folders a sync pass reads: PATH arguments (or the configured sources), checked to be
folders and recorded in the data dir, so `verify` and `files` audit them by default."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ragstream.connectors.state import SourcesBook
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings


def with_folders(settings: Settings, paths: Sequence[str | Path]) -> Settings:
    """The settings whose sources are `paths` (else the configured ones), each a folder."""
    chosen = settings.with_paths([Path(p) for p in paths])
    if not chosen.sources:
        raise InvalidRequestError("no folders to sync: pass PATH arguments or configure `sources`")
    for src in chosen.sources:
        if not src.root.is_dir():
            raise InvalidRequestError(f"not a directory: {src.root} (pass a folder to sync)")
    SourcesBook(chosen.state_dir).record(chosen.sources)  # what `verify` audits by default
    return chosen
