"""The operator's dashboard: the last 24 hours by status, failing types, queue lag, live workers, schedules."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q

from django_procedures import registry
from django_procedures.admin.activity import duration_percentiles, finished_per_bucket, queue_depth
from django_procedures.admin.chart_layout import bucket_start, fill_buckets, window_start
from django_procedures.admin.charts import depth_chart, percentiles_chart, throughput_chart
from django_procedures.admin.why import duration
from django_procedures.models import ProcedureRun, Schedule, Worker
from django_procedures.policy.status import CLAIMABLE, LEASED, RunStatus
from django_procedures.policy.workers import WorkerState
from django_procedures.store.claim import unknown_types

WINDOW = timedelta(hours=24)
FAILED = (RunStatus.FAILED, RunStatus.ROLLED_BACK)
UNFINISHED = (RunStatus.READY, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.RETRYING, RunStatus.ROLLING_BACK)


def status_counts(since: datetime) -> list[tuple[str, int]]:
    """Procedures created since ``since``, by status (every status listed, zeros included)."""
    found = dict(ProcedureRun.objects.filter(created_at__gte=since).order_by()
                 .values_list("status").annotate(n=Count("id")))
    return [(status.value, found.get(status.value, 0)) for status in RunStatus]


def unfinished_counts() -> list[tuple[str, int]]:
    """Unfinished procedures of any age, by status (each count read from the status index)."""
    found = dict(ProcedureRun.objects.filter(status__in=UNFINISHED).order_by()
                 .values_list("status").annotate(n=Count("id")))
    return [(status.value, found.get(status.value, 0)) for status in UNFINISHED]


def failing_types(since: datetime, limit: int = 10) -> list[dict[str, Any]]:
    """Types with the most procedures that failed (or rolled back) since ``since``, most first."""
    return list(ProcedureRun.objects.filter(status__in=FAILED, created_at__gte=since).order_by()
                .values("type_name").annotate(failed=Count("id"), last=Max("finished_at"))
                .order_by("-failed", "type_name")[:limit])


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
        w.running = held.pop(w.worker_id, 0)  # type: ignore[attr-defined]
    return {
        "alive": alive,
        "gone": len(unstopped) - len(alive),
        "other_holders": sorted(held.items()),
    }


def schedules_panel(limit: int = 10) -> dict[str, Any]:
    """Schedules that need a look: the paused ones, those with failures (most first), the largest drift."""
    light = ("id", "name", "procedure", "enabled", "disabled_reason", "failures", "runs", "last_drift_ms",
             "last_tick_at", "updated_at")
    drift = list(Schedule.objects.filter(last_drift_ms__isnull=False).only(*light)
                 .order_by("-last_drift_ms", "name")[:limit])
    for s in drift:
        ms = s.last_drift_ms or 0
        s.drift = f"{ms:,}" + (f" ({duration(ms / 1000)})" if ms >= 1000 else "")  # type: ignore[attr-defined]
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
THROUGHPUT = (("hour", timedelta(hours=1), 60, 10, "Procedures finished per minute over the last hour"),
              ("day", timedelta(hours=24), 900, 12, "Procedures finished per 15 minutes over the last 24 hours"))


def charts_panel(now: datetime) -> dict[str, Any]:
    """The pictures: finished per minute (hour) and per 15 minutes (day), duration percentiles, queue depth."""
    out: dict[str, Any] = {}
    for name, window, seconds, every, label in THROUGHPUT:
        until = bucket_start(now, seconds) + timedelta(seconds=seconds)
        buckets = fill_buckets(finished_per_bucket(window_start(now, window, seconds), until, seconds),
                               now, window, seconds)
        out[name] = {"svg": throughput_chart(buckets, seconds, label, every, f"chart-{name}"), "label": label,
                     "busy": [b for b in buckets if b.done or b.failed],
                     "done": sum(b.done for b in buckets), "failed": sum(b.failed for b in buckets)}
    percentiles = duration_percentiles(now - WINDOW, now)
    out["percentiles"] = {"rows": percentiles, "svg": percentiles_chart(percentiles, "chart-percentiles")
                          if percentiles else ""}
    depth = queue_depth(now)
    out["depth"] = {"rows": depth, "svg": depth_chart(depth, "chart-depth") if depth else ""}
    return out


def dashboard_context(now: datetime) -> dict[str, Any]:
    since = now - WINDOW
    lag = queue_lag(now)
    oldest = min((row["oldest"] for row in lag), default=None)
    return {
        "since": since,
        "status_counts": status_counts(since),
        "unfinished_counts": unfinished_counts(),
        "failing_types": failing_types(since),
        "queue_lag": lag,
        "oldest_due": oldest,
        "oldest_due_age": None if oldest is None else duration((now - oldest).total_seconds()),
        "workers": workers_panel(since),
        "unknown_types": unknown_types(registry.type_names()),
        "schedules": schedules_panel(),
        "charts": charts_panel(now),
    }
