"""OpenTelemetry spans for a worker (extra ``[otel]``): one per claim, one per step attempt.

A worker traces when its process uses OpenTelemetry: ``PROCEDURES['TRACING']``
is not False, ``opentelemetry.trace`` has been imported (by the application's
own set-up, ``opentelemetry-instrument``, or by this module when ``TRACING`` is
True) and a tracer provider is set. Otherwise :func:`start` returns None, no
observer is registered, and the worker's hot path is what it is without
OpenTelemetry: this module imports ``opentelemetry`` only inside its functions.

A claim span's parent is the span that was current when the procedure was
submitted (its W3C trace context is stored on the row), so the worker's spans
join the submitter's trace. Step spans are the claim span's children, drawn
from the recorded start and end of each attempt once its outcome is known.
"""

from __future__ import annotations

import logging
import sys
import threading
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_procedures import __version__
from django_procedures.conf import conf
from django_procedures.runtime.running import error_text
from django_procedures.trace_context import parent_of

logger = logging.getLogger("django_procedures.worker")

#: The instrumentation scope of the spans.
SCOPE = "django_procedures"
#: Claim outcomes (``runtime.running.Outcome`` values) that mark the claim span as an error.
ERROR_OUTCOMES = frozenset({"failed"})


def tracer_provider() -> Any:
    """The process's tracer provider if this worker should trace, else None (see the module docstring)."""
    wanted = conf.TRACING
    if wanted is False:
        return None
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        if wanted is not True:
            return None  # nothing imported OpenTelemetry: no provider can have been set
        try:
            from opentelemetry import trace
        except ImportError:
            raise ImproperlyConfigured("PROCEDURES['TRACING'] is True, but opentelemetry-api is not installed: "
                                       "pip install 'django-procedures[otel]', or set TRACING to None") from None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        if wanted is True:
            logger.warning("PROCEDURES['TRACING'] is True, but no OpenTelemetry tracer provider is set when the "
                           "worker starts; no spans (call trace.set_tracer_provider() in your settings or "
                           "AppConfig.ready())")
        return None
    return provider


def start() -> Tracing | None:
    """Register a :class:`Tracing` observer with the process's tracer provider, or None if it should not trace."""
    from django_procedures.runtime import observe

    provider = tracer_provider()
    if provider is None:
        return None
    tracing = Tracing(provider)
    observe.observers.append(tracing)
    return tracing


def stop(tracing: Tracing | None) -> None:
    from django_procedures.runtime import observe

    if tracing is not None and tracing in observe.observers:
        observe.observers.remove(tracing)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


class Tracing:
    """An observer of ``runtime.observe`` that turns a worker's claims and step attempts into spans."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import context, trace

        self._context, self._trace = context, trace
        self.tracer = provider.get_tracer(SCOPE, __version__)
        self._lock = threading.Lock()
        #: (procedure id, lease token) -> (claim span, the token that made it current on its thread, the
        #: context its step spans start in).
        self._claims: dict[tuple[Any, int], tuple[Any, Any, Any]] = {}

    def _attributes(self, claim: Any) -> dict[str, Any]:
        return {"procedures.type": claim.type_name, "procedures.id": str(claim.id),
                "procedures.queue": claim.queue, "procedures.lease_token": claim.lease_token}

    def claim_started(self, running: Any) -> None:
        claim = running.claim
        parent = parent_of(claim.trace_context) or self._context.Context()  # never the thread's leftovers
        span = self.tracer.start_span(
            f"claim {claim.type_name}", context=parent, kind=self._trace.SpanKind.CONSUMER,
            attributes={**self._attributes(claim), "procedures.step": claim.step_name,
                        "procedures.attempt": claim.attempt})
        # Current on this thread while the claim runs: spans the steps start are its children.
        current = self._trace.set_span_in_context(span)
        token = self._context.attach(current)
        with self._lock:
            self._claims[(claim.id, claim.lease_token)] = (span, token, current)

    def step_ended(self, claim: Any, record: Any, outcome: str, error: BaseException | None) -> None:
        with self._lock:
            entry = self._claims.get((claim.id, claim.lease_token))
        parent = entry[2] if entry is not None else parent_of(claim.trace_context) or self._context.Context()
        span = self.tracer.start_span(
            f"step {claim.type_name}.{record.name}", context=parent, start_time=_ns(record.started_at),
            attributes={**self._attributes(claim), "procedures.step": record.name,
                        "procedures.attempt": record.attempt, "procedures.outcome": outcome})
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error_text(error)))
        span.end(end_time=_ns(record.finished_at))

    def outcome(self, running: Any, value: str) -> None:
        claim = running.claim
        with self._lock:
            entry = self._claims.pop((claim.id, claim.lease_token), None)
        if entry is None:
            return
        span, token, _ = entry
        span.set_attribute("procedures.outcome", value)
        if value in ERROR_OUTCOMES:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"the procedure {value}"))
        span.end()
        try:
            self._context.detach(token)
        except Exception:  # detached out of order by foreign code: the span is ended all the same
            logger.debug("could not detach the claim span of procedure %s", claim.id)
