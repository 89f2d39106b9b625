"""The floors (DESIGN §0) and the one import name, checked on the source itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLOORS = ("core", "connectors", "operators", "flows", "query")
# what each floor may import of ours (besides itself)
ALLOWED = {
    "core": set(),
    "connectors": {"core"},
    "operators": {"core"},
    "flows": {"core", "connectors", "operators"},
    "query": {"core", "connectors", "operators"},
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _python_files() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / p for p in tracked if (REPO / p).is_file()]


def test_nothing_imports_a_floor_by_its_bare_name() -> None:
    """`import core` would work from a checkout but not from the wheel (and would load a
    second copy of every model class): everything says `ragstream.<floor>`."""
    bad = [
        f"{path.relative_to(REPO)}: {name}"
        for path in _python_files()
        for name in _imports(path)
        if name.split(".")[0] in FLOORS
    ]
    assert bad == []


@pytest.mark.parametrize("floor", FLOORS)
def test_a_floor_imports_only_from_below(floor: str) -> None:
    files = sorted((REPO / floor).glob("*.py"))
    assert files, floor
    bad = []
    for path in files:
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "ragstream":
                continue
            target = parts[1] if len(parts) > 1 else ""
            if target != floor and target not in ALLOWED[floor]:
                bad.append(f"{path.name}: {name}")
    assert bad == []


def test_every_floor_is_reachable_under_the_one_name() -> None:
    for floor in FLOORS:
        link = REPO / "ragstream" / floor
        assert link.is_symlink() and link.resolve() == (REPO / floor).resolve()


HEAVY = ("torch", "docling", "bytewax", "tantivy", "qdrant_edge", "qdrant_client",
         "sentence_transformers", "transformers", "onnxruntime", "numpy")  # fmt: skip


@pytest.mark.parametrize(
    "code",
    [
        "import ragstream; ragstream.__all__",
        # the remote clients: httpx and the pydantic models only
        "from ragstream import Client, AsyncClient; Client(url='http://127.0.0.1:9').close()",
        # what `ragstream --help` runs
        "from ragstream.cli import main; main(['--help'])",
    ],
)
def test_the_light_paths_load_no_heavy_dependency(code: str) -> None:
    probe = (
        f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []"
