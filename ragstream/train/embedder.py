"""Fine-tune a sentence-transformers embedder on one index's own retrieval
(`ragstream tune --what embedder`).

Contrastive training (MultipleNegativesRankingLoss, written out here so it can mask): each
batch holds (query, positive chunk, hard-negative chunk) triples; every query must pick its
own positive among all the batch's positives and hard negatives (cosine × `scale`, softmax
cross-entropy). A column that holds a document judged relevant to the row's query is masked
rather than counted as a negative: SciFact queries share gold documents, and teaching the
model to push a relevant document away is the classic in-batch false-negative bug.

Seeded, AdamW with the same warm-up/decay as the cross-encoders (`train.crossencoder`). The
figure for early stopping is the held-out queries' MRR@10 when their mined candidates are
ordered by the embedder alone (a proxy for dense retrieval that needs no corpus re-encode);
the base model's figure is measured first, so the report says whether tuning helped. The
result is a plain sentence-transformers model directory: `load_embedder(PATH)` reads it, and
its weights fingerprint is a new embedder version (what `reindex start --embedder PATH` needs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.train.crossencoder import TrainingRun, seed_everything

if TYPE_CHECKING:  # the mined groups' type; tune imports the retrieval stack
    from ragstream.train.tune import Group


@dataclass(frozen=True)
class EmbedTrainConfig:
    """Everything that decides the tuned embedder's weights (recorded next to them)."""

    batch_size: int = 32  # triples per step: 32 queries see 64 passages (MNRL needs width)
    epochs: int = 1
    learning_rate: float = 8e-5  # best held-out MRR@10 of 2e-5, 5e-5, 8e-5 (docs/guide/tune.md)
    warmup_share: float = 0.1
    weight_decay: float = 0.01
    scale: float = 20.0  # cosine temperature (sentence-transformers' MNRL default)
    hard_negatives: int = 1  # mined negatives per (query, positive): extra softmax columns
    max_length: int = 0  # 0 = the model's own max_seq_length (what ingest encodes at)
    seed: int = 13


@dataclass(frozen=True)
class Triple:
    """A query, one of its judged chunks and its hard negatives (one or more), with the
    judged documents (masked when they appear as another row's passage in the same batch)."""

    query: str
    positive: str
    negatives: tuple[str, ...]
    positive_doc: str
    negative_docs: tuple[str, ...]
    relevant: frozenset[str]


def embedding_triples(
    groups: Sequence[Group], positives: int, seed: int, negatives: int = 1
) -> list[Triple]:
    """Per query: its best-ranked judged chunks (up to `positives`), each with `negatives`
    of the best-ranked chunks of unjudged documents, dealt out in rank order (with 2
    positives: the first gets negatives 1, 3, 5 …, the second 2, 4, 6 …), so no two rows of
    one query share a negative. Queries whose judged documents were not retrieved, or that
    have no unjudged candidate for a positive, are skipped."""
    triples = []
    for g in groups:
        relevant = frozenset(doc for _, doc, rel in g.candidates if rel)
        pos = [(t, d) for t, d, rel in g.candidates if rel][:positives]
        neg = [(t, d) for t, d, rel in g.candidates if not rel]
        for k, (text, doc) in enumerate(pos):
            mine = neg[k :: len(pos)][:negatives]
            if mine:
                texts, docs = zip(*mine, strict=True)
                triples.append(Triple(g.query, text, texts, doc, docs, relevant))
    random.Random(seed).shuffle(triples)
    return triples


def passage_columns(batch: Sequence[Triple]) -> list[tuple[str, str]]:
    """The batch's passages as softmax columns, (text, doc): row i's positive is column i,
    then every row's negatives."""
    return [(t.positive, t.positive_doc) for t in batch] + [
        (text, doc) for t in batch for text, doc in zip(t.negatives, t.negative_docs, strict=True)
    ]


def in_batch_mask(batch: Sequence[Triple]) -> list[list[bool]]:
    """mask[i][j]: passage column j (`passage_columns`) is a document judged relevant to row
    i's query, other than row i's own positive: not a negative for row i."""
    docs = [d for _, d in passage_columns(batch)]
    return [[j != i and d in t.relevant for j, d in enumerate(docs)] for i, t in enumerate(batch)]


