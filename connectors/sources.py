"""Sources by kind: the one place that picks a `Source` implementation.

`OPENERS` maps each kind of `core.source_config.SOURCE_KINDS` to what opens it (a folder,
connectors/fs.py; a git repository at a ref, connectors/git.py; an S3 prefix,
connectors/s3.py). `configured` opens every configured source once per process and hands
them out by name: the flow's input lists them, the parse step reads through them, the writer
stamps permissions through them, and an answer's freshness asks them, so a source with an
endpoint or credentials from the settings is never rebuilt from a locator string. Only a
document whose source is not configured here (a query process without the sources' settings)
is read through `source_at`, which rebuilds one from its locator with boto3's own
environment for an S3 object; an answer's freshness is then unknown, never guessed. Nothing
here imports bytewax (connectors/source_input.py is the flow's input).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ragstream.connectors.fs import FolderSource, PathFilter
from ragstream.connectors.git import GitSource, parse_locator
from ragstream.connectors.protocols import Source
from ragstream.connectors.s3 import S3Source, spec_of
from ragstream.connectors.state import SourcesBook
from ragstream.core.models import FileFingerprint
from ragstream.core.settings import Settings
from ragstream.core.source_config import (
    GIT_SCHEME,
    S3_SCHEME,
    FolderConfig,
    GitConfig,
    SourceConfig,
)

Opener = Callable[[Any, PathFilter, float], Source]
OPENERS: dict[str, Opener] = {
    "folder": lambda config, path_filter, poll_s: FolderSource(config, path_filter),
    "git": lambda config, path_filter, poll_s: GitSource(config, poll_s),
    "s3": lambda config, path_filter, poll_s: S3Source(config, path_filter=path_filter),
}
_OPENED: dict[str, Source] = {}  # config (JSON) + filter -> the source opened in this process
_OPENED_LOCK = threading.Lock()
_RECORDED: dict[Path, tuple[tuple[int, int], list[SourceConfig]]] = {}  # by sources.json


def open_source(config: SourceConfig, path_filter: PathFilter, git_poll_s: float = 5.0) -> Source:
    """A new source for the config, opened by its kind's opener."""
    return OPENERS[config.kind](config, path_filter, git_poll_s)


def configured(settings: Settings, recorded: bool = False) -> dict[str, Source]:
    """Every configured source by name, each opened once per process (nothing is read yet):
    the same objects for the flow, the writer and the answers. `recorded`: without
    configured sources, the ones the data dir was last synced from (what a query process
    started without the sources' settings answers from)."""
    pf = path_filter_of(settings)
    out = {}
    configs = settings.sources
    if recorded and not configs:
        configs = recorded_sources(settings.state_dir)
    for config in configs:
        key = f"{config.model_dump_json()}|{pf}|{settings.sync.git_poll_s}"
        with _OPENED_LOCK:
            if key not in _OPENED:
                _OPENED[key] = open_source(config, pf, settings.sync.git_poll_s)
            out[config.name] = _OPENED[key]
    return out


def recorded_sources(state_dir: Path) -> list[SourceConfig]:
    """The sources the data dir was last synced from, read again only when its record
    changed (an answer asks on every call)."""
    book = SourcesBook(state_dir)
    try:
        st = book.path.stat()
    except FileNotFoundError:
        return []
    stamp = (st.st_mtime_ns, st.st_size)
    held = _RECORDED.get(book.path)
    if held is None or held[0] != stamp:
        held = _RECORDED[book.path] = (stamp, book.load())
    return held[1]


def sources_of(settings: Settings) -> list[Source]:
    """Every configured source, opened (nothing is read yet)."""
    return list(configured(settings).values())


def path_filter_of(settings: Settings) -> PathFilter:
    return PathFilter(tuple(settings.include), tuple(settings.exclude))


def source_for(sources: Mapping[str, Source], name: str, locator: str, root: str = "") -> Source:
    """The source named `name` when it is configured here at `root`, else the one the
    locator names (`source_at`)."""
    found = sources.get(name)
    if found is not None and (not root or found.root == root):
        return found
    return source_at(locator, root)


def source_at(locator: str, root: str = "") -> Source:
    """A source rebuilt from a document's locator alone: a git locator names its repository
    and ref; an S3 locator its bucket (boto3's environment names the endpoint); any other is
    a path, whose folder is `root`, else its parent."""
    if locator.startswith(GIT_SCHEME):
        repo, ref, _ = parse_locator(locator)
        return GitSource(GitConfig(name="", root=repo, git=repo, ref=ref))
    if locator.startswith(S3_SCHEME):
        return S3Source(spec_of(locator))
    folder = root or locator.rsplit("/", 1)[0] or "/"
    return FolderSource(FolderConfig(name="", root=folder), PathFilter((), ()))


def changed_since(
    locator: str, version: FileFingerprint | None, sources: Mapping[str, Source], name: str
) -> bool | None:
    """True if the document differs from `version` or is gone; None when this process cannot
    see its source (none configured or recorded as `name` here, a query pod that mounts no
    folder, a store it cannot reach) or knows no version. Asked of that source only: an
    answer never guesses a source from a locator string."""
    source = sources.get(name)
    if source is None or version is None or version.size < 0:
        return None
    try:
        now = source.version(locator)
    except (OSError, ValueError):
        return None
    return now is None or now.token != version.token
