"""The sources a sync pass reads: PATH arguments (folders, `git+file:///repo@ref`
repositories, `s3://bucket/prefix`), else the configured sources, each checked to be there,
and recorded in the data dir, so `verify` and `files` audit them by default."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ragstream.connectors.sources import sources_of
from ragstream.connectors.state import SourcesBook
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings


def with_folders(settings: Settings, paths: Sequence[str | Path]) -> Settings:
    """The settings whose sources are `paths` (else the configured ones), each one there: a
    folder, a git repository whose ref names a commit, a bucket that answers (else
    `InvalidRequestError`)."""
    chosen = settings.with_paths(paths)
    if not chosen.sources:
        raise InvalidRequestError(
            "no folders to sync: pass PATH arguments (or git+file:///repo@ref, s3://bucket/prefix) "
            "or configure `sources`"
        )
    for src in chosen.sources:
        if src.kind == "folder" and not src.root.is_dir():
            raise InvalidRequestError(f"not a directory: {src.root} (pass a folder to sync)")
    for source in sources_of(chosen):
        source.check()
    SourcesBook(chosen.state_dir).record(chosen.sources)  # what `verify` audits by default
    return chosen