def masked_mnrl(queries: Any, passages: Any, mask: Any, scale: float) -> Any:
    """Cross-entropy of each query over all passages (its positive is column i)."""
    import torch

    sim = queries @ passages.T * scale
    sim = sim.masked_fill(mask, float("-inf"))
    return torch.nn.functional.cross_entropy(sim, torch.arange(len(queries)))


def _embed(model: Any, texts: Sequence[str]) -> Any:
    import torch

    features = model.preprocess(list(texts))
    features = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in features.items()}
    out = model(features)["sentence_embedding"]
    return torch.nn.functional.normalize(out, dim=-1).cpu()


def dense_order_scores(
    model: Any,
    groups: Sequence[Group],
    query_prefix: str,
    passage_prefix: str,
    known: Mapping[str, Sequence[float]] | None = None,
) -> list[list[float]]:
    """Each group's candidates scored by the embedder alone (cosine), texts encoded once;
    `known` passages (text -> this model's unit vector, e.g. read back from the index it
    built) are not encoded again."""
    import numpy as np

    texts = list(dict.fromkeys(t for g in groups for t, _, _ in g.candidates))
    if not texts:
        return [[] for _ in groups]
    known = known or {}
    todo = [t for t in texts if t not in known]
    encoded = (
        model.encode([passage_prefix + t for t in todo], batch_size=16, normalize_embeddings=True)
        if todo
        else []
    )
    fresh = dict(zip(todo, encoded, strict=True))
    vectors = np.asarray([known[t] if t in known else fresh[t] for t in texts], dtype=np.float32)
    row = {t: i for i, t in enumerate(texts)}
    queries = model.encode(
        [query_prefix + g.query for g in groups], batch_size=16, normalize_embeddings=True
    )
    return [
        [float(x) for x in np.asarray(vectors[[row[t] for t, _, _ in g.candidates]]) @ q]
        for g, q in zip(groups, queries, strict=True)
    ]


def _batch_loss(
    model: Any, batch: Sequence[Triple], prefixes: tuple[str, str], scale: float
) -> Any:
    """The masked MNRL loss of one batch of triples (queries against every passage column)."""
    import torch

    query_prefix, passage_prefix = prefixes
    queries = _embed(model, [query_prefix + t.query for t in batch])
    passages = _embed(model, [passage_prefix + t for t, _ in passage_columns(batch)])
    mask = torch.tensor(in_batch_mask(batch))
    return masked_mnrl(queries, passages, mask, scale)


def train_embedder(
    base: str,
    fit: Sequence[Triple],
    held: Sequence[Group],
    config: EmbedTrainConfig,
    out_dir: Path,
    *,
    held_figure: Callable[[Sequence[Group], list[list[float]]], float],
    prefixes: tuple[str, str] = ("", ""),
    base_vectors: Mapping[str, Sequence[float]] | None = None,
    progress: Callable[[str], None] = print,
    on_step: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Train from the model directory `base`, keep the best epoch on the held-out figure,
    save a sentence-transformers directory to `out_dir`, return the training record.
    `base_vectors`: held-out passages' vectors under `base` as the index stores them (text
    -> vector), so the base figure encodes only the queries."""
    import torch
    from sentence_transformers import SentenceTransformer

    seed_everything(config.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = SentenceTransformer(base, device=device, local_files_only=True)
    if config.max_length:
        model.max_seq_length = config.max_length

    def evaluate(known: Mapping[str, Sequence[float]] | None = None) -> float:
        model.eval()
        with torch.inference_mode():
            return held_figure(held, dense_order_scores(model, held, *prefixes, known))

    base_figure = evaluate(base_vectors)
    progress(f"base embedder: held-out figure {base_figure:.4f}")
    run = TrainingRun(model, fit, config, progress, on_step, every=10)
    best = run.best
    for epoch, batches in run.epochs():
        for batch in batches:
            run.step(_batch_loss(model, batch, prefixes, config.scale), epoch)
        figure = evaluate()
        best.offer(epoch, figure, model)
        progress(f"epoch {epoch}: held-out figure {figure:.4f} (base {base_figure:.4f})")
    best.restore(model)
    model.to("cpu")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir), create_model_card=False)
    record = {
        "config": asdict(config),
        "fit_triples": len(fit),
        "held_queries": len(held),
        "device": device,
        "train_seconds": round(run.seconds, 1),
        "base_score": round(base_figure, 5),
        "best_score": round(best.score, 5),
        "history": best.history,
    }
    (out_dir / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
