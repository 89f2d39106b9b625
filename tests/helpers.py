"""Small helpers shared by test modules (not fixtures, not collected)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path


def copy_docs(shared_docs: Path, rels: Iterable[str], root: Path, *, flat: bool = False) -> Path:
    """Copy shared documents into `root` (keeping their sub-folders unless `flat`), writable:
    tests edit and delete them, and the shared data must stay untouched."""
    for rel in rels:
        dst = root / (Path(rel).name if flat else rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shared_docs / rel, dst)
        dst.chmod(0o644)
    return root
