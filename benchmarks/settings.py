"""Settings of the benchmark runner and of the worker processes it starts.

The test project's settings plus the ``benchmarks`` app, whose ``procedures``
module holds the no-op procedures the benchmarks run. The test suite never
loads this module, so these types exist only in benchmark workers.
"""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks"]

# Workers in production run without DEBUG (which records every query on every connection).
DEBUG = False

# BENCH_TRACING=1 (the observability benchmark's "+otel" workers): an OpenTelemetry SDK tracer provider that
# batches spans as a real set-up does, then drops them, so the figure is the spans' cost without the network.
if os.environ.get("BENCH_TRACING") == "1":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class _Dropped(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(BatchSpanProcessor(_Dropped()))
    trace.set_tracer_provider(_provider)
