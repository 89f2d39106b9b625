"""The ONNX MiniLM-L3 embedder encodes length-sorted mini-batches and must hand the vectors
back in the caller's order, equal to encoding each text alone (padding is masked out)."""

from __future__ import annotations

import numpy as np
import pytest

from ragstream.operators.embed import Embedder, load_embedder


@pytest.fixture(scope="module")
def minilm_l3() -> Embedder:
    return load_embedder("minilm-l3")


def test_sorted_batches_return_vectors_in_input_order(minilm_l3: Embedder) -> None:
    texts = [
        "Green tea is steeped at 80 degrees for two minutes, longer for a stronger cup, and "
        "never with boiling water, which makes the leaves bitter.",
        "tea",
        "A chunker splits a document into pieces.",
        "",
        "Qdrant stores vectors with payloads.",
    ]
    together = minilm_l3.encode_passages(texts, batch_size=2)
    alone = np.vstack([minilm_l3.encode_passages([t], batch_size=1) for t in texts])
    assert together.shape == (len(texts), minilm_l3.version.dimension)
    assert np.allclose(together, alone, atol=1e-5)
    # distinct texts give distinct vectors: a scatter-back bug would repeat or swap rows
    sims = together @ together.T
    assert all(sims[i, j] < 0.999 for i in range(len(texts)) for j in range(i))
