"""``Worker``: one row per worker process start, renewed by its heartbeat, closed when it stops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from django.db import models
from django.db.models import Case, CharField, Q, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.workers import StopReason, WorkerState

if TYPE_CHECKING:  # mixed into a QuerySet below: filter, annotate and db come from there
    _QuerySet = models.QuerySet[Any]
else:
    _QuerySet = object


class _WorkerQueries(_QuerySet):
    """Worker rows by state, judged on the database's clock (as leases are)."""

    def with_state(self) -> Self:
        """Annotate ``state``: ``stopped`` (it said so), ``alive`` (renewed in time) or ``gone`` (silent)."""
        return self.annotate(state=Case(
            When(stopped_at__isnull=False, then=Value(WorkerState.STOPPED.value)),
            When(alive_until__gte=_db_now(self.db), then=Value(WorkerState.ALIVE.value)),
            default=Value(WorkerState.GONE.value), output_field=CharField()))

    def alive(self) -> Self:
        return self.filter(stopped_at__isnull=True, alive_until__gte=_db_now(self.db))

    def gone(self) -> Self:
        return self.filter(stopped_at__isnull=True, alive_until__lt=_db_now(self.db))

    def stopped(self) -> Self:
        return self.filter(stopped_at__isnull=False)


class WorkerQuerySet(_WorkerQueries, ReadOnlyQuerySet):
    """What ``Worker.objects`` returns: reads only (see :mod:`django_procedures.models.readonly`)."""


class _WritableWorkerQuerySet(_WorkerQueries, WriterQuerySet):
    pass


def _db_now(alias: str) -> RawSQL | Value:
    from django.db import connections

    if connections[alias].vendor == "postgresql":
        return RawSQL("clock_timestamp()", (), output_field=models.DateTimeField())
    return Value(timezone.now(), output_field=models.DateTimeField())


class Worker(StoreWritten):
    """A ``procedures_worker`` process: who it is, what it serves, and whether it is still there.

    ``last_seen_at`` is renewed with the heartbeat (at most once per
    ``lease_seconds / 3``) and ``alive_until`` with it, to ``last_seen_at +
    lease_seconds`` on the database's clock. A worker that stops says why in
    ``stop_reason``; one killed with -9 keeps ``stopped_at`` empty and is
    *gone* once ``alive_until`` has passed.
    """

    # Not unique: --worker-id may name every start of one service the same; each start is its own row.
    worker_id = models.CharField(max_length=255)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    version = models.CharField(max_length=50, blank=True, help_text="django-procedures version it runs.")
    queues = models.JSONField(default=list, blank=True, help_text="Queues it serves; empty: every queue.")
    concurrency = models.PositiveIntegerField()
    lease_seconds = models.FloatField()
    with_scheduler = models.BooleanField(default=False, help_text="Started with --with-scheduler: it ticks schedules.")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    alive_until = models.DateTimeField(help_text="Gone if not renewed by then (database clock).")
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=10, blank=True, choices=[(r.value, r.label) for r in StopReason])
    stop_detail = models.TextField(blank=True)

    objects = WorkerQuerySet.as_manager()
    _writer = _WritableWorkerQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        indexes = [
            # The dashboard and metrics: workers not known to have stopped, by renewal deadline.
            models.Index(fields=["alive_until"], condition=Q(stopped_at__isnull=True),
                         name="procedures_worker_live_idx"),
            # The admin list (newest first) and retention (oldest first).
            models.Index(fields=["last_seen_at"], name="procedures_worker_seen_idx"),
        ]

    def __str__(self) -> str:
        return f"worker {self.worker_id} ({self.hostname}, pid {self.pid})"
