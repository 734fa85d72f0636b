"""The operator's dashboard: the last 24 hours by status, failing types, queue lag, live workers, schedules.

What finished in the last 24 hours is read once, from the counts the workers
keep per minute (:func:`~django_procedures.admin.activity.finished_counts`), and
serves the status counts, the failing types and the day chart.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q

from django_procedures import registry
from django_procedures.admin.activity import UNREAD, duration_percentiles, finished_counts, per_bucket, queue_depth
from django_procedures.admin.chart_layout import bucket_start, fill_buckets, window_start
from django_procedures.admin.charts import depth_chart, percentiles_chart, throughput_chart
from django_procedures.admin.why import duration
from django_procedures.models import ProcedureRun, Schedule, Worker
from django_procedures.policy.status import CLAIMABLE, FINAL, LEASED, RunStatus
from django_procedures.policy.workers import WorkerState
from django_procedures.store.activity import counted_span
from django_procedures.store.claim import unknown_types

WINDOW = timedelta(hours=24)
FAILED = (RunStatus.FAILED, RunStatus.ROLLED_BACK)
#: ``{(bucket start, type, status): [how many, the latest finish]}``, as finished_counts returns it.
FinishedCounts = dict[tuple[datetime, str, str], list[Any]]
UNFINISHED = (RunStatus.READY, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.RETRYING, RunStatus.ROLLING_BACK)


def status_counts(since: datetime, finished: FinishedCounts) -> list[tuple[str, int]]:
    """Every status with a count: for a final status the procedures that finished with it since ``since``
    (``finished``, from :func:`~django_procedures.admin.activity.finished_counts`), for the others the
    procedures created since then and not finished."""
    found: dict[str, int] = dict(ProcedureRun.objects.filter(status__in=UNFINISHED, created_at__gte=since)
                                 .order_by().values_list("status").annotate(n=Count("id")))
    for (_, _, status), (n, _) in finished.items():
        found[status] = found.get(status, 0) + n
    return [(status.value, found.get(status.value, 0)) for status in RunStatus]


def unfinished_counts() -> list[tuple[str, int]]:
    """Unfinished procedures of any age, by status (each count read from the status index)."""
    found = dict(ProcedureRun.objects.filter(status__in=UNFINISHED).order_by()
                 .values_list("status").annotate(n=Count("id")))
    return [(status.value, found.get(status.value, 0)) for status in UNFINISHED]


def failing_types(finished: FinishedCounts, limit: int = 10) -> list[dict[str, Any]]:
    """Types with the most procedures that failed (or rolled back) among ``finished``, most first."""
    by_type: dict[str, dict[str, Any]] = {}
    for (_, type_name, status), (n, last) in finished.items():
        if status in FAILED:
            row = by_type.setdefault(type_name, {"type_name": type_name, "failed": 0, "last": last})
            row["failed"] += n
            row["last"] = max(row["last"], last)
    return sorted(by_type.values(), key=lambda row: (-row["failed"], row["type_name"]))[:limit]


def queue_lag(now: datetime) -> list[dict[str, Any]]:
    """Per queue: due ready or retrying procedures and the age of the oldest (how far workers lag)."""
    rows = (ProcedureRun.objects.filter(status__in=CLAIMABLE, run_at__lte=now).order_by()
            .values("queue").annotate(due=Count("id"), oldest=Min("run_at")).order_by("oldest"))
    return [{**row, "lag": duration((now - row["oldest"]).total_seconds())} for row in rows]


def workers_panel(since: datetime) -> dict[str, Any]:
    """Live workers (judged on the database clock) and what each holds now; gone ones seen since ``since``.

    Leases held by an owner that is not a live worker (a worker gone without a
    word, whose leases have not expired yet; ``drain()``; a worker from before
    the registry) are listed apart, so an operator sees who they wait for.
    """
    unstopped = list(Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=since).with_state()
                     .order_by("worker_id", "id").only("id", "worker_id", "hostname", "pid", "queues", "concurrency",
                                                       "started_at", "last_seen_at", "alive_until"))
    alive = [w for w in unstopped if w.state == WorkerState.ALIVE]
    held = dict(ProcedureRun.objects.filter(status__in=LEASED).order_by()
                .values_list("lease_owner").annotate(n=Count("id")))
    for w in alive:
        w.running = held.pop(w.worker_id, 0)
    return {
        "alive": alive,
        "gone": len(unstopped) - len(alive),
        "other_holders": sorted(held.items()),
    }


def schedules_panel(now: datetime, limit: int = 10) -> dict[str, Any]:
    """Schedules that need a look: the paused ones, those with failures (most first), the largest drift.

    A schedule more than two ticks behind (nothing ticks it) shows its lag now, ``now - next_tick_at``, which
    grows until it is ticked, instead of the drift its last tick recorded.
    """
    light = ("id", "name", "procedure", "enabled", "disabled_reason", "failures", "runs", "last_drift_ms",
             "last_tick_at", "updated_at", "next_tick_at", "period", "cron", "timezone")
    drifted = Schedule.objects.filter(last_drift_ms__isnull=False).only(*light).order_by("-last_drift_ms", "name")
    late = Schedule.objects.filter(enabled=True, next_tick_at__lt=now).only(*light).order_by("next_tick_at")
    candidates = {s.pk: s for s in [*drifted[:limit], *late[:limit]]}
    for s in candidates.values():
        lag = s.overdue(now)
        s.overdue_lag = lag
        s.drift_ms = int(lag.total_seconds() * 1000) if lag is not None else s.last_drift_ms
    drift = sorted((s for s in candidates.values() if s.drift_ms is not None),
                   key=lambda s: (-s.drift_ms, s.name))[:limit]
    for s in drift:
        ms = s.drift_ms
        s.drift = f"{ms:,}" + (f" ({duration(ms / 1000)})" if ms >= 1000 else "")
    counts = Schedule.objects.aggregate(total=Count("id"), paused=Count("id", filter=Q(enabled=False)),
                                        failing=Count("id", filter=Q(failures__gt=0)))
    return {
        **counts,
        "paused_list": list(Schedule.objects.filter(enabled=False).only(*light).order_by("-updated_at")[:limit]),
        "failing_list": list(Schedule.objects.filter(failures__gt=0).only(*light)
                             .order_by("-failures", "name")[:limit]),
        "drift_list": drift,
    }


#: (name, window, bucket seconds, a label every n buckets, accessible name) of the finished-per-bucket charts.
DAY_BUCKET = 900
THROUGHPUT = (("hour", timedelta(hours=1), 60, 10, "Procedures finished per minute over the last hour"),
              ("day", timedelta(hours=24), DAY_BUCKET, 12, "Procedures finished per 15 minutes over the last 24 hours"))


def charts_panel(now: datetime, day: FinishedCounts | None = None,
                 mark: tuple[datetime, datetime] | None = UNREAD) -> dict[str, Any]:
    """The pictures: finished per minute (hour) and per 15 minutes (day), duration percentiles, queue depth.

    ``day``: the finished counts per 15 minutes from :func:`day_counts`, and ``mark``: the counted span
    (``counted_span()``), if already read.
    """
    out: dict[str, Any] = {}
    mark = counted_span() if mark is UNREAD else mark
    for name, window, seconds, every, label in THROUGHPUT:
        if name == "day":
            counts = day_counts(now, mark) if day is None else day
        else:
            counts = finished_counts(window_start(now, window, seconds), _end(now, seconds), seconds, mark)
        buckets = fill_buckets(per_bucket(counts), now, window, seconds)
        out[name] = {"svg": throughput_chart(buckets, seconds, label, every, f"chart-{name}"), "label": label,
                     "busy": [b for b in buckets if b.done or b.failed],
                     "done": sum(b.done for b in buckets), "failed": sum(b.failed for b in buckets)}
    percentiles = duration_percentiles(now - WINDOW, now)
    out["percentiles"] = {"rows": percentiles, "svg": percentiles_chart(percentiles, "chart-percentiles")
                          if percentiles else ""}
    depth = queue_depth(now)
    out["depth"] = {"rows": depth, "svg": depth_chart(depth, "chart-depth") if depth else ""}
    return out


def window_since(now: datetime) -> datetime:
    """The start of the dashboard's last 24 hours: a whole minute, as the counts the workers keep."""
    return now.replace(second=0, microsecond=0) - WINDOW


