"""The README is a front page, and its quick start works as written: the shell block runs
against the bundled samples/ (into a temporary data dir instead of `.demo`), the Python block
against a temporary index; the getting-started page carries the same blocks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DATA_DIR = ".demo"  # the data dir the quick start names


def quick_start_blocks(path: Path) -> tuple[str, str]:
    """The first ```bash and ```python blocks after the "Quick start" heading."""
    text = path.read_text(encoding="utf-8")
    start = text.index("Quick start")
    shell = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    python = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert shell and python, f"{path.name} has no quick start blocks"
    return shell.group(1), python.group(1)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 300
    assert "../shared" not in text and "/work/" not in text
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    for heading in ("## Set up", "## Quick start", "## Features", "## How it works", "## Results"):
        assert heading in lines, heading
    assert "make demo" in text and "make test" in text and "http://127.0.0.1:8765/" in text
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert any(t.endswith(".png") for t in local) and len(local) >= 15
    assert [t for t in local if not (REPO / t).exists()] == []


def test_getting_started_carries_the_same_quick_start() -> None:
    assert quick_start_blocks(REPO / "docs" / "getting-started.md") == quick_start_blocks(README)


@pytest.mark.slow
def test_the_shell_quick_start_runs_against_the_samples(tmp_path: Path) -> None:
    shell, _ = quick_start_blocks(README)
    data = tmp_path / "demo"
    lines = [line for line in shell.splitlines() if line.startswith(".venv/bin/ragstream")]
    assert [line.split()[1] for line in lines][:3] == ["sync", "status", "query"]
    outputs = {}
    for line in lines:
        command = line.replace(f"--data-dir {DATA_DIR}", f"--data-dir {data}")
        assert command != line, line
        done = subprocess.run(
            ["bash", "-c", command], cwd=REPO, env=clean_env(),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
        outputs[line] = done.stdout
    answer = next(out for line, out in outputs.items() if "how are deleted files" in line)
    assert "[S1]" in answer and "samples/" in answer
    assert any("indexed" in out or "docs" in out for out in outputs.values())


@pytest.mark.slow
def test_the_python_quick_start_runs_against_a_temporary_index(tmp_path: Path) -> None:
    _, python = quick_start_blocks(README)
    data = tmp_path / "index"
    code = python.replace(f'"{DATA_DIR}"', repr(str(data)))
    assert code != python
    checks = (
        "\nassert report.docs_changed >= 5 and report.chunks_embedded > 0, report"
        "\nassert answer.refusal is None and answer.citations, answer.refusal"
        "\nassert all('samples' in cite.path for cite in answer.citations)"
        "\nassert hits and len(hits) <= 3"
    )
    done = subprocess.run(
        [sys.executable, "-c", code + checks], cwd=REPO, env=clean_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[S1]" in done.stdout and (data / "state").is_dir()
