"""The submitter's W3C trace context, stored on a procedure at submit when OpenTelemetry is in use.

Nothing here imports ``opentelemetry`` unless the process already has: a span
can only be current if something imported ``opentelemetry.trace`` first, so a
process that never did pays one dictionary lookup per submitted row.
"""

from __future__ import annotations

import sys
from typing import Any

from django_procedures.conf import conf


def capture() -> dict[str, str] | None:
    """``{"traceparent": ..., "tracestate": ...}`` of the span current now, or None (no span, or tracing off)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or conf.TRACING is False:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator().inject(carrier)
    return carrier or None


def parent_of(stored: dict[str, Any] | None) -> Any:
    """The OpenTelemetry ``Context`` a stored trace context stands for (None when there is none)."""
    if not stored or not isinstance(stored, dict):
        return None
    return _propagator().extract({k: v for k, v in stored.items() if isinstance(v, str)})


def _propagator() -> Any:
    # W3C trace context only: baggage is the application's, and could be large.
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()
