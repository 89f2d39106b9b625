"""Prose and size rules, checked on the source itself.

- Every package under `ragstream/` (the floors through their symlinks included) has a
  docstring that names each of its modules.
- Every module has a docstring, and no source file points at documents outside the
  repository ("DESIGN §N") or at issue numbers: docs/architecture.md holds the design.
- No function in `ragstream/` (floors included) is longer than `MAX_FUNCTION_LINES`.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ragstream"
# the repository's Python source: the floors are real folders here (and symlinks under
# `ragstream/`, not followed for these, so each file is read once)
SOURCE_ROOTS = ("core", "connectors", "operators", "flows", "query", "ragstream", "bench")
SKIPPED_DIRS = {"__pycache__", "build", "node_modules"}
OUTSIDE_REFERENCE = re.compile(r"DESIGN §|\bissue \d+")
MAX_FUNCTION_LINES = 60


def _walk(root: Path, *, follow_links: bool) -> Iterator[tuple[Path, list[str], list[str]]]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow_links):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("."))
        yield Path(dirpath), dirnames, sorted(filenames)


def _packages() -> list[Path]:
    """Every package directory below `ragstream/`, through the floors' symlinks."""
    return [
        here
        for here, _, files in _walk(PACKAGE, follow_links=True)
        if here != PACKAGE and "__init__.py" in files
    ]


def _source_files() -> list[Path]:
    return [
        here / name
        for root in SOURCE_ROOTS
        if (REPO / root).is_dir()
        for here, _, files in _walk(REPO / root, follow_links=False)
        for name in files
        if name.endswith(".py")
    ]


def _package_files() -> list[Path]:
    """Every module of `ragstream`, the floors included."""
    return [
        here / name
        for here, _, files in _walk(PACKAGE, follow_links=True)
        for name in files
        if name.endswith(".py")
    ]


def _modules_of(package: Path) -> list[str]:
    """The names of a package's modules: its `.py` files and its subpackages."""
    files = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(files + subpackages)


def _rel(path: Path) -> str:
    return os.path.relpath(path, REPO)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.parametrize("package", _packages(), ids=_rel)
def test_a_package_docstring_names_each_of_its_modules(package: Path) -> None:
    doc = ast.get_docstring(_tree(package / "__init__.py")) or ""
    assert doc, f"{_rel(package)}/__init__.py has no docstring"
    missing = [m for m in _modules_of(package) if not re.search(rf"\b{re.escape(m)}\b", doc)]
    assert missing == [], f"{_rel(package)}/__init__.py does not name {missing}"


def test_the_walk_finds_every_floor_and_the_other_packages() -> None:
    found = {_rel(p) for p in _packages()}
    expected = {f"ragstream/{name}" for name in ("core", "connectors", "operators")}
    expected |= {f"ragstream/{name}" for name in ("flows", "query", "eval", "train")}
    assert expected <= found


def test_no_source_file_points_at_outside_documents_or_issue_numbers() -> None:
    found = [
        f"{_rel(path)}:{number}: {line.strip()}"
        for path in _source_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert not found, "\n".join(found)


def test_every_module_has_a_docstring() -> None:
    missing = [_rel(p) for p in _source_files() if not ast.get_docstring(_tree(p))]
    assert not missing, "\n".join(missing)


def test_no_function_is_longer_than_the_limit() -> None:
    long = [
        f"{_rel(path)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in _package_files()
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "\n".join(long)


def test_the_exit_code_table_lists_every_exit_code() -> None:
    """`core/errors.py`'s docstring table, `EXIT_CODES` and the error classes agree."""
    from ragstream.core import errors

    doc = errors.__doc__ or ""
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", doc, re.MULTILINE)}
    raised = {cls.exit_code for cls in errors._all(errors.RagstreamError)}
    assert documented == set(errors.EXIT_CODES)
    assert raised <= set(errors.EXIT_CODES)
    assert {errors.EXIT_GUARD, errors.EXIT_DRIFT, 0} <= set(errors.EXIT_CODES)


def test_the_cli_docstring_names_exactly_the_registered_commands() -> None:
    import importlib

    cli = importlib.import_module("ragstream.cli.app")  # the module, not the `app` it exports
    registered = {c.name for c in cli.app.registered_commands}
    registered |= {g.name for g in cli.app.registered_groups}
    doc = cli.__doc__ or ""
    listed = {
        name.strip().rstrip(".")
        for line in doc.splitlines()[1:]  # the first line says what it is
        if ":" in line
        for part in line.split(". ")
        if ":" in part
        for name in part.split(":", 1)[1].split(",")
        if name.strip() and not name.strip().startswith("every")
    }
    assert listed == registered


def test_make_help_lists_every_target_once() -> None:
    """`make help` has one line per phony target, each saying what it does."""
    import subprocess

    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: (.+)$", makefile, re.MULTILINE)
    assert phony is not None
    shown = subprocess.run(
        ["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    described = {line.split()[0]: line.split(None, 1)[1] for line in shown if line.strip()}
    assert sorted(described) == sorted(phony.group(1).split())
    assert len(shown) == len(described)
