"""The floors, the face above them and the one import name, checked on the source itself
(docs/architecture.md describes the layers): what each part may import, that the light paths
load no heavy dependency, and that no import cycle exists among the modules under
`ragstream/` (the floors reached through their links), imports inside functions included."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
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
    """The modules a file imports by absolute name (`from a import b` names `a`), inside
    functions and `if TYPE_CHECKING:` blocks too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _python_files() -> list[Path]:
    """Every tracked `.py` file of the repository (tests and bench included)."""
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


# every method of the remote clients, each with arguments that reach its request (the
# server's reply is an error: what a call imports is decided before the reply is read)
REMOTE_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "status": ((), {}), "query": (("q",), {}), "stream": (("q",), {}),
    "retrieve": (("q",), {}), "verify": ((), {"sample": 2}), "files": ((), {"state": "indexed"}),
    "file": (("docs:a.md",), {}), "fields": ((), {}), "log": ((), {"limit": 3}),
    "reindex_status": ((), {}),
    "reindex_start": (("e",), {"wait": True}), "reindex_run": ((), {}),
    "reindex_promote": ((), {"eval_dataset": "d", "eval_margin": 0.1}),
    "reindex_rollback": ((), {}), "reindex_cleanup": ((), {"confirm": True}),
    "reindex_abort": ((), {}), "snapshot": ((), {}), "snapshots": ((), {}),
    "chat": (([{"role": "user", "content": "q"}],), {}),
    "chat_stream": (([{"role": "user", "content": "q"}],), {}),
}  # fmt: skip
REMOTE_PROBE = """
import asyncio, sys, httpx
from ragstream import AsyncClient, Client, RagstreamError
def reply(request):
    return httpx.Response(404, json={"error": "no", "code": "not_found"})
def drain(result):
    return list(result) if hasattr(result, "__next__") else result
async def adrain(result):
    if hasattr(result, "__anext__"):
        return [item async for item in result]
    return await result
def main():
    sync, aio = Client(url="http://x"), AsyncClient("http://x")
    sync._index._client = httpx.Client(transport=httpx.MockTransport(reply), base_url="http://x")
    aio._index._client = httpx.AsyncClient(
        transport=httpx.MockTransport(reply), base_url="http://x")
    called = []
    for name, (args, kwargs) in CALLS.items():
        for run in (lambda: drain(getattr(sync, name)(*args, **kwargs)),
                    lambda: asyncio.run(adrain(getattr(aio, name)(*args, **kwargs)))):
            try:
                run()
            except RagstreamError:
                called.append(name)
    print("CALLED", sorted(set(called)) if len(called) == 2 * len(CALLS) else called)
"""


def test_every_method_of_the_remote_client_loads_no_heavy_dependency() -> None:
    """Each call, blocking and awaited, imports httpx and the models only (the promote's
    options are checked by `core.models.PromoteOptions`, not the reindex machinery)."""
    from ragstream.client import AsyncClient, Client

    methods = {n for n in vars(Client) if not n.startswith("_")} - {"mode", "url", "close"}
    assert methods == set(REMOTE_CALLS) and methods <= set(vars(AsyncClient))
    probe = (
        f"CALLS = {REMOTE_CALLS!r}\n{REMOTE_PROBE}\nmain()\n"
        f"print('HEAVY', [m for m in {(*HEAVY, 'rank_bm25')!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    called, heavy = out.stdout.strip().splitlines()[-2:]
    assert called == f"CALLED {sorted(REMOTE_CALLS)}"
    assert heavy == "HEAVY []"


# ---- the face: what each part of `ragstream/` above the floors may import ------------------
# eval on the floors and service (eval and train open every index through the served index,
# `eval.opened`); service on the floors and eval (the promote gate scores a side by nDCG@10
# through `eval.evaluation`, which opens no index); http on core and service alone (every
# route is one call on the served index) and the MCP server it mounts; mcp on core and
# service (its tools are service calls); the public facades on core and service (`api`
# composes serving beside the flow through `service.ingest.watch_serving`, never the flows
# itself); the CLI on everything below it; the framework retrievers (integrations) on the
# client alone, and the models it returns.
BELOW = set(FLOORS)
FACE = {
    "eval": BELOW | {"eval", "service"},
    "service": BELOW | {"service", "eval"},
    "train": BELOW | {"train", "eval", "service"},
    "http": {"core", "http", "service", "mcp"},
    "mcp": {"core", "service", "mcp"},
    "api": {"core", "service", "http"},
    "client": BELOW | {"service"},
    "cli": BELOW | {"cli", "service", "http", "eval", "train", "api", "client", "mcp"},
    "integrations": {"core", "client", "integrations"},
}
RAGSTREAM = REPO / "ragstream"


def _runtime_imports(path: Path) -> list[str]:
    """Every absolute import of a module, inside functions too, but not the ones only a type
    checker runs (`if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module_name(path: Path) -> str:
    """The dotted name of a file under the repository (`ragstream/query/fuse.py` is
    `ragstream.query.fuse`, a package's `__init__.py` the package)."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every module under the one name, the floors through their links: module name -> path
    under `ragstream/` (`Path.rglob` does not follow a link to a folder, `os.walk` does)."""
    found = {}
    for here, dirs, files in os.walk(RAGSTREAM, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for file in sorted(f for f in files if f.endswith(".py")):
            path = Path(here) / file
            found[_module_name(path)] = path
    return found


def test_the_module_walk_finds_every_module_of_every_floor() -> None:
    """Each tracked `.py` file of the face and of every floor is one module the checks see."""
    tracked = subprocess.run(
        ["git", "ls-files", "ragstream/*.py", *(f"{floor}/*.py" for floor in FLOORS)],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    expected = {
        _module_name(RAGSTREAM / p if p.split("/")[0] in FLOORS else REPO / p)
        for p in tracked
        if (REPO / p).is_file()
    }
    modules = _modules()
    print(f"the layout checks see {len(modules)} modules")
    assert expected - set(modules) == set()
    assert {_part(m) for m in modules} >= set(FLOORS)
    assert len(modules) >= 120


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module an import names: `a.b.c` is module `a.b.c` or the name `c` of `a.b` (the
    longest known prefix); None when no prefix is a known module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _part(module: str) -> str:
    """The part of the face or the floor a module belongs to (`ragstream.query.fuse`: query)."""
    return module.split(".")[1] if "." in module else ""


@pytest.mark.parametrize("part", sorted(FACE))
def test_the_face_imports_only_what_its_layer_allows(part: str) -> None:
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if _part(name) != part:
            continue
        for imported in _runtime_imports(path):
            target = _resolve(imported, modules) if imported.startswith("ragstream.") else None
            if target is not None and target != "ragstream" and _part(target) not in FACE[part]:
                bad.append(f"{name} -> {target}")
    assert bad == []


def test_no_import_cycle_among_ragstream_modules() -> None:
    """Counting imports inside functions: a cycle hidden in a function is still one (only
    `if TYPE_CHECKING:` imports, which never run, and the package's lazy `__init__` are out)."""
    modules = _modules()
    graph = {
        name: {
            target
            for imported in _runtime_imports(path)
            if imported.startswith("ragstream.")
            and (target := _resolve(imported, modules)) not in (None, name, "ragstream")
        }
        for name, path in modules.items()
    }
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [sorted(c) for c in _strongly_connected(graph) if len(c) > 1] == [["a", "b", "c"]]


def test_ragstream_top_level_holds_only_the_public_facades() -> None:
    top = sorted(p.name for p in RAGSTREAM.glob("*.py"))
    assert top == ["__init__.py", "api.py", "client.py"]
