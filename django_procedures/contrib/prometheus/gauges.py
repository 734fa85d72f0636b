"""Database gauges: a fixed number of queries, each bounded (capped counts, index ranges), at any table size."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import Count
from django.utils import timezone

from django_procedures.conf import conf
from django_procedures.models import LimitUse, Schedule, Worker
from django_procedures.policy.status import RunStatus
from django_procedures.policy.workers import WorkerState
from django_procedures.store.overview import counts_by_queue, oldest_due

#: Statuses counted by queue: the unfinished ones (finished procedures are counted by the workers' counters).
COUNTED = (RunStatus.READY, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.RETRYING, RunStatus.ROLLING_BACK)


def schedule_lags(now: datetime) -> Iterator[tuple[str, float, float | None]]:
    """``(name, seconds its next tick is overdue, last drift in seconds)`` of each enabled schedule."""
    rows = Schedule.objects.filter(enabled=True).order_by("name").values_list("name", "next_tick_at",
                                                                              "last_drift_ms")
    for name, next_tick_at, drift_ms in rows:
        lag = 0.0 if next_tick_at is None else max(0.0, (now - next_tick_at).total_seconds())
        yield name, lag, None if drift_ms is None else drift_ms / 1000


def worker_states() -> dict[str, int]:
    """Workers alive, and gone (stopped renewing without stopping) among the rows not pruned yet."""
    found = dict.fromkeys((WorkerState.ALIVE.value, WorkerState.GONE.value), 0)
    rows = (Worker.objects.filter(stopped_at__isnull=True).with_state().order_by().values_list("state")
            .annotate(n=Count("id")))
    found.update(dict(rows))
    return found


#: Most limit names the gauges list (the busiest first): per-customer names could be thousands.
LIMIT_SERIES = 500


def limits_in_use() -> list[tuple[str, int, int | None]]:
    """Flow-control limits with a slot taken now, fleet-wide: ``(name, in_use, max)``."""
    return list(LimitUse.objects.with_use(timezone.now()).filter(in_use__gt=0).order_by("-in_use", "name")
                .values_list("name", "in_use", "max")[:LIMIT_SERIES])


def collect(now: datetime | None = None) -> dict[str, Any]:
    """Every gauge's values: ``procedures``, ``capped``, ``oldest_due``, ``schedules``, ``workers``."""
    now = now or timezone.now()
    cap = int(conf.METRICS_COUNT_CAP)
    procedures, capped = {}, {}
    for status in COUNTED:
        procedures[status.value], capped[status.value] = counts_by_queue(status.value, cap)
    return {"procedures": procedures, "capped": capped, "oldest_due": oldest_due(now, cap),
            "schedules": list(schedule_lags(now)), "workers": worker_states(), "now": now,
            "limits": limits_in_use()}
