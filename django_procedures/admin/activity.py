"""The dashboard's chart data: finished procedures per time bucket, duration percentiles, queue depth.

Each is one query bounded by a time range on ``finished_at`` (read from
``procedures_finished_idx``) or by the unfinished statuses (``procedures_status_idx``),
so its cost follows the rows in the window, not the size of the table.
PostgreSQL buckets with ``date_bin`` and computes ``percentile_cont``; SQLite, the
embedded database, buckets with ``strftime`` and computes the percentiles in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Aggregate, Count, DateTimeField, F, FloatField, Func, Q

from django_procedures.models import ProcedureRun
from django_procedures.policy.status import CLAIMABLE, LEASED, RunStatus

FAILED = (RunStatus.FAILED, RunStatus.ROLLED_BACK)
#: Most durations per type the SQLite fallback reads to compute percentiles (it sorts them in Python).
SQLITE_SAMPLE = 50_000


class DateBin(Func):
    """The start of the ``seconds``-long bucket a time falls in, buckets aligned on the Unix epoch."""

    output_field = DateTimeField()

    def __init__(self, seconds: int, expression: Any) -> None:
        if seconds <= 0 or int(seconds) != seconds:
            raise ValueError(f"a bucket must be a positive whole number of seconds; got {seconds!r}")
        self.seconds = int(seconds)
        super().__init__(expression)

    def as_postgresql(self, compiler: Any, conn: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"date_bin(make_interval(secs => %s), {sql}, TIMESTAMPTZ '1970-01-01 00:00:00+00')",
                [self.seconds, *params])

    def as_sqlite(self, compiler: Any, conn: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"datetime((CAST(strftime('%%s', {sql}) AS INTEGER) / %s) * %s, 'unixepoch')",
                [*params, self.seconds, self.seconds])


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``."""

    function = "percentile_cont"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        self.fraction = float(fraction)
        super().__init__(expression)

    def as_postgresql(self, compiler: Any, conn: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"percentile_cont(%s) WITHIN GROUP (ORDER BY {sql})", [self.fraction, *params]


class EpochSeconds(Func):
    """``finished_at - started_at`` in seconds (PostgreSQL)."""

    output_field = FloatField()
    template = "EXTRACT(EPOCH FROM (%(expressions)s))"
    arg_joiner = " - "


def finished_per_bucket(since: datetime, until: datetime, seconds: int) -> dict[datetime, tuple[int, int]]:
    """``{bucket start: (done, failed or rolled back)}`` for procedures finished in ``[since, until)``."""
    rows = (ProcedureRun.objects.filter(finished_at__gte=since, finished_at__lt=until,
                                        status__in=(RunStatus.DONE, *FAILED))
            .annotate(bucket=DateBin(seconds, F("finished_at"))).order_by().values("bucket")
            .annotate(done=Count("status", filter=Q(status=RunStatus.DONE)),
                      failed=Count("status", filter=Q(status__in=FAILED)))
            .values_list("bucket", "done", "failed"))
    return {bucket: (done, failed) for bucket, done, failed in rows}


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """``percentile_cont``: the value at ``fraction`` of a sorted sequence, interpolated between neighbours."""
    if not ordered:
        raise ValueError("a percentile of no values is undefined; pass at least one")
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def duration_percentiles(since: datetime, until: datetime, limit: int = 12) -> list[dict[str, Any]]:
    """Per type, the procedures done in ``[since, until)``: how many, and p50 / p95 of start-to-finish seconds.

    The ``limit`` busiest types, busiest first.
    """
    done = ProcedureRun.objects.filter(finished_at__gte=since, finished_at__lt=until, status=RunStatus.DONE,
                                       started_at__isnull=False).order_by()
    if connection.vendor == "postgresql":
        took = EpochSeconds(F("finished_at"), F("started_at"))
        return list(done.values("type_name").annotate(n=Count("*"), p50=PercentileCont(took, 0.5),
                                                      p95=PercentileCont(took, 0.95))
                    .order_by("-n", "type_name")[:limit])
    busiest = list(done.values("type_name").annotate(n=Count("id")).order_by("-n", "type_name")[:limit])
    out = []
    for row in busiest:
        pairs = done.filter(type_name=row["type_name"]).values_list("started_at", "finished_at")[:SQLITE_SAMPLE]
        ordered = sorted((finished - started).total_seconds() for started, finished in pairs)
        out.append({**row, "p50": percentile(ordered, 0.5), "p95": percentile(ordered, 0.95)})
    return out


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
