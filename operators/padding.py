"""Length-sorted mini-batches for onnxruntime models (as sentence-transformers batches).

A batch padded to its longest member makes every short text pay for the longest one. Over
real candidates the lengths vary widely (SciFact question + chunk pairs: mean 104 tokens,
one in ten at the 160-token cap), so sorting by length and padding each batch only to its
own width saves most of the work (figures: docs/notes/tuning-scifact.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def padded_batches(
    encodings: Sequence[Any], batch_size: int
) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
    """(rows, feeds) per mini-batch: `rows` index `encodings` (unpadded `tokenizers`
    encodings), shortest first; `feeds` holds input_ids, attention_mask and token_type_ids
    padded with zeros to the batch's own longest.

    >>> from types import SimpleNamespace as E
    >>> encs = [E(ids=[5, 6, 7], type_ids=[0, 0, 1]), E(ids=[9], type_ids=[0])]
    >>> [(rows, feeds["input_ids"].tolist()) for rows, feeds in padded_batches(encs, 2)]
    [([1, 0], [[9, 0, 0], [5, 6, 7]])]
    """
    order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(encodings[r].ids) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for j, r in enumerate(rows):
            n = len(encodings[r].ids)
            ids[j, :n], mask[j, :n], types[j, :n] = encodings[r].ids, 1, encodings[r].type_ids
        yield rows, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
