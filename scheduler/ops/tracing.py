"""OpenTelemetry traces: off unless an OTLP/HTTP endpoint is configured.

The service creates the spans (one per pass, children for placement, preemption and Nomad
calls) through `opentelemetry.trace.get_tracer`; without a provider those are no-ops.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor

SERVICE_NAME = "llm-scheduler"
_installed: TracerProvider | None = None


def endpoint_from_env() -> str | None:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or None
    )


def _traces_url(endpoint: str) -> str:
    # OTEL_EXPORTER_OTLP_ENDPOINT is the collector's base URL; the HTTP exporter wants the
    # signal path when given an explicit endpoint.
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def setup_tracing(
    endpoint: str | None = None,
    *,
    exporter: SpanExporter | None = None,
    processor: SpanProcessor | None = None,
) -> TracerProvider | None:
    """Install a tracer provider that exports to `endpoint` (or the OTEL_* environment).

    With neither, nothing is installed and tracing stays a no-op. Tests pass `processor`
    (e.g. SimpleSpanProcessor(InMemorySpanExporter())). Installing twice reuses the provider.
    """
    global _installed
    endpoint = endpoint or endpoint_from_env()
    if endpoint is None and exporter is None and processor is None:
        return None
    provider = _installed
    if provider is None:
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        trace.set_tracer_provider(provider)
        # set_tracer_provider refuses a second provider; keep whichever is global.
        current = trace.get_tracer_provider()
        provider = current if isinstance(current, TracerProvider) else provider
        _installed = provider
    if processor is not None:
        provider.add_span_processor(processor)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=_traces_url(endpoint)))
        )
    return provider
