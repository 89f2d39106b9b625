"""Docling's conversion of one in-memory document, for the formats ragstream reads, without
torch or transformers in the process.

`docling.document_converter` imports docling's speech (ASR) pipeline, and with it torch, for
audio that is never read here; its option modules import transformers to annotate VLM
options and torch to look for Apple's MPS. Together that is seconds of imports in every
process that parses (`docs/guide/models.md`). `Converter` is `DocumentConverter.convert` for
one document on Markdown, HTML, DOCX, PPTX and PDF: its inputs are built by docling's own
`_DocumentConversionInput` (format detection, limits, invalid input) and run through the
same pipelines (docling's simple pipeline; the model-free native PDF pipeline), one instance
per format, as the converter caches them. `tests/unit/operators/test_docling_convert.py`
holds it equal to `DocumentConverter` on every format and on corrupt input.

docling's modules are imported with torch and transformers unavailable to the importing
thread (`import_docling`); docling takes its own fallbacks for an install without them.
Where a docling version cannot do without them, it is imported as it is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docling.datamodel.document import ConversionResult
    from docling_core.types.io import DocumentStream

# what docling imports only to look around or to annotate
_NOT_FOR_DOCLING = frozenset({"torch", "transformers"})
_DOCLING_MODULES = (
    "docling.backend.html_backend",
    "docling.backend.md_backend",
    "docling.backend.mspowerpoint_backend",
    "docling.backend.msword_backend",
    "docling.backend.pypdfium2_backend",
    "docling.datamodel.base_models",
    "docling.datamodel.document",
    "docling.datamodel.pipeline_options",
    "docling.datamodel.settings",
    "docling.pipeline.native_pdf_pipeline",
    "docling.pipeline.simple_pipeline",
)


class _NotForDocling(importlib.abc.MetaPathFinder):
    """Refuses `_NOT_FOR_DOCLING` to one thread (the one importing docling); any other
    thread imports them as usual."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if threading.get_ident() == self.thread and name.split(".")[0] in _NOT_FOR_DOCLING:
            raise ModuleNotFoundError(f"No module named {name!r} (not for docling)", name=name)


@lru_cache(maxsize=1)
def import_docling() -> None:
    """The docling modules `Converter` uses, imported once per process with
    `_NOT_FOR_DOCLING` unavailable to the import."""
    guard = _NotForDocling()
    sys.meta_path.insert(0, guard)
    try:
        for module in _DOCLING_MODULES:
            importlib.import_module(module)
    except ImportError:
        pass  # imported whole below
    finally:
        sys.meta_path.remove(guard)
    for module in _DOCLING_MODULES:
        importlib.import_module(module)


class Converter:
    """`DocumentConverter(allowed_formats=[MD, HTML, DOCX, PPTX, PDF]).convert(stream,
    raises_on_error=False)`, PDFs on the native pipeline with `timeout_s` per document. The
    native pipeline is model-free: docling's layout and OCR pipelines fetch weights from the
    Hugging Face hub, which ragstream never contacts (scans are read by `operators.ocr`)."""

    def __init__(self, timeout_s: float | None) -> None:
        import_docling()
        from docling.backend.html_backend import HTMLDocumentBackend
        from docling.backend.md_backend import MarkdownDocumentBackend
        from docling.backend.mspowerpoint_backend import MsPowerpointDocumentBackend
        from docling.backend.msword_backend import MsWordDocumentBackend
        from docling.backend.pypdfium2_backend import PyPdfiumDocumentBackend
        from docling.datamodel.base_models import BaseFormatOption, InputFormat
        from docling.datamodel.pipeline_options import (
            ConvertPipelineOptions,
            NativePdfPipelineOptions,
        )
        from docling.pipeline.native_pdf_pipeline import NativePdfPipeline
        from docling.pipeline.simple_pipeline import SimplePipeline

        pdf = NativePdfPipelineOptions(
            generate_page_images=False, generate_picture_images=False, document_timeout=timeout_s
        )
        simple = ConvertPipelineOptions()
        backends = {
            InputFormat.MD: MarkdownDocumentBackend,
            InputFormat.HTML: HTMLDocumentBackend,
            InputFormat.DOCX: MsWordDocumentBackend,
            InputFormat.PPTX: MsPowerpointDocumentBackend,
        }
        self.options: dict[Any, Any] = {
            fmt: BaseFormatOption(backend=backend, pipeline_options=simple)
            for fmt, backend in backends.items()
        }
        self.options[InputFormat.PDF] = BaseFormatOption(
            backend=PyPdfiumDocumentBackend, pipeline_options=pdf
        )
        self._pipeline_kinds: dict[Any, type] = {fmt: SimplePipeline for fmt in backends}
        self._pipeline_kinds[InputFormat.PDF] = NativePdfPipeline
        self._pipelines: dict[type, Any] = {}
        self._lock = threading.Lock()

    def _pipeline(self, fmt: Any) -> Any:
        """One pipeline per kind, built on first use (as the converter caches them)."""
        kind = self._pipeline_kinds[fmt]
        with self._lock:
            if kind not in self._pipelines:
                self._pipelines[kind] = kind(pipeline_options=self.options[fmt].pipeline_options)
            return self._pipelines[kind]

    def convert(self, stream: DocumentStream) -> ConversionResult:
        from docling.datamodel.base_models import (
            ConversionStatus,
            DoclingComponentType,
            ErrorItem,
            FailureCategory,
        )
        from docling.datamodel.document import (
            ConversionResult,
            _DocumentConversionInput,
            build_invalid_input_errors,
        )
        from docling.datamodel.settings import DocumentLimits

        found = _DocumentConversionInput(path_or_stream_iterator=[stream], limits=DocumentLimits())
        docs = list(found.docs(self.options))
        if len(docs) != 1:
            raise ValueError(
                "The source contains multiple documents. Use convert_all() to convert every "
                "document in the source."
            )
        (doc,) = docs
        if doc.format not in self.options:
            skipped = ErrorItem(
                component_type=DoclingComponentType.USER_INPUT,
                module_name="",
                error_message=f"File format not allowed: {doc.file}",
                category=FailureCategory.POLICY,
            )
            return ConversionResult(input=doc, status=ConversionStatus.SKIPPED, errors=[skipped])
        if not doc.valid:
            backend = getattr(doc, "_backend", None)
            if backend is not None:
                backend.unload()
            errors = build_invalid_input_errors(doc)
            return ConversionResult(input=doc, status=ConversionStatus.FAILURE, errors=errors)
        return self._pipeline(doc.format).execute(doc, raises_on_error=False)


@lru_cache(maxsize=4)
def converter(timeout_s: float | None) -> Converter:
    """One converter per process (and per timeout setting)."""
    return Converter(timeout_s)
