"""One scheduling pass: lock due schedules, apply the tick decision, start runs, enforce max_run_time."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Min

from django_procedures import clock
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.schedule import decide_tick
from django_procedures.policy.status import FINAL
from django_procedures.store import operations
from django_procedures.store.schedules import start_runs

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
    return Schedule.objects.filter(enabled=True).aggregate(at=Min("next_tick_at"))["at"]


def tick(now: datetime | None = None, *, batch_size: int = 500) -> TickReport:
    """Run one scheduling pass at ``now`` (the injectable clock) over every due, enabled schedule.

    Due schedules are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
    tickers (threads, processes, two beats) share the work, and each run
    carries its schedule and tick time under a unique constraint, so a tick
    never starts twice.
    """
    report = TickReport()
    with clock.frozen_at(now):
        moment = clock.now()
        _cancel_overdue(moment, report)
        done: set[int] = set()
        while True:
            with transaction.atomic():
                due = list(Schedule.objects.filter(enabled=True, next_tick_at__lte=moment).exclude(id__in=done)
                           .select_for_update(skip_locked=True).order_by("id")[:batch_size])
                for schedule in due:
                    done.add(schedule.id)
                    _tick_one(schedule, moment, report)
            if len(due) < batch_size:
                return report


def _tick_one(s: Schedule, now: datetime, report: TickReport) -> None:
    try:
        decision = decide_tick(s.settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                               pending=s.pending(), next_tick=s.cadence())
        started = start_runs(s, decision.start, now)
    except (UnknownProcedureType, ValueError) as error:
        report.errors.append(f"{s.name}: {error}")
        logger.error("schedule %r cannot tick: %s", s.name, error)
        return
    report.schedules += 1
    report.started += started
    report.pending += len(decision.pending)
    report.skipped += decision.skips
    report.overlaps += decision.overlaps
    Schedule.objects.filter(id=s.id).update(
        active_runs=s.active_runs + started, pending_ticks=[t.isoformat() for t in decision.pending],
        skips=s.skips + decision.skips, overlaps=s.overlaps + decision.overlaps, next_tick_at=decision.next_tick_at,
        last_tick_at=now, last_drift_ms=int(decision.drift / timedelta(milliseconds=1)) if decision.due else
        s.last_drift_ms)


def _cancel_overdue(now: datetime, report: TickReport) -> None:
    """Runs past their schedule's ``max_run_time`` are cancelled: a failure that frees the slot."""
    deadline = ExpressionWrapper(F("created_at") + F("schedule__max_run_time"), output_field=DateTimeField())
    overdue = (ProcedureRun.objects.filter(schedule__isnull=False, schedule__max_run_time__isnull=False)
               .exclude(status__in=FINAL).alias(deadline=deadline).filter(deadline__lt=now)
               .values_list("id", "schedule__max_run_time"))
    for procedure_id, limit in overdue:
        result = operations.cancel(procedure_id, by=f"its schedule: ran past max_run_time of {limit}")
        report.timed_out += len(result.cancelled) > 0
