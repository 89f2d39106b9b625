"""A sync that embeds nothing loads no model: the real CLI in a subprocess, twice over one
unchanged file, and what the second pass left in `sys.modules`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the real CLI in subprocesses

MODEL_MODULES = ("sentence_transformers", "torch", "transformers", "onnxruntime")
# `ragstream sync` as the console script runs it, then the model modules it imported
PROBE = f"""
import sys
from ragstream.cli import main
try:
    main(["sync", sys.argv[1], "--data-dir", sys.argv[2], "--json"])
except SystemExit as done:
    if done.code:
        raise
print("LOADED", [m for m in {MODEL_MODULES!r} if m in sys.modules])
"""


def _sync(root: Path, data: Path) -> tuple[dict[str, object], str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), str(data)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report, loaded = run.stdout.strip().rsplit("\n", 1)
    return json.loads(report), loaded


def _runtime() -> list[str]:
    """What MiniLM-L6 opens on here: its ONNX export where `make install` made it, else
    torch through transformers (parsing imports neither)."""
    from ragstream.operators.onnx_export import export_path, preset_root

    exported = export_path(preset_root("minilm-l6")).is_file()
    return ["onnxruntime"] if exported else ["torch", "transformers"]


def test_a_sync_that_embeds_nothing_imports_no_model(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "volcanoes.md").write_text(
        "# Volcanoes\n\nA volcano is a rupture in a planet's crust through which lava, ash "
        "and gases escape. Volcanoes form where tectonic plates diverge or converge.\n"
    )
    data = tmp_path / "data"
    first, loaded = _sync(root, data)
    assert first["chunks_embedded"] == 1
    assert loaded == f"LOADED {_runtime()!r}"  # the probe sees a load
    again, loaded = _sync(root, data)
    assert again["docs_changed"] == 0 and again["chunks_embedded"] == 0
    assert loaded == "LOADED []"
