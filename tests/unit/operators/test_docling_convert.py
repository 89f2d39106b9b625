"""ragstream's converter is docling's `DocumentConverter` without torch: on every format it
reads, and on input that is not what its name says, it gives what `DocumentConverter` gives
(the same document, the same status and errors); and a parsing process imports neither
torch nor transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ragstream.operators.docling_convert import Converter
from tests.conftest import DOCS

if TYPE_CHECKING:
    from docling_core.types.io import DocumentStream

FILES = [
    "md/docling_concepts_chunking.md",
    "html/python311_tutorial_appetite.html",
    "docx/docling__word_tables.docx",
    "pdf/docling__2305.03393v1-pg9.pdf",
    "pptx/" + sorted(p.name for p in (DOCS / "pptx").iterdir())[0],
]
# named as one format, holding another or nothing readable
CORRUPT = {
    "broken.pdf": b"%PDF-1.7\nthis is not a pdf body",
    "empty.docx": b"",
    "zip.pptx": b"PK\x03\x04 not really a zip",
    "binary.html": bytes(range(256)) * 4,
}
PROBE = """
import json, sys
from pathlib import Path
from ragstream.core.models import FileFingerprint
from ragstream.operators.parse import parse_file
for name in sys.argv[1:]:
    parse_file(Path(name), name, "docs", FileFingerprint(size=1, mtime_ns=1))
print(json.dumps([m for m in ("torch", "transformers") if m in sys.modules]))
"""

pytestmark = pytest.mark.slow  # docling's own converter, and a process that parses


@pytest.fixture(scope="module")
def theirs() -> Any:
    from docling.backend.pypdfium2_backend import PyPdfiumDocumentBackend
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions
    from docling.document_converter import DocumentConverter, PdfFormatOption
    from docling.pipeline.native_pdf_pipeline import NativePdfPipeline

    options = NativePdfPipelineOptions(
        generate_page_images=False, generate_picture_images=False, document_timeout=60.0
    )
    pdf = PdfFormatOption(
        pipeline_cls=NativePdfPipeline, pipeline_options=options, backend=PyPdfiumDocumentBackend
    )
    formats = [InputFormat.MD, InputFormat.HTML, InputFormat.DOCX, InputFormat.PPTX]
    return DocumentConverter(
        allowed_formats=[*formats, InputFormat.PDF], format_options={InputFormat.PDF: pdf}
    )


def _outcome(convert: Callable[[DocumentStream], Any], name: str, data: bytes) -> Any:
    """The conversion's result, or the type of what it raised."""
    from docling_core.types.io import DocumentStream

    try:
        return convert(DocumentStream(name=name, stream=BytesIO(data)))
    except Exception as raised:
        return type(raised)


def _both(theirs: Any, name: str, data: bytes) -> tuple[Any, Any]:
    ours = _outcome(Converter(60.0).convert, name, data)
    return ours, _outcome(lambda s: theirs.convert(s, raises_on_error=False), name, data)


@pytest.mark.parametrize("name", FILES)
def test_every_format_converts_as_docling_converts_it(theirs: Any, name: str) -> None:
    ours, want = _both(theirs, Path(name).name, (DOCS / name).read_bytes())
    assert ours.status == want.status
    assert ours.document.export_to_dict() == want.document.export_to_dict()
    assert ours.document.texts  # something was read


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_input_that_is_not_its_format_fails_as_with_docling(theirs: Any, name: str) -> None:
    ours, want = _both(theirs, name, CORRUPT[name])
    if isinstance(want, type):  # docling raised: so must we, the same
        assert ours is want
        return
    assert ours.status == want.status
    assert [(e.category, e.error_message) for e in ours.errors] == [
        (e.category, e.error_message) for e in want.errors
    ]


def test_a_parsing_process_imports_neither_torch_nor_transformers() -> None:
    paths = [str(DOCS / f) for f in FILES]
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *paths], cwd=repo, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []
