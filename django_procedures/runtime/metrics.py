"""Worker metrics for Prometheus (extra ``[prometheus]``), served at ``/metrics`` by ``--metrics-port``
(``runtime.probes``, beside the health probes).

Counted in-process from :mod:`~django_procedures.runtime.observe`; only
imported when a metrics port is given, so the core never needs
``prometheus_client``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django_procedures import clock
from django_procedures.runtime.observe import seconds

logger = logging.getLogger("django_procedures.worker")

#: Step durations: from 5 ms to 10 minutes.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Time from due (``run_at``) to claimed: from 1 ms to 1 hour.
PICKUP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: Outcome values (``runtime.running.Outcome``) that finish a procedure, and the status it finished with.
FINISHED = {"completed": "done", "failed": "failed", "rolled_back": "rolled_back"}


class MetricsUnavailable(RuntimeError):
    """``prometheus_client`` is not installed."""


def require_client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise MetricsUnavailable("metrics need prometheus-client: pip install 'django-procedures[prometheus]'"
                                 ) from None
    return prometheus_client


class _DeferredClaims:
    """``django_procedures_claims_deferred{limit}``: procedures this worker's claims passed by because a limit
    was full (``store.limits.deferrals``; rows a claim skipped in SQL as known full are not counted)."""

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        from django_procedures.store.limits import deferrals

        family = CounterMetricFamily("django_procedures_claims_deferred", "Procedures this worker's claims passed "
                                     "by because a flow-control limit was full.", labels=["limit"])
        for name, n in sorted(deferrals.items()):
            family.add_metric([name], n)
        yield family


class WorkerMetrics:
    """One worker's counters and histograms, in a registry of their own (an observer of ``runtime.observe``)."""

    def __init__(self, busy_threads: Callable[[], int]) -> None:
        client = require_client()
        self.registry = registry = client.CollectorRegistry(auto_describe=True)
        self.steps = client.Counter("django_procedures_steps", "Step attempts ended by this worker, by outcome "
                                    "(the Step statuses done, failed, lost).", ["type", "outcome"], registry=registry)
        self.finished = client.Counter("django_procedures_procedures_finished", "Procedures this worker brought to "
                                       "a final status.", ["type", "status"], registry=registry)
        self.step_duration = client.Histogram("django_procedures_step_duration_seconds", "Duration of ended step "
                                              "attempts (done or failed).", ["type"], buckets=STEP_BUCKETS,
                                              registry=registry)
        self.pickup_delay = client.Histogram("django_procedures_pickup_delay_seconds", "From due (run_at) to "
                                             "claimed by this worker.", buckets=PICKUP_BUCKETS, registry=registry)
        self.claims = client.Counter("django_procedures_claims", "Procedures claimed by this worker.",
                                     registry=registry)
        self.leases_lost = client.Counter("django_procedures_leases_lost", "Claims whose lease this worker lost "
                                          "(taken over, cancelled, renewal timed out).", registry=registry)
        self.fenced_writes = client.Counter("django_procedures_fenced_writes", "Writes refused by the fence "
                                            "because the lease had moved (their result dropped).", registry=registry)
        # Labelled children by label values: ``labels()`` validates and locks at every call, once per step.
        self._children: dict[tuple[str, ...], tuple[Any, ...]] = {}
        busy = client.Gauge("django_procedures_busy_threads", "Executor threads running a procedure now.",
                            registry=registry)
        busy.set_function(busy_threads)
        registry.register(_DeferredClaims())

    # -- observer methods (runtime.observe) -----------------------------------------------

    def claimed(self, claims: Sequence[Any]) -> None:
        now = clock.now()
        self.claims.inc(len(claims))
        for c in claims:
            if getattr(c, "run_at", None) is not None:
                self.pickup_delay.observe(max(0.0, (now - c.run_at).total_seconds()))

    def _step_children(self, type_name: str, outcome: str) -> tuple[Any, ...]:
        """``steps`` and ``step_duration`` for ``type_name`` and ``outcome`` (looked up once, then kept)."""
        key = ("step", type_name, outcome)
        children = self._children.get(key)
        if children is None:  # two threads may both look it up: labels() gives both the same children
            children = self._children[key] = (self.steps.labels(type_name, outcome),
                                               self.step_duration.labels(type_name))
        return children

    def step_ended(self, claim: Any, record: Any, outcome: str, error: BaseException | None) -> None:
        count, duration = self._step_children(claim.type_name, outcome)
        count.inc()
        duration.observe(seconds(record))

    def outcome(self, running: Any, value: str) -> None:
        type_name = running.claim.type_name
        if value in FINISHED:
            key = ("finished", type_name, value)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = (self.finished.labels(type_name, FINISHED[value]),)
            children[0].inc()
        elif value == "lost":
            self.leases_lost.inc()
            self._step_children(type_name, "lost")[0].inc()

    def fenced_write(self, claim: Any) -> None:
        self.fenced_writes.inc()

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The registry in the format the scraper's ``Accept`` header asks for (Prometheus text, or OpenMetrics)."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
