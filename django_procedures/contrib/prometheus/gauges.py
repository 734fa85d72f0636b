"""Database gauges: a fixed number of queries, each bounded (capped counts, index ranges), at any table size."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Count
from django.utils import timezone

from django_procedures.conf import conf
from django_procedures.models import LimitUse, ProcedureRun, Schedule, Worker
from django_procedures.policy.status import CLAIMABLE, RunStatus
from django_procedures.policy.workers import WorkerState

#: Statuses counted by queue: the unfinished ones (finished procedures are counted by the workers' counters).
COUNTED = (RunStatus.READY, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.RETRYING, RunStatus.ROLLING_BACK)


def _table() -> str:
    return connection.ops.quote_name(ProcedureRun._meta.db_table)


def counts_by_queue(status: str, cap: int) -> tuple[dict[str, int], bool]:
    """Procedures of ``status`` by queue, reading at most ``cap`` rows (the status index); and whether capped."""
    sql = (f"SELECT queue, COUNT(*) FROM (SELECT queue FROM {_table()} WHERE status = %s LIMIT %s) AS s "
           "GROUP BY queue")
    with connection.cursor() as cursor:
        cursor.execute(sql, [status, cap + 1])
        rows = dict(cursor.fetchall())
    return rows, sum(rows.values()) > cap  # over the cap: the counts of the first cap + 1 rows read, a floor


def oldest_due(now: datetime, cap: int) -> dict[str, datetime]:
    """Per queue, the ``run_at`` of its oldest due, unclaimed procedure, among the ``cap`` oldest due ones.

    Reads the due index in ``run_at`` order, so the oldest overall is always
    right; a queue none of whose due procedures is among the ``cap`` oldest is
    left out (its lag is smaller than every reported one).
    """
    placeholders = ", ".join(["%s"] * len(CLAIMABLE))
    sql = (f"SELECT queue, MIN(run_at) FROM (SELECT queue, run_at FROM {_table()} WHERE status IN ({placeholders}) "
           "AND run_at <= %s ORDER BY run_at LIMIT %s) AS s GROUP BY queue")
    field = ProcedureRun._meta.get_field("run_at")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*sorted(CLAIMABLE), field.get_db_prep_value(now, connection), cap])
        rows = cursor.fetchall()
    return {queue: _aware(at) for queue, at in rows}


def _aware(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite returns MIN() of a timestamp column as text
        value = datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


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
    return list(LimitUse.objects.filter(in_use__gt=0).order_by("-in_use", "name")
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
