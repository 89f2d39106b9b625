"""An int8 ONNX cross-encoder run with onnxruntime and `tokenizers` (no torch): the form in
which every model this project trains ships (`ragstream.train.crossencoder.export_onnx`).

A model directory holds `model.onnx`, `tokenizer.json` and one JSON metadata file (its
`version` and the `max_length` it was trained with: pairs are truncated to what it saw).
`OnnxCrossEncoder.logits` gives the raw output per (a, b) pair; the support judge reads it
as three classes, a tuned reranker as one relevance score.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.core.cpus import usable_cpus
from ragstream.core.errors import ModelUnavailableError
from ragstream.operators.padding import padded_batches

CHARS = 1200  # characters kept per text before tokenizing (>> max_length word pieces)


class OnnxCrossEncoder:
    """`model_dir/model.onnx` + `tokenizer.json`, described by `model_dir/<meta_name>`;
    `what` names the model in the error a missing or broken directory raises. The metadata,
    the tokenizer and the model file's presence are checked at once; the onnxruntime session
    opens then (`eager`) or on the first `logits` call, so a model a path never reads costs
    nothing (a model file onnxruntime cannot open is then a `ModelUnavailableError` there)."""

    def __init__(
        self,
        model_dir: Path | str,
        meta_name: str,
        what: str,
        *,
        threads: int = 0,
        eager: bool = True,
    ) -> None:
        from tokenizers import Tokenizer

        root = Path(model_dir)
        try:
            meta_path = root / meta_name
            self.meta: dict[str, Any] = (
                json.loads(meta_path.read_text()) if meta_path.exists() else {}
            )
            self.max_length = int(self.meta.get("max_length", 128))
            tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
            if not (root / "model.onnx").is_file():
                raise FileNotFoundError(f"no model.onnx in {root}")
        except Exception as exc:
            raise ModelUnavailableError(f"cannot load {what} from {root}: {exc}") from exc
        tokenizer.enable_truncation(self.max_length, strategy="longest_first")
        tokenizer.no_padding()  # each length-sorted mini-batch is padded to its own width
        self._tokenizer = tokenizer
        self._root, self._what, self._threads = root, what, threads
        self._session: Any = None
        self._inputs: set[str] = set()
        self._lock = threading.Lock()  # one tokenizer's padding/truncation state, shared
        self._opening = threading.Lock()  # the session opens once
        if eager:
            self._opened()

    @property
    def loaded(self) -> bool:
        """Whether the onnxruntime session is open."""
        return self._session is not None

    def _opened(self) -> Any:
        with self._opening:
            if self._session is None:
                import onnxruntime as ort

                try:
                    options = ort.SessionOptions()
                    options.intra_op_num_threads = self._threads or min(4, usable_cpus())
                    options.inter_op_num_threads = 1
                    session = ort.InferenceSession(
                        str(self._root / "model.onnx"), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:
                    raise ModelUnavailableError(
                        f"cannot load {self._what} from {self._root}: {exc}"
                    ) from exc
                self._inputs = {i.name for i in session.get_inputs()}
                self._session = session
        return self._session

    def logits(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> Any:
        """(n, outputs) float32 logits, one row per pair, in order."""
        clipped = [(a[:CHARS], b[:CHARS]) for a, b in pairs]
        if not clipped:
            return np.zeros((0, 1), dtype=np.float32)
        with self._lock:
            encoded = self._tokenizer.encode_batch(clipped)
        session = self._session or self._opened()
        out: Any = None
        for rows, feeds in padded_batches(encoded, batch_size):
            wanted = {k: v for k, v in feeds.items() if k in self._inputs}
            logits = np.asarray(session.run(None, wanted)[0], dtype=np.float32)
            if out is None:
                out = np.zeros((len(clipped), logits.shape[1]), dtype=np.float32)
            out[rows] = logits
        return out
