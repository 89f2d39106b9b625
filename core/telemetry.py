"""OpenTelemetry setup: one tracer for all of ragstream, exporter chosen by settings.

Stages open spans named `ragstream.<pipeline>.<stage>` with the counts that explain them.
Tests install an InMemorySpanExporter through `install_exporter`. Metrics: the index audit's
drift counts are an observable gauge `ragstream.index.drift{kind=...}` (the last `verify`),
exported with the same exporter setting; tests read them with `install_metric_reader`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_provider: TracerProvider | None = None
_configured: set[tuple[str, str]] = set()
_meter_providers: list[MeterProvider] = []  # one per installed reader, kept alive here
_drift: dict[str, int] = {}  # the last audit's counts per drift class, read by the gauge


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
        install_metric_reader(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        install_exporter(OTLPSpanExporter(endpoint=otlp_endpoint), batch=True)
        url = otlp_endpoint.replace("/v1/traces", "/v1/metrics") if otlp_endpoint else None
        install_metric_reader(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=url)))
    else:
        _get_provider()


def install_metric_reader(reader: MetricReader) -> None:
    """A MeterProvider's readers are fixed when it is made (and a reader serves one
    provider), so each reader gets its own provider and gauge; the gauge reads module
    state, so every reader sees the same figures."""
    provider = MeterProvider(metric_readers=[reader])
    _meter_providers.append(provider)
    provider.get_meter("ragstream").create_observable_gauge(
        "ragstream.index.drift",
        callbacks=[_observe_drift],
        unit="{document}",
        description="documents per drift class found by the last index audit (verify)",
    )


def _observe_drift(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(count, {"kind": kind}) for kind, count in sorted(_drift.items())]


def record_drift(counts: dict[str, int]) -> None:
    """The last audit's drift counts, for the gauge."""
    _drift.clear()
    _drift.update(counts)


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
