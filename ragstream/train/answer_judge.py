"""Build the shipped answer judge: `make answer-judge` (python -m ragstream.train.answer_judge).

Pairs from the train articles of the SQuAD 2.0-format file (`train.answer_judge_data`), a
3-layer MiniLM cross-encoder with two classes (the sentence holds the answer, or not)
trained by `train.crossencoder` with early stopping on the held-out articles' ROC AUC,
exported to int8 ONNX under `operators/answer_judge_model/` with an `answer_judge.json`
that records the version (a hash of the weights), the data and its licence, the
configuration and the held-out figures. Same data, same seed, same command: the same model
(up to floating-point nondeterminism across CPUs, which the recorded figures would show).
`--embedder NAME` adds the `gold_removed` pairs (ranked by that embedder); `--baseline DIR`
reads another judge on the same held-out pairs, side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ragstream.core.settings import Settings
from ragstream.operators.answer_judge import ANSWER_JUDGE_FILE, BUNDLED_ANSWER_JUDGE
from ragstream.operators.embed import load_embedder
from ragstream.train.answer_judge_data import LABELS, AnswerPair, build_pairs
from ragstream.train.crossencoder import TrainConfig, export_onnx, train_cross_encoder
from ragstream.train.decision import auc
from ragstream.train.judge import SHARED

SQUAD = SHARED / "squad2-half" / "dev-v2.0-half.json"
LICENCE = (
    "SQuAD 2.0 (Rajpurkar, Jia and Liang, ACL 2018), CC BY-SA 4.0: the train articles of "
    "the squad2-half split"
)


def _triples(pairs: Sequence[AnswerPair]) -> list[tuple[str, str, float]]:
    return [(p.question, p.passage, float(p.label)) for p in pairs]


def held_auc(logits: Any, held: Sequence[tuple[str, str, float]]) -> float:
    """ROC AUC of the answer logit margin on held-out pairs (the early-stopping figure)."""
    margin = np.asarray(logits)[:, 1] - np.asarray(logits)[:, 0]
    labels = [x for *_, x in held]
    return auc(
        [m for m, y in zip(margin, labels, strict=True) if y],
        [m for m, y in zip(margin, labels, strict=True) if not y],
    )


def per_kind(probs: Any, held: Sequence[AnswerPair]) -> dict[str, float]:
    """Held-out accuracy at 0.5 per kind of pair (how each failure mode is caught)."""
    kinds: dict[str, list[bool]] = {}
    for p, pair in zip(probs, held, strict=True):
        kinds.setdefault(pair.kind, []).append(int(p >= 0.5) == pair.label)
    return {k: round(float(np.mean(v)), 4) for k, v in sorted(kinds.items())}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    embedder = load_embedder(args.embedder) if args.embedder else None
    fit, held = build_pairs(args.squad, args.seed, embedder)
    if args.limit:
        fit, held = fit[: args.limit], held[: max(50, args.limit // 5)]
    layers = tuple(int(x) for x in args.layers.split(",") if x.strip())
    config = TrainConfig(
        keep_layers=layers,
        labels=len(LABELS),
        epochs=args.epochs,
        seed=args.seed,
        max_length=args.max_length,
        class_weights=(1.0, 2.0),  # about one pair in eight holds the answer
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "model"
        record = train_cross_encoder(_triples(fit), _triples(held), config, work, score=held_auc)
        onnx_path = export_onnx(work, args.out / "model.onnx")
        shutil.copy(work / "config.json", args.out / "config.json")
    meta: dict[str, Any] = {
        "version": "answer-judge-" + xxhash.xxh64(onnx_path.read_bytes()).hexdigest()[:12],
        "labels": list(LABELS),
        "max_length": args.max_length,
        "data": {
            "squad": f"{args.squad.name} ({args.squad.stat().st_size} bytes)",
            "licence": LICENCE,
            "split": "train articles only; those eval.squad.holds_out picks are held out "
            "for early stopping, the figures and the answerability decision",
        },
        "gold_removed_ranked_by": args.embedder or None,
        "command": " ".join(
            ["python -m ragstream.train.answer_judge", *(sys.argv[1:] if argv is None else argv)]
        ),
        "training": record,
    }
    (args.out / ANSWER_JUDGE_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    record |= _onnx_figures(args.out, held)  # the exported model, as it ships
    if args.baseline:  # another judge read on the same held-out pairs, side by side
        record["baseline"] = {"model": str(args.baseline)} | _onnx_figures(args.baseline, held)
    (args.out / ANSWER_JUDGE_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    print(
        json.dumps(
            {"version": meta["version"]}
            | {
                k: record[k]
                for k in ("held_auc_onnx", "held_by_kind_onnx", "baseline", "train_seconds")
                if k in record
            },
            indent=2,
        )
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, default=SQUAD)
    parser.add_argument("--out", type=Path, default=BUNDLED_ANSWER_JUDGE)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--layers", default="0,2,4", help="MiniLM layers kept ('' = all six)")
    parser.add_argument("--limit", type=int, default=0, help="fit pairs (0 = all; smoke runs)")
    parser.add_argument(
        "--embedder",
        default="",
        help="the embedder that ranks gold_removed passages (the index's: "
        f"{Settings.model_fields['embedder'].default}); '' (the shipped judge's pairs): none",
    )
    parser.add_argument(
        "--baseline", type=Path, help="a judge directory to read on the same held-out pairs"
    )
    return parser


def _onnx_figures(model_dir: Path, held: Sequence[AnswerPair]) -> dict[str, Any]:
    """The held-out AUC and per-kind accuracy of the exported ONNX model in `model_dir`."""
    from ragstream.operators.answer_judge import AnswerJudge

    probs = AnswerJudge(model_dir).holds([(p.question, p.passage) for p in held])
    auc_onnx = auc(
        [float(p) for p, h in zip(probs, held, strict=True) if h.label],
        [float(p) for p, h in zip(probs, held, strict=True) if not h.label],
    )
    return {"held_auc_onnx": round(auc_onnx, 4), "held_by_kind_onnx": per_kind(probs, held)}


if __name__ == "__main__":
    raise SystemExit(main())
