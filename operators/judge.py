"""The support judge: does a source sentence bear on a statement, and which way?

A 3-layer MiniLM cross-encoder this project trains (`make judge`, `ragstream.train.judge`)
on SciFact train claims, shipped as int8 ONNX (`operators/judge_model/`) and run here with
onnxruntime and the `tokenizers` library: no torch, tens of milliseconds for a few dozen
short pairs. For a (premise, statement) pair it gives three probabilities:

- `unrelated`: the premise does not speak to the statement (does not answer the question);
- `supports`: the premise says what the statement says;
- `contradicts`: the premise says the opposite (a negated or reversed claim).

Claim verification reads it: a claim whose cited span the judge reads as contradicting it
is not supported. Whether the sources answer a question at all is the answer judge's
question (operators/answer_judge.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ragstream.core.settings import switched_off
from ragstream.operators.cross_encoder import CHARS, OnnxCrossEncoder

BUNDLED = Path(__file__).resolve().parent / "judge_model"
J = TypeVar("J")
UNRELATED, SUPPORTS, CONTRADICTS = 0, 1, 2


class SupportJudge:
    """The trained judge, loaded from a model directory (model.onnx, tokenizer.json,
    judge.json)."""

    META = "judge.json"
    WHAT = "the support judge"

    def __init__(
        self,
        model_dir: Path | str = BUNDLED,
        *,
        threads: int = 0,
        memo: int = 4096,
        eager: bool = True,
    ) -> None:
        self._model = OnnxCrossEncoder(
            model_dir, self.META, self.WHAT, threads=threads, eager=eager
        )
        self.max_length = self._model.max_length
        self.model_dir = Path(model_dir)
        self.version = str(self._model.meta.get("version", f"{self.META[:-5]}-unversioned"))
        self.labels = len(self._model.meta.get("labels", (0, 0, 0)))
        self._lock = threading.Lock()
        # the answerability judge, the extractive generator and the verifier of one answer
        # read many of the same (sentence, question) pairs: each is scored once
        self._memo: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._memo_size = memo

    @property
    def loaded(self) -> bool:
        """Whether its onnxruntime session is open (a lazy judge opens it on first use)."""
        return self._model.loaded

    def probabilities(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> Any:
        """(n, labels) probabilities, one row per pair: [unrelated, supports, contradicts]
        for the support judge."""
        keys = [(a[:CHARS], b[:CHARS]) for a, b in pairs]
        with self._lock:
            known = {k: self._memo[k] for k in keys if k in self._memo}
        missing = list(dict.fromkeys(k for k in keys if k not in known))
        if missing:
            fresh = self._run(missing, batch_size)
            known.update(zip(missing, fresh, strict=True))
            with self._lock:
                for k, row in zip(missing, fresh, strict=True):
                    self._memo[k] = row
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        if not keys:
            return np.zeros((0, self.labels), dtype=np.float32)
        return np.stack([known[k] for k in keys]).astype(np.float32)

    def _run(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> Any:
        logits = self._model.logits(pairs, batch_size)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)


@cache
def bundled_judge() -> SupportJudge:
    """The shipped judge, loaded once per process (its session opens on first use)."""
    return SupportJudge(BUNDLED, eager=False)


def model_dir(spec: str | None, bundled: Path) -> Path | None:
    """The model directory a setting names, without loading it: None for "none"/"off"/"",
    `bundled` for "bundled", else the path given."""
    if spec is None or switched_off(spec):
        return None
    return bundled if spec.strip().lower() == "bundled" else Path(spec.strip())


def load_model(
    spec: str | None, bundled: Path, shipped: Callable[[], J], load: Callable[[Path], J]
) -> J | None:
    """The model a setting names: None when off, the process's `shipped` one for
    "bundled", else `load(path)`."""
    where = model_dir(spec, bundled)
    if where is None:
        return None
    return shipped() if where == bundled else load(where)


def judge_dir(spec: str | None) -> Path | None:
    """The model directory `query.judge` names, without loading it."""
    return model_dir(spec, BUNDLED)


def load_judge(spec: str | None) -> SupportJudge | None:
    """None for "none"/"off"/""; the shipped judge for "bundled"; else a model directory.
    Only the verifier reads it, so its session opens on the first verified answer: a
    retrieval or a `generate=False` answer never opens it."""
    return load_model(spec, BUNDLED, bundled_judge, lazy_judge)


def lazy_judge(where: Path) -> SupportJudge:
    """The support judge in `where`, its session opened on first use."""
    return SupportJudge(where, eager=False)
