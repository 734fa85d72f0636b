"""Counting finished procedures per minute, type and status into ``FinishedCount``, as they finish.

A worker's maintenance calls :func:`roll_up` about once a minute. Each call
counts the whole minutes after ``Rollup.until`` that ended at least ``SETTLE``
ago from ``procedures_finished_idx``, writes them and moves ``until`` past
them, in one transaction; the mark's row lock makes it one worker of a fleet at
a time, the others skip rather than wait. Counting begins at the first call
(``Rollup.began``), and after the workers were away for more than
``CATCH_UP`` it begins again: it never reads a long stretch of history on a
worker's main thread. The dashboard counts the minutes outside
``[began, until)`` from the procedures themselves. A minute counted again
replaces its counts.

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
#: Most one call counts: further behind, counting begins again at the last settled minute.
CATCH_UP = timedelta(minutes=10)
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


def counted_span() -> tuple[datetime, datetime] | None:
    """``(began, until)``: every finish in between is in ``FinishedCount``; None before the first count."""
    return Rollup.objects.filter(name=FINISHED).values_list("began", "until").first()


def begin_counting(at: datetime) -> None:
    """Count from the minute of ``at`` on (a benchmark's seed begins a day back), if counting has not begun."""
    minute = whole_minute(at)
    Rollup._writer.bulk_create([Rollup(name=FINISHED, began=minute, until=minute)], ignore_conflicts=True)


def roll_up(now: datetime, catch_up: timedelta = CATCH_UP) -> bool | None:
    """Count the settled minutes not counted yet (up to ``catch_up`` of them) and delete counts older than ``KEEP``.

    Returns True if it counted (or began again after a gap), False if nothing
    had settled since the last call (or counting began with this one), None if
    another worker is counting now.
    """
    settled = whole_minute(now - SETTLE)
    with transaction.atomic():
        begin_counting(settled)
        mark = Rollup._writer.select_for_update(skip_locked=True).filter(name=FINISHED).first()
        if mark is None:
            return None
        FinishedCount._writer.filter(minute__lt=now - KEEP).delete()
        if settled - mark.until > catch_up:  # the workers were away: the gap is read from the rows
            Rollup._writer.filter(name=FINISHED).update(began=settled, until=settled)
            return True
        if settled <= mark.until:
            return False
        FinishedCount._writer.bulk_create(
            [FinishedCount(minute=minute, type_name=type_name, status=status, count=n, last_finished_at=last)
             for minute, type_name, status, n, last in finished_rows(mark.until, settled, MINUTE)],
            update_conflicts=True, unique_fields=["minute", "type_name", "status"],
            update_fields=["count", "last_finished_at"])
        Rollup._writer.filter(name=FINISHED).update(until=settled)
        return True


def finished_rows(start: datetime, end: datetime, seconds: int) -> Any:
    """``(bucket start, type, status, how many, the latest finish)`` of the procedures finished in ``[start, end)``
    with a final status, in ``seconds``-long buckets, counted from the rows (``procedures_finished_idx``)."""
    return (ProcedureRun.objects.filter(finished_at__gte=start, finished_at__lt=end, status__in=sorted(FINAL))
            .annotate(bucket=DateBin(seconds, F("finished_at"))).order_by()
            .values_list("bucket", "type_name", "status").annotate(n=Count("id"), last=Max("finished_at")))
