"""One scheduling pass: lock due schedules, apply the tick decision, start runs, enforce max_run_time."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Min

from django_procedures import clock
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.schedule import TickDecision, decide_tick
from django_procedures.policy.status import FINAL
from django_procedures.store import operations
from django_procedures.store.db import is_postgresql
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
    """The earliest next tick of an enabled schedule (``procedures_worker --burst --with-scheduler`` waits for it)."""
    return Schedule._writer.filter(enabled=True).aggregate(at=Min("next_tick_at"))["at"]


def tick(now: datetime | None = None, *, batch_size: int = 500) -> TickReport:
    """Run one scheduling pass at ``now`` (the injectable clock) over every due, enabled schedule.

    Due schedules are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
    tickers (threads, processes, two beats) share the work, and each run
    carries its schedule and tick time under a unique constraint, so a tick
    never starts twice. Each batch is one transaction with one INSERT of its
    runs and one UPDATE of its schedules.
    """
    report = TickReport()
    with clock.frozen_at(now):
        moment = clock.now()
        _cancel_overdue(moment, report)
        stuck: set[int] = set()  # ticked in this pass yet still due: passed over, so the pass ends
        while True:
            with transaction.atomic():
                due = list(Schedule._writer.filter(enabled=True, next_tick_at__lte=moment).exclude(id__in=stuck)
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

    Returns the schedules still due after this (an error, a ``fixed_delay`` run in progress).
    """
    planned, stuck = [], []
    for s in due:
        try:
            decision = decide_tick(s.settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                                   pending=s.pending(), next_tick=s.cadence())
            rows = run_rows(s, decision.start, now) if decision.start else []
        except (UnknownProcedureType, ValueError) as error:
            report.errors.append(f"{s.name}: {error}")
            logger.error("schedule %r cannot tick: %s", s.name, error)
            stuck.append(s.id)
            continue
        planned.append(_Planned(s, decision, rows))
    # A tick another ticker already started is skipped by the unique constraint and starts nothing here.
    inserted = set(insert([row for p in planned for row in p.rows], skip_conflicts=True))
    for p in planned:
        s, decision = p.schedule, p.decision
        started = sum(row.id in inserted for row in p.rows)
        report.schedules += 1
        report.started += started
        report.pending += len(decision.pending)
        report.skipped += decision.skips
        report.overlaps += decision.overlaps
        s.active_runs += started
        s.pending_ticks = [t.isoformat() for t in decision.pending]
        s.skips += decision.skips
        s.overlaps += decision.overlaps
        s.next_tick_at = decision.next_tick_at
        s.last_tick_at = now
        if decision.due:
            s.last_drift_ms = int(decision.drift / timedelta(milliseconds=1))
        if s.next_tick_at is not None and s.next_tick_at <= now:
            stuck.append(s.id)
    write_ticked([p.schedule for p in planned])
    return stuck


def _cancel_overdue(now: datetime, report: TickReport) -> None:
    """Runs past their schedule's ``max_run_time`` are cancelled: a failure that frees the slot."""
    deadline = ExpressionWrapper(F("created_at") + F("schedule__max_run_time"), output_field=DateTimeField())
    overdue = (ProcedureRun._writer.filter(schedule__isnull=False, schedule__max_run_time__isnull=False)
               .exclude(status__in=FINAL).alias(deadline=deadline).filter(deadline__lt=now)
               .values_list("id", "schedule__max_run_time"))
    for procedure_id, limit in overdue:
        result = operations.cancel(procedure_id, by=f"its schedule: ran past max_run_time of {limit}")
        report.timed_out += len(result.cancelled) > 0


#: What a tick writes on its schedule's row.
TICKED = ("active_runs", "pending_ticks", "skips", "overlaps", "next_tick_at", "last_tick_at", "last_drift_ms")


def write_ticked(schedules: list[Schedule]) -> None:
    """Write the ``TICKED`` fields of ``schedules`` (locked by the caller): one UPDATE on PostgreSQL."""
    if not schedules:
        return
    if not is_postgresql():
        Schedule._writer.bulk_update(schedules, TICKED)
        return
    fields = [Schedule._meta.pk, *(Schedule._meta.get_field(name) for name in TICKED)]
    select, params = json_rows(fields, schedules)
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in fields]
    assignments = ", ".join(f"{c} = v.{c}" for c in columns[1:])
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(Schedule._meta.db_table)} AS s SET {assignments} "
                       f"FROM ({select}) AS v({', '.join(columns)}) WHERE s.{columns[0]} = v.{columns[0]}", params)
