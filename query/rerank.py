"""Cross-encoder reranking: fused candidates → the k best for one query.

A reranker is optional, and "no reranker" is a first-class state, not a crash:
`load_reranker(None)` returns None, `rerank` then keeps the fused order and cuts to k, and
the span (and `Answer.reranker`) say so with `NO_RERANKER`. A reranker that *is* configured
but cannot be loaded offline is a configuration error and raises `RerankerUnavailable` with
the reason, rather than silently degrading ranking quality.

Three kinds load: a directory `ragstream tune` wrote for this index (`reranker.json` with
its version, the `max_length` it was trained with and `"tuned": true`, plus an int8
`model.onnx`), run by `OnnxReranker` without torch; any sentence-transformers
`CrossEncoder` found in local files, run by `CrossEncoderReranker`; or a model the user
serves (`rerank:<model>`) behind the `/rerank` shape Cohere, Jina, TEI, infinity, vLLM and
llama.cpp share, asked by `RemoteReranker`. A remote reranker that times out or fails never
fails the query: `rerank` keeps the fused order and hands the reason to `on_failure` (the
answer's `reranker` and the span say so). Every reranker reads what the embedder reads: the
chunk's contextual header (its heading path, never the title; with the situating sentence
when `chunk.situate` is on) and its text.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from ragstream.core.errors import ModelUnavailableError
from ragstream.core.settings import REMOTE_RERANKER, RerankEndpointSettings, switched_off
from ragstream.core.telemetry import span
from ragstream.operators.chunk import embedding_text
from ragstream.operators.cross_encoder import OnnxCrossEncoder
from ragstream.query.retrieve import Candidate

NO_RERANKER = "none (no cross-encoder configured)"
RERANKER_META = "reranker.json"  # marks a model directory `ragstream tune` wrote
DEFAULT_RERANK_DEPTH = 50
# Characters kept per text before tokenizing: far more than max_length word pieces ever need
# (a word piece is >= 1 char), so the tokenizer's own truncation still decides, but a huge
# chunk does not cost a full tokenization pass.
_CHARS_PER_TOKEN = 12


class RerankerUnavailable(ModelUnavailableError):
    """A reranker is configured but cannot be loaded here (not installed, not offline, bad)."""


class RerankerFailed(Exception):
    """A remote reranker did not score this query (timeout, HTTP error, a body without a
    score per text): the query goes on in fused order."""


class Reranker(Protocol):
    """Anything that scores (query, text) pairs; higher means more relevant.

    `prior_weight` > 0 orders by the score blended with the fused rank (`blend`): a model
    trained on a few hundred questions knows things the fusion does not, and vice versa."""

    name: str
    prior_weight: float
    depth: int  # fused candidates it re-scores unless `query.rerank_depth` says otherwise

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


class Reranked(BaseModel):
    """A candidate after the rerank stage; `rerank_score` is None when no reranker ran."""

    model_config = ConfigDict(frozen=True)

    candidate: Candidate
    rerank_score: float | None = None

    @property
    def score(self) -> float:
        """The score that ordered this item: the rerank score if any, else the fused one."""
        return self.rerank_score if self.rerank_score is not None else self.candidate.score


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` on CPU, loaded strictly from local files."""

    def __init__(self, name_or_path: str, *, max_length: int = 512, batch_size: int = 32) -> None:
        from sentence_transformers import CrossEncoder

        if max_length < 8 or batch_size < 1:
            raise ValueError(f"bad max_length={max_length} / batch_size={batch_size}")
        self.name = name_or_path
        self.prior_weight = 0.0  # a general cross-encoder's score alone orders
        self.depth = DEFAULT_RERANK_DEPTH
        self.batch_size = batch_size
        self.model: Any = CrossEncoder(
            name_or_path, max_length=max_length, device="cpu", local_files_only=True
        )
        # asking for more tokens than the model has positions crashes at predict time
        positions = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        self.max_length = min(int(self.model.max_seq_length or max_length), max_length)
        if isinstance(positions, int) and positions > 0:
            self.max_length = min(self.max_length, positions)
        self.model.max_seq_length = self.max_length

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One float per text, in input order; pairs are truncated to `max_length` tokens."""
        if not texts:
            return []
        cap = self.max_length * _CHARS_PER_TOKEN
        pairs = [(query[:cap], text[:cap]) for text in texts]
        scores = self.model.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(s) for s in scores.reshape(len(texts), -1)[:, 0]]


class OnnxReranker:
    """A tuned reranker (`ragstream tune`): int8 ONNX on onnxruntime, one logit per pair."""

    def __init__(self, model_dir: Path | str, *, batch_size: int = 8) -> None:
        self._model = OnnxCrossEncoder(model_dir, RERANKER_META, "the tuned reranker")
        self.version = str(self._model.meta.get("version", "reranker-unversioned"))
        self.name = f"{self.version} ({model_dir})"
        self.tuned = bool(self._model.meta.get("tuned", False))
        # chosen by `ragstream tune` on its held-out queries (0: the score alone)
        self.prior_weight = float(self._model.meta.get("prior_weight", 0.0))
        self.depth = int(self._model.meta.get("rerank_depth") or DEFAULT_RERANK_DEPTH)
        # length-sorted batches of 8: the fastest size on a 2-core CPU (figures:
        # docs/notes/tuning-scifact.md)
        self.batch_size = batch_size

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        logits = self._model.logits([(query, t) for t in texts], self.batch_size)
        return [float(x) for x in logits[:, 0]]


class RemoteReranker:
    """A model behind a `/rerank` endpoint (`rerank_endpoint`): one request per query, the
    scores put back in input order (a text the answer leaves out scores NaN: ordered last)."""

    def __init__(self, model: str, endpoint: RerankEndpointSettings) -> None:
        import httpx

        self.model, self.endpoint = model, endpoint
        self.name = f"{REMOTE_RERANKER}{model} ({endpoint.base_url})"
        self.prior_weight = 0.0
        self.depth = DEFAULT_RERANK_DEPTH
        key = os.environ.get(endpoint.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(headers=headers, timeout=endpoint.timeout_s)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        import httpx

        if not texts:
            return []
        if self.endpoint.shape == "tei":
            body: dict[str, Any] = {"query": query, "texts": list(texts)}
        else:
            body = {
                "model": self.model,
                "query": query,
                "documents": list(texts),
                "top_n": len(texts),
            }
        url = self.endpoint.base_url.rstrip("/") + "/rerank"
        try:
            reply = self._http.post(url, json=body)
            reply.raise_for_status()
            return rerank_scores(reply.json(), len(texts))
        except (httpx.HTTPError, ValueError) as exc:
            raise RerankerFailed(f"{type(exc).__name__}: {exc}") from exc


def rerank_scores(body: Any, count: int) -> list[float]:
    """Scores in input order from a `/rerank` answer of either shape: `{results: [{index,
    relevance_score}]}` or `[{index, score}]`. A text the answer leaves out scores NaN;
    an index out of range or a body of neither shape is a `ValueError`."""
    rows = body.get("results") if isinstance(body, dict) else body
    if not isinstance(rows, list):
        raise ValueError("a /rerank answer holds a list of results")
    scores = [math.nan] * count
    for row in rows:
        index = row.get("index")
        value = row.get("relevance_score", row.get("score"))
        if not isinstance(index, int) or not 0 <= index < count or value is None:
            raise ValueError(f"a /rerank result without a valid index and score: {row!r}")
        scores[index] = float(value)
    return scores


def is_tuned(spec: str | None) -> bool:
    """Is `spec` a reranker directory `ragstream tune` wrote (eval names its rows
    `+rerank(tuned)`)?"""
    return (
        bool(spec) and not switched_off(spec or "") and (Path(spec or "") / RERANKER_META).is_file()
    )


def load_reranker(
    spec: str | None,
    *,
    max_length: int = 512,
    endpoint: RerankEndpointSettings | None = None,
) -> Reranker | None:
    """None when not configured (None, "", "none"); else a loaded cross-encoder, or the
    client of a served one (`rerank:<model>`, asked at `endpoint`).

    Raises RerankerUnavailable when configured but not loadable offline, so a typo in a
    path is reported at startup instead of silently serving unreranked results.
    """
    if spec is None or switched_off(spec):
        return None
    if spec.startswith(REMOTE_RERANKER):
        return RemoteReranker(spec[len(REMOTE_RERANKER) :], endpoint or RerankEndpointSettings())
    if is_tuned(spec):
        return OnnxReranker(spec.strip())  # its own error names the directory
    try:
        return CrossEncoderReranker(spec.strip(), max_length=max_length)
    except Exception as exc:  # any load failure means: this reranker is not usable here
        raise RerankerUnavailable(
            f"cannot load cross-encoder {spec!r} offline (local files only; no trained "
            f"cross-encoder weights are installed unless you provide a path): {exc}"
        ) from exc


def rerank(
    query: str,
    candidates: Sequence[Candidate],
    reranker: Reranker | None,
    k: int,
    on_failure: Callable[[str], None] | None = None,
) -> list[Reranked]:
    """The k best candidates: by cross-encoder score when a reranker is given (ties keep
    the fused order), else the fused order itself, cut to k. A remote reranker that fails
    (`RerankerFailed`) leaves the fused order too, and `on_failure` gets why."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    name = reranker.name if reranker is not None else "none"
    with span("query.rerank", model=name, candidates=len(candidates), k=k) as sp:
        sp.set_attribute("skipped", reranker is None)
        scores: list[float] | None = None
        if reranker is not None:
            texts = [embedding_text(c.chunk.context, c.chunk.text) for c in candidates]
            try:
                scores = reranker.score(query, texts)
            except RerankerFailed as failed:
                sp.set_attribute("failed", str(failed))
                if on_failure is not None:
                    on_failure(str(failed))
        if reranker is None or scores is None:
            out = [Reranked(candidate=c) for c in candidates[:k]]
        else:
            if len(scores) != len(candidates):  # a local model's bug: not a failed endpoint
                raise RuntimeError(
                    f"reranker {name!r} returned {len(scores)} scores for {len(candidates)} texts"
                )
            keys = blend(scores, reranker.prior_weight) if reranker.prior_weight else scores
            order = sorted(range(len(candidates)), key=lambda i: _sort_key(keys[i], i))
            out = [Reranked(candidate=candidates[i], rerank_score=scores[i]) for i in order[:k]]
        sp.set_attribute("returned", len(out))
        if out:
            sp.set_attribute("top_score", out[0].score)
    return out


