"""The wheel: one top-level name, every floor inside it as real files, and it works installed.

The floors are top-level folders in the repository, symlinked into `ragstream/`; the wheel
must carry real copies under `ragstream/` and nothing else at the top, or an installed
`ragstream` would shadow (or be shadowed by) a user's own `core`, `query` or `flows`.
The wheel is built offline (`--no-build-isolation`) from a copy of the working tree and
installed with `--no-deps` into a fresh venv that sees this venv's dependencies through a
`.pth` line (which, unlike site-packages itself, does not run this venv's editable finder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FLOORS = ("core", "connectors", "operators", "flows", "query")
HEAVY = ("torch", "docling", "bytewax", "tantivy")
# A few modules of each floor named outright (besides the walk over the source tree below).
NAMED = (
    "ragstream/__init__.py",
    "ragstream/cli/app.py",
    "ragstream/py.typed",
    "ragstream/core/models.py",
    "ragstream/connectors/fs.py",
    "ragstream/operators/chunk.py",
    "ragstream/flows/sync.py",
    "ragstream/query/engine.py",
    "ragstream/query/fuse.py",
    "ragstream/eval/evaluation.py",
    "ragstream/train/crossencoder.py",
    # the shipped answerability judge: package data, not only modules
    "ragstream/operators/judge_model/model.onnx",
    "ragstream/operators/judge_model/tokenizer.json",
    "ragstream/operators/judge_model/judge.json",
    "ragstream/operators/answer_judge_model/model.onnx",
    "ragstream/operators/answer_judge_model/tokenizer.json",
    "ragstream/operators/answer_judge_model/answer_judge.json",
    "ragstream/operators/answer_judge_model/decision.json",  # the decision fitted with it
    # the web console's files
    "ragstream/console/index.html",
    "ragstream/console/console.js",
    "ragstream/console/console.css",
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _run(cmd: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _copy_tree(dst: Path) -> None:
    """The working tree as git sees it (tracked + untracked, minus ignored), symlinks kept."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=60,
        ).stdout.decode().split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):  # no git: copy, leaving the usual out
        skip = shutil.ignore_patterns(
            ".git", ".*venv*", "build", "*.egg-info", "__pycache__", ".*_cache", ".ragstream"
        )
        shutil.copytree(REPO, dst, symlinks=True, ignore=skip)
        return
    for rel in filter(None, listed):
        src, out = REPO / rel, dst / rel
        if not src.is_symlink() and not src.exists():  # deleted, not yet committed
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, out)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the source copy it was built from)."""
    root = tmp_path_factory.mktemp("wheel")
    src, out = root / "src", root / "dist"
    _copy_tree(src)
    assert (src / "ragstream" / "core").is_symlink(), "the floor symlinks must survive the copy"
    _run([
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "-w", str(out), str(src),
    ])  # fmt: skip
    wheels = sorted(out.glob("ragstream-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], src


@pytest.fixture(scope="module")
def fresh(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel installed (no deps); this venv's site-packages on a .pth."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    _run([base, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([
        sys.executable, "-m", "pip", "--python", str(python),
        "install", "--no-deps", "--no-index", str(built[0]),
    ])  # fmt: skip
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    site = Path(purelib.stdout.strip())
    ours = sysconfig.get_paths()
    lines = dict.fromkeys([ours["purelib"], ours["platlib"]])  # ordered, deduplicated
    (site / "_ragstream_test_deps.pth").write_text("".join(f"{p}\n" for p in lines))
    return venv


def test_wheel_has_one_top_level_and_every_floor(built: tuple[Path, Path]) -> None:
    wheel, src = built
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        infos = {i.filename: i for i in zf.infolist()}
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert zf.read(top_level).decode().split() == ["ragstream"]
    dist_info = top_level.split("/")[0]
    assert {n.split("/")[0] for n in names} == {"ragstream", dist_info}
    assert not any(n.split("/")[0] in (*FLOORS, "tests", "bench", "eval") for n in names)
    assert set(NAMED) <= names, sorted(set(NAMED) - names)
    # Every module of the source tree (floors reached through their symlinks) is in the wheel,
    # as a regular file: a symlink inside a zip would be a broken or empty entry when installed.
    expected = {
        (Path(d) / f).relative_to(src).as_posix()
        for d, _, files in os.walk(src / "ragstream", followlinks=True)
        if "__pycache__" not in d
        for f in files
        if f.endswith(".py") or f == "py.typed"
    }
    assert {f"ragstream/{floor}/__init__.py" for floor in FLOORS} <= expected
    assert expected <= names, sorted(expected - names)
    for name in expected:
        mode = infos[name].external_attr >> 16
        assert mode == 0 or (mode & 0o170000) == 0o100000, f"{name} is not a regular file"


USER_PACKAGES = {
    "core/__init__.py": 'MARK = "user core"\n',
    "core/models.py": "X = 1\n",
    "query/__init__.py": 'MARK = "user query"\n',
    "flows/__init__.py": 'MARK = "user flows"\n',
}

CHECK_IMPORTS = """
import json, sys
import ragstream
heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
import ragstream.core.models, ragstream.query.fuse
import core, core.models, query, flows
print(json.dumps({
    "ragstream": ragstream.__file__, "models": ragstream.core.models.__file__,
    "has_chunk": hasattr(ragstream.core.models, "Chunk"),
    "fuse": ragstream.query.fuse.__file__, "heavy": heavy,
    "user": [core.__file__, core.models.__file__, query.__file__, flows.__file__],
    "marks": [core.MARK, core.models.X, query.MARK, flows.MARK],
    "editable": sorted(m for m in sys.modules if "editable" in m),
}))
"""

# Every module of the installed package imports, and none of them reaches a top-level floor
# name (an absolute `import core...` would pick up the user's package from the cwd).
CHECK_ALL = """
import importlib, json, pkgutil, sys
import ragstream
names = [m.name for m in pkgutil.walk_packages(ragstream.__path__, "ragstream.")]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
stray = sorted(m for m in sys.modules if m.split(".")[0] in FLOORS)
print(json.dumps({"names": names, "failed": failed, "stray": stray}))
"""


def test_installed_wheel_beside_users_own_floors(fresh: Path, tmp_path: Path) -> None:
    python, script = fresh / "bin" / "python", fresh / "bin" / "ragstream"
    site = next((fresh / "lib").glob("python3*/site-packages"))
    cwd = tmp_path / "project"
    for rel, text in USER_PACKAGES.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(text)

    code = f"HEAVY = {HEAVY!r}\n{CHECK_IMPORTS}"
    got = json.loads(_run([str(python), "-c", code], cwd=cwd).stdout)
    for key in ("ragstream", "models", "fuse"):  # the wheel's copy, not the repo's
        assert Path(got[key]).is_relative_to(site), (key, got[key])
    assert got["has_chunk"] and got["heavy"] == [] and got["editable"] == []
    assert all(Path(f).is_relative_to(cwd) for f in got["user"]), got["user"]
    assert got["marks"] == ["user core", 1, "user query", "user flows"]

    code = f"FLOORS = {FLOORS!r}\n{CHECK_ALL}"
    every = json.loads(_run([str(python), "-c", code], cwd=cwd).stdout)
    assert every["failed"] == {} and every["stray"] == [], every
    assert {f"ragstream.{floor}" for floor in FLOORS} <= set(every["names"])
    assert {
        "ragstream.cli",
        "ragstream.http.app",
        "ragstream.service.local",
        "ragstream.eval.evaluation",
    } <= set(every["names"])

    helped = _run([str(script), "--help"], cwd=cwd).stdout
    for command in ("query", "serve", "sync", "status"):
        assert command in helped, helped
