"""Counting finished procedures per minute, type and status into ``FinishedCount``, as they finish.

A worker's maintenance calls :func:`roll_up` about once a minute. Each call
counts the whole minutes after ``Rollup.until`` that ended at least ``SETTLE``
ago (at most ``SPAN`` of them) from ``procedures_finished_idx``, writes them,
and moves ``until`` past them, in one transaction. The mark's row lock makes it
one worker of a fleet at a time; the others skip, not wait. A minute written
again (a mark lost or set back) is counted afresh and replaces its old counts.

A finish is written moments after the time it records, so a minute is settled
well before ``SETTLE`` has passed; a procedure whose finish is written later
than that (a test that drains with a clock frozen in the past) is not counted.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, DateTimeField, F, Func, Max

from django_procedures.models import FinishedCount, ProcedureRun, Rollup
from django_procedures.policy.status import FINAL

#: The name of the finished counts' mark in ``Rollup``.
FINISHED = "finished"
#: A minute is counted this long after it ends.
SETTLE = timedelta(seconds=60)
#: Where the first count starts: the dashboard's window, and a little more.
START = timedelta(hours=25)
#: Most one call counts: a worker catching up on a day does it an hour at a time, a moment apart.
SPAN = timedelta(hours=1)
#: Counts older than this are deleted (the dashboard reads the last 24 hours).
KEEP = timedelta(days=2)
MINUTE = 60


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

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"datetime((CAST(strftime('%%s', {sql}) AS INTEGER) / %s) * %s, 'unixepoch')",
                [*params, self.seconds, self.seconds])


def whole_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def counted_until() -> datetime | None:
    """Every finish before this time is in ``FinishedCount``; None until the first count."""
    return Rollup.objects.filter(name=FINISHED).values_list("until", flat=True).first()


def roll_up(now: datetime) -> bool | None:
    """Count the settled minutes not counted yet (at most ``SPAN``) and delete counts older than ``KEEP``.

    Returns True if settled minutes remain (call again soon), False if it is
    up to date, None if another worker is counting now.
    """
    settled = whole_minute(now - SETTLE)
    with transaction.atomic():
        Rollup._writer.bulk_create([Rollup(name=FINISHED, until=whole_minute(now - START))], ignore_conflicts=True)
        mark = Rollup._writer.select_for_update(skip_locked=True).filter(name=FINISHED).first()
        if mark is None:
            return None
        start = min(max(mark.until, whole_minute(now - START)), settled)  # nothing older than the dashboard reads
        end = min(settled, start + SPAN)
        if end > start:
            FinishedCount._writer.bulk_create(
                [FinishedCount(minute=row["minute"], type_name=row["type_name"], status=row["status"],
                               count=row["n"], last_finished_at=row["last"]) for row in _count(start, end)],
                update_conflicts=True, unique_fields=["minute", "type_name", "status"],
                update_fields=["count", "last_finished_at"])
            Rollup._writer.filter(name=FINISHED).update(until=end)
        FinishedCount._writer.filter(minute__lt=now - KEEP).delete()
        return end < settled


def _count(start: datetime, end: datetime) -> Any:
    return (ProcedureRun.objects.filter(finished_at__gte=start, finished_at__lt=end, status__in=sorted(FINAL))
            .annotate(minute=DateBin(MINUTE, F("finished_at"))).order_by()
            .values("minute", "type_name", "status").annotate(n=Count("id"), last=Max("finished_at")))