def rerank_depth(reranker: Reranker | None, setting: int | None, k: int) -> int | None:
    """How many fused candidates to re-score (at least k); None (all) without a reranker."""
    if reranker is None:
        return None
    return max(setting or reranker.depth, k)


def blend(scores: Sequence[float], prior_weight: float) -> list[float]:
    """The ordering key of candidates in fused order: each score standardized within the
    query, plus `prior_weight` × −ln(1 + fused position). 0 keeps the score's own order; a
    large weight keeps the fused order; NaN scores stay NaN (ordered last)."""
    finite = [s for s in scores if math.isfinite(s)]
    mean = math.fsum(finite) / len(finite) if finite else 0.0
    spread = math.sqrt(math.fsum((s - mean) ** 2 for s in finite) / len(finite)) if finite else 0.0
    if spread <= 1e-9 * max(1.0, abs(mean)):  # equal scores (up to rounding): no information
        spread = math.inf
    return [(s - mean) / spread - prior_weight * math.log1p(i) for i, s in enumerate(scores)]


def _sort_key(score: float, index: int) -> tuple[float, int]:
    """Descending score, NaN last, then fused position (a stable tie-break)."""
    return (-score if not math.isnan(score) else math.inf, index)


__all__ = [
    "NO_RERANKER",
    "CrossEncoderReranker",
    "OnnxReranker",
    "RemoteReranker",
    "Reranked",
    "Reranker",
    "RerankerFailed",
    "RerankerUnavailable",
    "blend",
    "is_tuned",
    "load_reranker",
    "rerank",
    "rerank_scores",
]