def _end(now: datetime, seconds: int) -> datetime:
    return bucket_start(now, seconds) + timedelta(seconds=seconds)


def day_counts(now: datetime, mark: tuple[datetime, datetime] | None) -> FinishedCounts:
    """What finished since :func:`window_since`, per 15 minutes (the day chart's buckets), type and status;
    ``mark``: what the workers have counted (``counted_span()``)."""
    return finished_counts(window_since(now), _end(now, DAY_BUCKET), DAY_BUCKET, mark)


def dashboard_context(now: datetime) -> dict[str, Any]:
    since, mark = window_since(now), counted_span()
    day = day_counts(now, mark)
    lag = queue_lag(now)
    oldest = min((row["oldest"] for row in lag), default=None)
    return {
        "since": since,
        "status_counts": status_counts(since, day),
        "finished_statuses": sorted(status.value for status in FINAL),
        "unfinished_counts": unfinished_counts(),
        "failing_types": failing_types(day),
        "queue_lag": lag,
        "oldest_due": oldest,
        "oldest_due_age": None if oldest is None else duration((now - oldest).total_seconds()),
        "workers": workers_panel(since),
        "unknown_types": unknown_types(registry.type_names()),
        "schedules": schedules_panel(now),
        "charts": charts_panel(now, day, mark),
    }
