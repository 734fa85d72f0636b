"""One scheduling pass: lock due schedules, apply the tick decision, start runs, enforce max_run_time."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction

from django_procedures import clock
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.schedule import TickDecision, decide_tick
from django_procedures.store import broken, overdue
from django_procedures.store.db import is_conflict, is_disconnect, is_postgresql
from django_procedures.store.schedules import run_rows
from django_procedures.store.submit import insert, json_rows

logger = logging.getLogger("django_procedures.schedules")


@dataclass
class TickReport:
    """What one ``tick()`` did."""

    schedules: int = 0
    started: int = 0
    pending: int = 0
    skipped: int = 0
    overlaps: int = 0
    timed_out: int = 0
    errors: list[str] = field(default_factory=list)


def next_tick_due() -> datetime | None:
    """The earliest next tick of an enabled schedule (``procedures_worker --burst --with-scheduler`` waits for it).

    A schedule whose last pass failed counts from its next try (``store.broken``).
    """
    return broken.next_due()


def tick(now: datetime | None = None, *, batch_size: int = 500) -> TickReport:
    """Run one scheduling pass at ``now`` (the injectable clock) over every due, enabled schedule.

    Due schedules are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
    tickers (threads, processes, two beats) share the work, and each run
    carries its schedule and tick time under a unique constraint, so a tick
    never starts twice. Each batch is one transaction with one INSERT of its
    runs and one UPDATE of its schedules.

    A schedule this process cannot tick (its cadence raises, its procedure type
    is not registered, its values cannot be written) gets the error recorded on
    its row and is passed over; the others tick as usual (``store.broken``).
    Runs past their schedule's ``max_run_time`` are cancelled first
    (``store.overdue``; every worker's maintenance pass does it too).
    """
    report = TickReport()
    with clock.frozen_at(now):
        moment = clock.now()
        report.timed_out = len(overdue.cancel_overdue(moment))
        stuck: set[int] = set()  # ticked in this pass yet still due: passed over, so the pass ends
        while True:
            with transaction.atomic():
                due = list(Schedule._writer.filter(broken.healthy_or_retry_due(moment), enabled=True,
                                                   next_tick_at__lte=moment).exclude(id__in=stuck)
                           .select_for_update(skip_locked=True).order_by("id")[:batch_size])
                stuck.update(_tick_batch(due, moment, report))
            if len(due) < batch_size:
                return report


@dataclass
class _Planned:
    schedule: Schedule
    decision: TickDecision
    rows: list[ProcedureRun]


def _tick_batch(due: list[Schedule], now: datetime, report: TickReport) -> list[int]:
    """Decide every locked schedule, insert all their runs, then write all their rows back.

    A schedule whose decision raises is recorded as broken and left out; if the
    batch's writes are refused, each schedule is written alone, so only the one
    at fault is recorded. Returns the schedules still due after this (an error,
    a ``fixed_delay`` run in progress).
    """
    planned, stuck = [], []
    for s in due:
        try:
            decision = decide_tick(s.settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                                   pending=s.pending(), next_tick=s.cadence())
            rows = run_rows(s, decision.start, now) if decision.start else []
        except Exception as error:  # this schedule's definition, not the pass: the others go on
            _record(s, error, now, report)
            stuck.append(s.id)
            continue
        planned.append(_Planned(s, decision, rows))
    before = [{f: getattr(p.schedule, f) for f in TICKED} for p in planned]
    try:
        with transaction.atomic():  # a savepoint: a refused write must not end the pass's transaction
            stuck += _write(planned, now, report)
    except Exception as error:
        if not _refused(error):
            raise
        for p, values in zip(planned, before, strict=True):
            _restore(p.schedule, values)  # as read: the refused batch changed nothing
        for p, values in zip(planned, before, strict=True):  # the one at fault is recorded; the rest tick
            try:
                with transaction.atomic():
                    stuck += _write([p], now, report)
            except Exception as error:
                if not _refused(error):
                    raise
                _restore(p.schedule, values)
                _record(p.schedule, error, now, report)
                stuck.append(p.schedule.id)
    return stuck


def _refused(error: Exception) -> bool:
    """The database (or its driver) refused a value: one schedule's fault, not a lost connection or a deadlock."""
    if isinstance(error, DatabaseError):
        return not (is_disconnect(error) or is_conflict(error))
    return isinstance(error, OverflowError | ValueError)


def _restore(schedule: Schedule, values: dict[str, object]) -> None:
    for name, value in values.items():
        setattr(schedule, name, value)


def _record(schedule: Schedule, error: Exception, now: datetime, report: TickReport) -> None:
    """Record ``error`` on ``schedule``; if even that is refused, log it (the schedule is passed over)."""
    report.errors.append(f"{schedule.name}: {broken.describe(schedule, error)}")
    try:
        with transaction.atomic():
            broken.record(schedule, error, now)
    except Exception as failure:
        if not _refused(failure):
            raise
        logger.error("schedule %r cannot tick (%s), and the error cannot be recorded on it: %s", schedule.name,
                     broken.describe(schedule, error), failure)


def _write(planned: list[_Planned], now: datetime, report: TickReport) -> list[int]:
    """Insert the runs of ``planned`` and write their schedules back; counts go to ``report`` once written."""
    # A tick another ticker already started is skipped by the unique constraint and starts nothing here.
    inserted = set(insert([row for p in planned for row in p.rows], skip_conflicts=True))
    stuck, counts = [], TickReport()
    for p in planned:
        s, decision = p.schedule, p.decision
        started = sum(row.id in inserted for row in p.rows)
        counts.schedules += 1
        counts.started += started
        counts.pending += len(decision.pending)
        counts.skipped += decision.skips
        counts.overlaps += decision.overlaps
        s.active_runs += started
        s.pending_ticks = [t.isoformat() for t in decision.pending]
        s.skips += decision.skips
        s.overlaps += decision.overlaps
        s.next_tick_at = decision.next_tick_at
        s.last_tick_at = now
        s.last_error, s.last_error_at = "", None
        if decision.due:
            s.last_drift_ms = int(decision.drift / timedelta(milliseconds=1))
        if s.next_tick_at is not None and s.next_tick_at <= now:
            stuck.append(s.id)
    write_ticked([p.schedule for p in planned])
    for name in ("schedules", "started", "pending", "skipped", "overlaps"):
        setattr(report, name, getattr(report, name) + getattr(counts, name))
    return stuck


#: What a tick writes on its schedule's row.
TICKED = ("active_runs", "pending_ticks", "skips", "overlaps", "next_tick_at", "last_tick_at", "last_drift_ms",
          "last_error", "last_error_at")


def write_ticked(schedules: list[Schedule]) -> None:
    """Write the ``TICKED`` fields of ``schedules`` (locked by the caller): one UPDATE on PostgreSQL."""
    if not schedules:
        return
    if not is_postgresql():
        Schedule._writer.bulk_update(schedules, TICKED)
        return
    fields: list[Any] = [Schedule._meta.pk, *(Schedule._meta.get_field(name) for name in TICKED)]  # columns
    select, params = json_rows(fields, schedules)
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in fields]
    assignments = ", ".join(f"{c} = v.{c}" for c in columns[1:])
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(Schedule._meta.db_table)} AS s SET {assignments} "
                       f"FROM ({select}) AS v({', '.join(columns)}) WHERE s.{columns[0]} = v.{columns[0]}", params)
