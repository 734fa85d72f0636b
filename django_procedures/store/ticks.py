"""One scheduling pass: lock due schedules, apply the tick decision, start runs, enforce max_run_time."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, transaction
from django.db.models.base import ModelState

from django_procedures import clock
from django_procedures.models import Schedule
from django_procedures.policy.schedule import ScheduleSettings, TickDecision, decide_tick
from django_procedures.store import broken, overdue
from django_procedures.store.db import is_conflict, is_disconnect, is_postgresql
from django_procedures.store.tick_runs import Ticked, Wanted, declares_lock_keys, insert_runs, wanted, write_back

logger = logging.getLogger("django_procedures.schedules")


@dataclass
class TickReport:
    """What one scheduling pass (``tick()``) did."""

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


def run_pass(now: datetime | None = None, *, batch_size: int = 1000) -> TickReport:
    """One scheduling pass at ``now`` (``scheduling.tick``, which says what it does, and the worker's chore).

    Each batch is one transaction with a fixed number of statements whatever
    its size: one SELECT of its schedules (the columns a decision needs), one
    INSERT ... SELECT of its runs, one UPDATE of its schedules
    (``store.tick_runs``). A schedule this process cannot tick gets the error
    recorded on its row (``store.broken``); overdue runs are cancelled first
    (``store.overdue``).
    """
    report = TickReport()
    with clock.frozen_at(now):
        moment = clock.now()
        report.timed_out = len(overdue.cancel_overdue(moment))
        stuck: set[int] = set()  # ticked in this pass yet still due: passed over, so the pass ends
        while True:
            with transaction.atomic():
                due = _lock_due(moment, stuck, batch_size)
                stuck.update(_tick_batch(due, moment, report))
            if len(due) < batch_size:
                return report


#: The columns a pass reads: what the decision and the runs need, and what recording an error shows (not
#: the state, which the runs' INSERT copies in the database, nor the counts, which the UPDATE adds to).
_READ = ("id", "name", "procedure", "mode", "period", "cron", "timezone", "max_concurrency", "missed", "max_pending",
         "queue", "next_tick_at", "pending_ticks", "active_runs", "last_error")


def _lock_due(moment: datetime, stuck: set[int], limit: int) -> list[Schedule]:
    """Lock up to ``limit`` due, enabled schedules (those another ticker holds are skipped)."""
    rows = (Schedule._writer.filter(broken.healthy_or_retry_due(moment), enabled=True, next_tick_at__lte=moment)
            .exclude(id__in=stuck).select_for_update(skip_locked=True).order_by("id").values_list(*_READ)[:limit])
    return [_loaded(row) for row in rows]


def _loaded(values: tuple[object, ...]) -> Schedule:
    """A ``Schedule`` holding the columns of ``_READ``, made without ``Model.__init__``: a pass makes thousands,
    and ``__init__`` of a model with deferred fields (``.only()``) cost more than the rest of the pass."""
    schedule = Schedule.__new__(Schedule)
    schedule.__dict__.update(zip(_READ, values, strict=True))
    schedule._state = ModelState()
    schedule._state.adding, schedule._state.db = False, Schedule._writer.db
    return schedule


def _with_states(due: list[Schedule]) -> None:
    """Read the state of the schedules whose runs depend on it in Python: one query.

    On PostgreSQL the runs' INSERT copies the state in the database, and only a
    procedure that declares lock keys (computed from the state) needs it here.
    """
    keyed = [s for s in due if declares_lock_keys(s)] if is_postgresql() else due
    if keyed:
        states = dict(Schedule._writer.filter(id__in=[s.id for s in keyed]).values_list("id", "state"))
        for s in keyed:
            s.state = states[s.id]


#: One settings object per distinct combination: a pass over thousands of schedules has a handful.
_settings = functools.lru_cache(maxsize=64)(ScheduleSettings)


@dataclass
class _Planned:
    schedule: Schedule
    decision: TickDecision
    wanted: Wanted


def _tick_batch(due: list[Schedule], now: datetime, report: TickReport) -> list[int]:
    """Decide every locked schedule, insert all their runs, then write all their rows back.

    A schedule whose decision raises is recorded as broken and left out; if the
    batch's writes are refused, each schedule is written alone, so only the one
    at fault is recorded. Returns the schedules still due after this (an error,
    a ``fixed_delay`` run in progress).
    """
    planned, stuck = [], []
    _with_states(due)
    for s in due:
        try:
            settings = _settings(s.mode, s.max_concurrency, s.missed, s.max_pending)
            decision = decide_tick(settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                                   pending=s.pending(), next_tick=s.cadence())
            runs = wanted(s, decision.start)
        except Exception as error:  # this schedule's definition, not the pass: the others go on
            _record(s, error, now, report)
            stuck.append(s.id)
            continue
        planned.append(_Planned(s, decision, runs))
    try:
        with transaction.atomic():  # a savepoint: a refused write must not end the pass's transaction
            stuck += _write(planned, now, report)
    except Exception as error:
        if not _refused(error):
            raise
        for p in planned:  # the one at fault is recorded; the rest tick (the refused batch changed nothing)
            try:
                with transaction.atomic():
                    stuck += _write([p], now, report)
            except Exception as error:
                if not _refused(error):
                    raise
                _record(p.schedule, error, now, report)
                stuck.append(p.schedule.id)
    return stuck


def _refused(error: Exception) -> bool:
    """The database (or its driver) refused a value: one schedule's fault, not a lost connection or a deadlock."""
    if isinstance(error, DatabaseError):
        return not (is_disconnect(error) or is_conflict(error))
    return isinstance(error, OverflowError | ValueError)


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
    """Insert the runs of ``planned`` and write their schedules back; counts go to ``report`` once written.

    The schedule objects are left as read, so a refused batch can be written again one schedule at a time.
    """
    # A tick another ticker already started is skipped by the unique constraint and starts nothing here.
    inserted = insert_runs([p.wanted for p in planned], now)
    write_back([Ticked(p.schedule.id, inserted[p.schedule.id], p.decision) for p in planned], now)
    report.schedules += len(planned)
    report.started += sum(inserted.values())
    for p in planned:
        report.pending += len(p.decision.pending)
        report.skipped += p.decision.skips
        report.overlaps += p.decision.overlaps
    return [p.schedule.id for p in planned if p.decision.next_tick_at is not None and p.decision.next_tick_at <= now]
