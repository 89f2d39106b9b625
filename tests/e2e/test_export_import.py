"""Export / import on a real synced folder: each format round-trips every live chunk into a
new data dir that answers the same questions with the same citations, shows no drift, and
whose `sync` of the same folder embeds nothing; the CLI pipes one into the other; a bad file
is refused with its line named and leaves no data dir behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragstream import Client, api
from ragstream.connectors.export_files import read_records
from ragstream.connectors.fields import FieldCatalog
from ragstream.core.errors import InvalidRequestError
from ragstream.core.settings import Settings, StoreSettings
from ragstream.service import audit, exports
from tests.harness.helpers import copy_docs

pytestmark = pytest.mark.slow

DOCS = [
    "md/docling_integrations_langchain.md",
    "md/docling_integrations_haystack.md",
    "pdf/docling__2305.03393v1-pg9.pdf",
]
QUESTIONS = [
    "How does docling plug into LangChain?",
    "How are tables tokenized for structure recognition?",
]


@pytest.fixture(scope="module")
def synced(shared_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Settings]:
    root = tmp_path_factory.mktemp("export")
    folder = copy_docs(shared_docs, DOCS, root / "docs", flat=True)
    settings = Settings(data_dir=root / "data")
    api.sync([folder], settings=settings)
    return folder, settings


def _answers(settings: Settings) -> list[tuple[list[str], list[str]]]:
    out = []
    with Client(settings=settings) as c:
        for q in QUESTIONS:
            hits = [r.point_id for r in c.retrieve(q, k=8).results]
            cited = [x.point_id for x in c.query(q).citations]
            out.append((hits, cited))
    return out


def _filtered(settings: Settings) -> list[str]:
    with Client(settings=settings) as c:
        found = c.retrieve(QUESTIONS[1], k=8, filter="extension = pdf and mtime exists")
    return [r.point_id for r in found.results]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_import_answers_the_same_and_a_sync_embeds_nothing(
    synced: tuple[Path, Settings], tmp_path: Path, fmt: str
) -> None:
    folder, settings = synced
    out = tmp_path / f"index.{fmt}"
    report = exports.export(settings, fmt, out)
    with Client(settings=settings) as c:
        live = c.status().chunks_live
    records = list(read_records(out))
    assert report.records == len(records) == live > 10
    assert {r.doc_id for r in records} == {f"docs:{Path(d).name}" for d in DOCS}
    assert all(len(r.dense) == 384 and r.sparse.indices and r.text for r in records)
    new = settings.model_copy(update={"data_dir": tmp_path / "imported"})
    assert exports.import_records(new, out).records == live
    before = _answers(settings)
    assert all(hits for hits, _ in before) and any(cited for _, cited in before)
    assert _answers(new) == before
    # the metadata fields come with their types, so a filter reads the same on both
    assert FieldCatalog(new.state_dir).types() == FieldCatalog(settings.state_dir).types()
    assert _filtered(new) == _filtered(settings) != []
    assert audit.verify([folder], settings=new).ok
    again = api.sync([folder], settings=new)
    assert again.chunks_embedded == 0 and again.docs_changed == 0


def test_the_cli_exports_and_imports(synced: tuple[Path, Settings], tmp_path: Path) -> None:
    settings = synced[1]
    cli = [sys.executable, "-m", "ragstream.cli"]
    exported = subprocess.run(
        [*cli, "export", "--data-dir", str(settings.data_dir)],
        capture_output=True,
        timeout=300,
        check=True,
    )
    lines = exported.stdout.decode().splitlines()
    assert json.loads(lines[0])["embedder"].startswith("all-minilm-l6-v2-384")
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(exported.stdout)
    imported = subprocess.run(
        [*cli, "import", str(dump), "--data-dir", str(tmp_path / "d"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(imported.stdout)["records"] == len(lines)
    bad = subprocess.run(
        [*cli, "export", "--format", "parquet", "--data-dir", str(settings.data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "--out" in bad.stderr and "Traceback" not in bad.stderr
    to_file = ["--out", str(tmp_path / "x.jsonl"), "--json"]
    report = subprocess.run(
        [*cli, "export", *to_file, "--data-dir", str(settings.data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(report.stdout)["records"] == len(lines)


def _broken(src: Path, dst: Path, how: str) -> Path:
    lines = src.read_text().splitlines()
    if how == "cut":
        lines[3] = lines[3][: len(lines[3]) // 2]
    elif how == "dims":
        record = json.loads(lines[3])
        record["dense"] = record["dense"][:10]
        lines[3] = json.dumps(record)
    elif how == "weights":
        record = json.loads(lines[3])
        record["sparse"]["values"] = [v * 2 for v in record["sparse"]["values"]]
        lines[3] = json.dumps(record)
    dst.write_text("\n".join(lines) + "\n")
    return dst


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("cut", "line 4: not JSON"),
        ("dims", "line 4: .*dense has 10 dimensions"),
        ("weights", "sparse weights are not this ragstream's BM25"),
    ],
)
def test_a_bad_file_is_refused_with_its_line_and_leaves_nothing(
    synced: tuple[Path, Settings], tmp_path: Path, how: str, named: str
) -> None:
    settings = synced[1]
    good = tmp_path / "good.jsonl"
    exports.export(settings, "jsonl", good)
    bad = _broken(good, tmp_path / "bad.jsonl", how)
    target = tmp_path / "target"
    with pytest.raises(InvalidRequestError, match=named):
        exports.import_records(settings.model_copy(update={"data_dir": target}), bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl"]


def test_an_import_refuses_a_data_dir_that_holds_an_index(
    synced: tuple[Path, Settings], tmp_path: Path
) -> None:
    settings = synced[1]
    good = tmp_path / "good.jsonl"
    exports.export(settings, "jsonl", good)
    with pytest.raises(InvalidRequestError, match="already holds an index"):
        exports.import_records(settings, good)
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_bytes(b"PAR1 and then nothing")
    with pytest.raises(InvalidRequestError, match="not a readable Parquet file"):
        exports.import_records(
            settings.model_copy(update={"data_dir": tmp_path / "n"}), not_parquet
        )


def test_an_export_imports_into_a_qdrant_client_index(
    synced: tuple[Path, Settings], tmp_path: Path
) -> None:
    """The server-backed store (qdrant-client, here in its local mode) takes an import too."""
    folder, settings = synced
    out = tmp_path / "index.parquet"
    exports.export(settings, "parquet", out)
    server = settings.model_copy(
        update={"data_dir": tmp_path / "q", "store": StoreSettings(vector_backend="qdrant")}
    )
    assert (
        exports.import_records(server, out).records
        == exports.export(settings, "jsonl", tmp_path / "again.jsonl").records
    )
    assert [hits for hits, _ in _answers(server)] == [hits for hits, _ in _answers(settings)]
    again = api.sync([folder], settings=server)
    assert again.chunks_embedded == 0 and again.docs_changed == 0
    with pytest.raises(InvalidRequestError, match="already holds an index"):
        exports.import_records(server, out)
