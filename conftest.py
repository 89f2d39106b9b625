"""The suite's tiers, decided by where a test lives, and the doctests, found in the tree.

- `tests/e2e/` and `tests/fault/` are slow by path (whole folders synced, processes killed,
  browsers driven); `make test-fast` leaves them out with the rest of what is marked slow.
- Every module under `ragstream/` whose source holds a `>>>` example runs as a doctest,
  imported by its `ragstream.` name (the floors through their links), so no list is kept
  by hand and no module without examples is imported for nothing.
- Under pytest-xdist, the files holding slow tests are handed out first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
SLOW_FOLDERS = ("tests/e2e", "tests/fault")
PACKAGE = ROOT / "ragstream"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.path)).resolve()
        if any(where.is_relative_to(ROOT / folder) for folder in SLOW_FOLDERS):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        slow_files_first(items)


def slow_files_first(items: list[pytest.Item]) -> None:
    """The files that hold a slow test first, each file's tests in their own order. Under
    pytest-xdist (`make test`: one file per worker at a time, `--no-loadscope-reorder`), the
    quick files then fill both workers' last minutes, instead of one long file running
    alone at the end while the other worker waits."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # a stable sort


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or not _under_package(file_path):
        return None
    if ">>>" not in file_path.read_text(encoding="utf-8"):
        return None
    return DoctestModule.from_parent(parent, path=file_path)


def _under_package(path: Path) -> bool:
    """Under `ragstream/` as pytest reached it (the floors' links are not resolved)."""
    return path.is_relative_to(PACKAGE) and "console" not in path.parts
