"""The dashboard's chart data: finished procedures per time bucket, duration percentiles, queue depth.

Finished procedures are read from the per-minute counts the workers keep
(``FinishedCount``) and, for the minutes not counted, by a time range on
``finished_at`` (``procedures_finished_idx``); the percentiles from a bounded
sample of that index; the depth from the unfinished statuses
(``procedures_status_idx``). So their cost follows the minutes, the sample and
the unfinished rows, not the size of the table or the day's volume.
PostgreSQL buckets with ``date_bin`` and computes ``percentile_cont``; SQLite, the
embedded database, buckets with ``strftime`` and computes the percentiles in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, F, Max, Q, Sum

from django_procedures.models import FinishedCount, ProcedureRun
from django_procedures.policy.status import CLAIMABLE, LEASED, RunStatus
from django_procedures.store.activity import DateBin, counted_span, finished_rows

__all__ = ["DEPTH_PARTS", "DateBin", "duration_percentiles", "finished_counts", "finished_per_bucket", "per_bucket",
           "percentile", "queue_depth"]

FAILED = (RunStatus.FAILED, RunStatus.ROLLED_BACK)
#: The percentiles are computed from at most this many procedures, the latest done in the window.
PERCENTILE_SAMPLE = 20_000


#: finished_counts reads the counted span itself unless given one.
UNREAD: Any = object()


def finished_counts(since: datetime, until: datetime, seconds: int,
                    counted: tuple[datetime, datetime] | None = UNREAD
                    ) -> dict[tuple[datetime, str, str], list[Any]]:
    """``{(bucket start, type, status): [how many, the latest finish]}`` of the procedures finished in
    ``[since, until)`` with a final status, in ``seconds``-long buckets.

    The minutes the workers have counted (``FinishedCount``, the span
    ``counted_span()`` gives) are read from the counts, the others from the
    procedures themselves; ``since`` falls on a whole minute. So a day with a
    million finishes costs its counted minutes, not a million index entries.
    ``counted``: ``counted_span()``, if already read.
    """
    counted = counted_span() if counted is UNREAD else counted
    found: dict[tuple[datetime, str, str], list[Any]] = {}

    def add(rows: Any) -> None:
        for bucket, type_name, status, n, last in rows:
            counts = found.setdefault((bucket, type_name, status), [0, last])
            counts[0] += n
            counts[1] = max(counts[1], last)

    began, ended = (since, since) if counted is None else (min(max(counted[0], since), until),
                                                           min(max(counted[1], since), until))
    if began > since:
        add(finished_rows(since, began, seconds))
    if ended > began:
        add(FinishedCount.objects.filter(minute__gte=began, minute__lt=ended)
            .annotate(bucket=DateBin(seconds, F("minute"))).order_by().values_list("bucket", "type_name", "status")
            .annotate(n=Sum("count"), last=Max("last_finished_at")))
    if until > ended:
        add(finished_rows(ended, until, seconds))
    return found


def per_bucket(counts: dict[tuple[datetime, str, str], list[Any]]) -> dict[datetime, tuple[int, int]]:
    """``{bucket start: (done, failed or rolled back)}`` of :func:`finished_counts` (cancelled ones left out)."""
    out: dict[datetime, tuple[int, int]] = {}
    for (bucket, _, status), (n, _) in counts.items():
        done, failed = out.get(bucket, (0, 0))
        if status == RunStatus.DONE:
            out[bucket] = (done + n, failed)
        elif status in FAILED:
            out[bucket] = (done, failed + n)
    return out


def finished_per_bucket(since: datetime, until: datetime, seconds: int) -> dict[datetime, tuple[int, int]]:
    """``{bucket start: (done, failed or rolled back)}`` for procedures finished in ``[since, until)``."""
    return per_bucket(finished_counts(since, until, seconds))


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """``percentile_cont``: the value at ``fraction`` of a sorted sequence, interpolated between neighbours."""
    if not ordered:
        raise ValueError("a percentile of no values is undefined; pass at least one")
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def duration_percentiles(since: datetime, until: datetime, limit: int = 12,
                         sample: int | None = None) -> list[dict[str, Any]]:
    """Per type, the procedures done in ``[since, until)``: how many, and p50 / p95 of start-to-finish seconds.

    The ``limit`` busiest types, busiest first. Computed from the latest ``sample``
    procedures done in the window (``PERCENTILE_SAMPLE``), so a busy day costs no
    more than a quiet one: one range of ``procedures_finished_idx``, newest first.
    """
    sample = PERCENTILE_SAMPLE if sample is None else sample
    latest = (ProcedureRun.objects.filter(finished_at__gte=since, finished_at__lt=until, status=RunStatus.DONE,
                                          started_at__isnull=False)
              .order_by("-finished_at").values_list("type_name", "started_at", "finished_at")[:sample])
    if connection.vendor == "postgresql":
        # Aggregated over the sliced rows as a derived table: written as "id IN (the latest ids)", the planner
        # may hash-join the whole table instead.
        inner, params = latest.query.sql_with_params()
        with connection.cursor() as cursor:
            took = "EXTRACT(EPOCH FROM (latest.finished_at - latest.started_at))"
            cursor.execute(
                f"SELECT latest.type_name, count(*) AS n, percentile_cont(0.5) WITHIN GROUP (ORDER BY {took}),"
                f" percentile_cont(0.95) WITHIN GROUP (ORDER BY {took})"
                f" FROM ({inner}) AS latest GROUP BY latest.type_name ORDER BY n DESC, latest.type_name LIMIT %s",
                [*params, limit])
            return [{"type_name": name, "n": n, "p50": p50, "p95": p95} for name, n, p50, p95 in cursor.fetchall()]
    durations: dict[str, list[float]] = {}
    for type_name, started, finished in latest:
        durations.setdefault(type_name, []).append((finished - started).total_seconds())
    busiest = sorted(durations.items(), key=lambda item: (-len(item[1]), item[0]))[:limit]
    return [{"type_name": name, "n": len(values), "p50": percentile(sorted(values), 0.5),
             "p95": percentile(sorted(values), 0.95)} for name, values in busiest]


#: The parts of a queue's depth, in the order the chart stacks them.
DEPTH_PARTS = ("due", "later", "running", "waiting")


def queue_depth(now: datetime, limit: int = 12) -> list[dict[str, Any]]:
    """Per queue, its unfinished procedures: ``due`` (ready or retrying, due now), ``later`` (due after ``now``),
    ``running`` (leased, or rolling back) and ``waiting`` (for children); the ``limit`` deepest queues first."""
    rows = (ProcedureRun.objects.filter(status__in=(*CLAIMABLE, *LEASED, RunStatus.WAITING)).order_by()
            .values("queue", "status").annotate(n=Count("id"), due=Count("id", filter=Q(run_at__lte=now))))
    depth: dict[str, dict[str, int]] = {}
    for row in rows:
        parts = depth.setdefault(row["queue"], dict.fromkeys(DEPTH_PARTS, 0))
        if row["status"] in CLAIMABLE:
            parts["due"] += row["due"]
            parts["later"] += row["n"] - row["due"]
        elif row["status"] == RunStatus.WAITING:
            parts["waiting"] += row["n"]
        else:
            parts["running"] += row["n"]
    ordered = sorted(depth.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return [{"queue": queue, **parts, "total": sum(parts.values())} for queue, parts in ordered[:limit]]
