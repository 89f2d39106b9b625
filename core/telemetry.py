"""OpenTelemetry setup: one tracer for all of ragstream, exporter chosen by settings.

Stages open spans named `ragstream.<pipeline>.<stage>` with the counts that explain them.
Tests install an InMemorySpanExporter through `install_exporter`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_provider: TracerProvider | None = None
_configured: set[tuple[str, str]] = set()


def _get_provider() -> TracerProvider:
    global _provider
    if _provider is None:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            _provider = current
        else:
            _provider = TracerProvider()
            trace.set_tracer_provider(_provider)
    return _provider


def install_exporter(exporter: SpanExporter, batch: bool = False) -> None:
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    _get_provider().add_span_processor(processor)


def configure(exporter: str, otlp_endpoint: str = "") -> None:
    """Install the exporter named in settings (`none`, `console`, `otlp`) once per process."""
    if (exporter, otlp_endpoint) in _configured:
        return
    _configured.add((exporter, otlp_endpoint))
    if exporter == "console":
        install_exporter(ConsoleSpanExporter())
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        install_exporter(OTLPSpanExporter(endpoint=otlp_endpoint), batch=True)
    else:
        _get_provider()


def tracer() -> trace.Tracer:
    return _get_provider().get_tracer("ragstream")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """A `ragstream.<name>` span; None-valued attributes are dropped (OTel rejects them)."""
    with tracer().start_as_current_span(f"ragstream.{name}") as current:
        for key, value in attributes.items():
            if value is not None:
                current.set_attribute(key, value)
        yield current
