"""Sources by kind: the one place that picks a `Source` implementation.

`open_source` opens the source a `SourceConfig` names (a folder, connectors/fs.py; a git
repository at a ref, connectors/git.py); `source_at` finds the one a document's locator
belongs to, so the parse step in any process and an answer's freshness ask the source, never
the disk. Nothing here imports bytewax (connectors/source_input.py is the flow's input).
"""

from __future__ import annotations

from ragstream.connectors.fs import FolderSource, PathFilter
from ragstream.connectors.git import GitSource, parse_locator
from ragstream.connectors.protocols import Source
from ragstream.core.models import FileFingerprint
from ragstream.core.settings import GIT_SCHEME, Settings, SourceConfig


def open_source(config: SourceConfig, path_filter: PathFilter, git_poll_s: float = 5.0) -> Source:
    """The source a config names: a git repository at a ref, else a folder."""
    if config.kind == "git":
        return GitSource(config, git_poll_s)
    return FolderSource(config, path_filter)


def sources_of(settings: Settings) -> list[Source]:
    """Every configured source, opened (nothing is read yet)."""
    pf = path_filter_of(settings)
    return [open_source(c, pf, settings.sync.git_poll_s) for c in settings.sources]


def path_filter_of(settings: Settings) -> PathFilter:
    return PathFilter(tuple(settings.include), tuple(settings.exclude))


def source_at(locator: str, root: str = "") -> Source:
    """The source a document's locator belongs to (a git locator names its repository and
    ref; any other is a path, whose folder is `root`, else its parent)."""
    if locator.startswith(GIT_SCHEME):
        repo, ref, _ = parse_locator(locator)
        return GitSource(SourceConfig(name="", root=repo, git=repo, ref=ref))
    folder = root or locator.rsplit("/", 1)[0] or "/"
    return FolderSource(SourceConfig(name="", root=folder), PathFilter((), ()))


def changed_since(locator: str, version: FileFingerprint | None) -> bool | None:
    """True if the document differs from `version` or is gone; None when this process cannot
    see its source (a query pod that mounts no folder) or knows no version."""
    if version is None or version.size < 0:
        return None
    try:
        now = source_at(locator).version(locator)
    except (OSError, ValueError):
        return None
    return now is None or (now.size, now.mtime_ns) != (version.size, version.mtime_ns)
