"""Schedules: registering them, runs finishing, trigger-now, pause/resume, and runs ending their schedule."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction

from django_procedures import clock, registry
from django_procedures.exceptions import InvalidOperation, LeaseLost, UnknownProcedureType
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.models.readonly import write_instance
from django_procedures.models.schedule import validation_errors
from django_procedures.policy.options import Options
from django_procedures.policy.procedure_class import ProcedureClass
from django_procedures.policy.schedule import Mode, decide_trigger, fixed_delay_next_tick, on_run_finished
from django_procedures.policy.schedule_args import OutOfRange, normalise
from django_procedures.policy.status import LEASED
from django_procedures.store import broken
from django_procedures.store.db import is_conflict, is_disconnect
from django_procedures.store.submit import insert, row_of

logger = logging.getLogger("django_procedures.schedules")

#: The fields a definition in code sets; anything else on the row is the schedule's own life.
DEFINITION = ("procedure", "mode", "period", "cron", "timezone", "initial_delay", "max_concurrency", "missed",
              "max_pending", "max_run_time", "state", "queue")
#: Definition fields whose change sets the next tick again.
CADENCE = frozenset({"mode", "period", "cron", "timezone", "initial_delay"})


def first_tick(schedule: Schedule, now: datetime) -> datetime:
    """A rate schedule with no initial delay is due at once; a cron one at its first fire time after that."""
    return schedule.first_tick(now)


def check_schedule(schedule: Schedule) -> None:
    """Raise ``ValidationError`` (field -> what to change) unless ``schedule`` is valid and its procedure is
    registered in this process; ``Schedule.clean()`` checks the rest, not the registry."""
    errors = validation_errors(schedule)
    try:
        registry.get(schedule.procedure)
    except UnknownProcedureType as error:
        errors = {"procedure": str(error), **errors}
    if errors:
        raise ValidationError(errors)


def register_definition(name: str, procedure: ProcedureClass | str, *, mode: str = "fixed_rate",
                        period: timedelta | float | None = None, cron: str | None = None, max_concurrency: int = 1,
                        missed: str = "skip", max_pending: int = 0, initial_delay: timedelta | float = timedelta(0),
                        max_run_time: timedelta | float | None = None, state: Mapping[str, Any] | None = None,
                        enabled: bool = True, timezone: str | None = None, queue: str = "", update: bool = False,
                        from_code: bool = False) -> tuple[Schedule, bool]:
    """``scheduling.register_schedule`` (which documents the arguments); ``from_code`` marks a schedule
    declared in code (``sync_declared``), which the admin shows as such."""
    type_name = _type_name(procedure)
    try:
        args = normalise(name=name, mode=mode, period=period, cron=cron, max_concurrency=max_concurrency,
                         missed=missed, max_pending=max_pending, initial_delay=initial_delay,
                         max_run_time=max_run_time, state=state, enabled=enabled, timezone=timezone, queue=queue,
                         update=update)
    except OutOfRange as error:
        raise ValidationError({error.field: str(error)}) from None
    update = args.pop("update")
    wanted = Schedule(procedure=type_name, from_code=from_code, **args)
    check_schedule(wanted)
    with transaction.atomic():
        existing = Schedule._writer.select_for_update().filter(name=name).first()
        if existing is None:
            wanted.next_tick_at = first_tick(wanted, clock.now())
            write_instance(wanted)
            return wanted, True
        changed = [f for f in DEFINITION if getattr(existing, f) != getattr(wanted, f)]
        if changed and not update:
            logger.warning("schedule %r differs from its definition in code (%s); left unchanged: pass "
                           "update=True to apply it", name, ", ".join(changed))
        elif changed:
            _apply_definition(existing, wanted, changed)
            logger.info("schedule %r updated: %s", name, ", ".join(changed))
        return existing, False


def _type_name(procedure: object) -> str:
    if isinstance(procedure, str):
        return procedure
    if isinstance(procedure, type) and isinstance(getattr(procedure, "type_name", None), str):
        return procedure.type_name  # type: ignore[attr-defined]
    what = f"an instance of {type(procedure).__name__}" if hasattr(type(procedure), "type_name") else repr(procedure)
    raise TypeError(f"procedure must be a Procedure subclass (the class, not an instance) or its type name as a "
                    f"string; got {what}")


def _apply_definition(existing: Schedule, wanted: Schedule, changed: Sequence[str]) -> None:
    """Copy the ``changed`` definition fields onto the locked row and write only them (and the next tick,
    set again when the cadence changed); the metrics ticks and finishing runs write are left alone."""
    for f in changed:
        setattr(existing, f, getattr(wanted, f))
    # The definition changed: whatever made the last pass fail is for the next pass to find again.
    existing.last_error, existing.last_error_at = "", None
    fields = [*changed, "last_error", "last_error_at", "updated_at"]
    if CADENCE & set(changed):
        existing.next_tick_at = first_tick(existing, clock.now()) if existing.enabled else None
        fields.append("next_tick_at")
    write_instance(existing, update_fields=fields)


def save_schedule(schedule: Schedule) -> tuple[Schedule, list[str]]:
    """Create ``schedule``, or apply its definition to the stored row: the admin's add and change forms.

    A new schedule gets its first tick as ``register_definition`` gives it. For a
    stored one only the name and the definition fields (``DEFINITION``) that
    differ are written, under the row lock, so the metrics, pending ticks and
    pause state that ticks, runs and operators wrote meanwhile are kept; a
    changed cadence sets the next tick again. Returns the stored schedule and
    the fields that changed. Bad settings raise ``ValidationError`` as
    ``check_schedule`` does.
    """
    check_schedule(schedule)
    with transaction.atomic():
        if schedule.pk is None:
            if not schedule.enabled and not schedule.disabled_reason:
                schedule.disabled_reason = "created paused"
            schedule.next_tick_at = first_tick(schedule, clock.now())
            write_instance(schedule, force_insert=True)
            return schedule, ["name", *DEFINITION, "enabled"]
        existing = locked(schedule.pk)
        changed = [f for f in ("name", *DEFINITION) if getattr(existing, f) != getattr(schedule, f)]
        if changed:
            _apply_definition(existing, schedule, changed)
            logger.info("schedule %r updated: %s", existing.name, ", ".join(changed))
        return existing, changed


# -- schedules declared in code, synced on post_migrate and at worker start --------------------

_declared: dict[str, dict[str, Any]] = {}
#: What a declaration may pass on to ``register_definition`` (``from_code`` is set by the sync itself).
_OPTIONS = frozenset(inspect.signature(register_definition).parameters) - {"name", "from_code"}


def declare(name: str, procedure: ProcedureClass | str, options: Mapping[str, Any]) -> None:
    """Remember a schedule declared in code (``scheduling.declare_schedule``) for ``sync_declared``."""
    _declared[name] = {"procedure": procedure, **options}


def sync_declared() -> list[str]:
    """Register every declared schedule; returns the names created."""
    created = []
    for name, options in _declared.items():
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            logger.error("schedule %r declared in code is invalid: unknown option %s; register_schedule takes "
                         "%s", name, ", ".join(map(repr, unknown)), ", ".join(sorted(_OPTIONS - {"procedure"})))
            continue
        try:
            _, was_created = register_definition(name, from_code=True, **options)
        except ValidationError as error:
            logger.error("schedule %r declared in code is invalid: %s", name, "; ".join(error.messages))
            continue
        except TypeError as error:
            logger.error("schedule %r declared in code is invalid: %s", name, error)
            continue
        if was_created:
            created.append(name)
    return created


# -- a run of a schedule reaching a final status -------------------------------------------------


def run_rows(schedule: Schedule, ticks: Sequence[datetime], now: datetime) -> list[ProcedureRun]:
    """Unsaved runs of ``schedule`` standing for ``ticks``."""
    run = registry.get(schedule.procedure)._new_run(schedule.state, Options(queue=schedule.queue or None), now=now)
    rows = []
    for tick_at in ticks:
        row = row_of(run, now=now, parent=None)
        row.schedule_id, row.tick_at = schedule.id, tick_at
        rows.append(row)
    return rows


def start_runs(schedule: Schedule, ticks: Sequence[datetime], now: datetime) -> int:
    """Insert runs for ``ticks``; a tick that already has a run (another ticker won) starts nothing."""
    if not ticks:
        return 0
    return len(insert(run_rows(schedule, ticks, now), skip_conflicts=True))


def _elapsed_ms(procedure_id: uuid.UUID, now: datetime) -> int | None:
    started = ProcedureRun._writer.filter(id=procedure_id).values_list("started_at", "created_at").first()
    begin = started and (started[0] or started[1])
    return int((now - begin).total_seconds() * 1000) if begin else None


def run_finished(schedule_id: int, procedure_id: uuid.UUID, *, failed: bool) -> None:
    """In the run's final transaction (schedule row locked first): metrics, a freed slot, the next tick."""
    schedule = Schedule._writer.filter(id=schedule_id).first()
    if schedule is None:
        return
    now = clock.now()
    elapsed = _elapsed_ms(procedure_id, now)
    schedule.active_runs = max(schedule.active_runs - 1, 0)
    if failed:
        schedule.failures += 1
    else:
        schedule.runs += 1
    if elapsed is not None:
        schedule.last_elapsed_ms = elapsed
        schedule.max_elapsed_ms = max(schedule.max_elapsed_ms or 0, elapsed)
    fields = ["active_runs", "failures", "runs", "last_elapsed_ms", "max_elapsed_ms"]
    try:
        fields += _next_after_run(schedule, now)
    except Exception as error:
        if isinstance(error, DatabaseError) and (is_disconnect(error) or is_conflict(error)):
            raise
        # The schedule's definition (stored past validation) cannot give a next tick: the run still ends, and
        # the error is shown on the schedule until its definition is fixed.
        broken.record(schedule, error, now)
    Schedule._writer.filter(id=schedule.id).update(**{f: getattr(schedule, f) for f in fields})


def _next_after_run(schedule: Schedule, now: datetime) -> list[str]:
    """A ``fixed_delay`` schedule's next tick, or the pending ticks a freed slot starts; the fields changed."""
    if schedule.mode == Mode.FIXED_DELAY:
        if schedule.enabled and schedule.period:
            schedule.next_tick_at = fixed_delay_next_tick(now, schedule.period)
            return ["next_tick_at"]
        return []
    decision = on_run_finished(schedule.settings, active_after=schedule.active_runs, pending=schedule.pending(),
                               enabled=schedule.enabled)
    if decision.start:
        with transaction.atomic():  # a savepoint: runs that cannot start leave the final transition whole
            started = start_runs(schedule, decision.start, now)
    else:
        started = 0
    schedule.active_runs += started
    schedule.overlaps += decision.overlaps
    schedule.pending_ticks = [t.isoformat() for t in decision.pending]
    return ["overlaps", "pending_ticks"]


# -- operator and run operations ------------------------------------------------------------------


def locked(schedule: Schedule | int | str) -> Schedule:
    key = schedule.pk if isinstance(schedule, Schedule) else schedule
    lookup: dict[str, Any] = {"name": key} if isinstance(key, str) else {"pk": key}
    found = Schedule._writer.select_for_update().filter(**lookup).first()
    if found is None:
        raise InvalidOperation(f"no schedule {key!r}")
    return found


def trigger(schedule: Schedule | int | str) -> dict[str, int]:
    """Trigger now: a tick at the current time, obeying the concurrency bound and the missed-tick policy."""
    now = clock.now()
    with transaction.atomic():
        s = locked(schedule)
        if not s.enabled:
            raise InvalidOperation(f"schedule {s.name!r} is paused; resume it first")
        decision = decide_trigger(s.settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                                  pending=s.pending())
        try:
            started = start_runs(s, decision.start, now)
        except UnknownProcedureType as error:
            raise InvalidOperation(f"schedule {s.name!r} cannot start a run: {error}") from None
        Schedule._writer.filter(id=s.id).update(
            active_runs=s.active_runs + started, pending_ticks=[t.isoformat() for t in decision.pending],
            skips=s.skips + decision.skips, overlaps=s.overlaps + decision.overlaps,
            next_tick_at=decision.next_tick_at if s.mode != Mode.FIXED_DELAY or not started else None)
    return {"started": started, "pending": len(decision.pending), "skipped": decision.skips}


def pause(schedule: Schedule | int | str, *, reason: str = "paused") -> None:
    with transaction.atomic():
        s = locked(schedule)
        # update() skips auto_now: updated_at is set here, as everywhere an operator's view of the row changes.
        Schedule._writer.filter(id=s.id).update(enabled=False, disabled_reason=reason, updated_at=clock.now())


def resume(schedule: Schedule | int | str) -> None:
    """Enable again; the next tick is due now (a missed stretch counts as one tick, not a burst)."""
    with transaction.atomic():
        s = locked(schedule)
        if s.enabled:
            return
        next_tick = clock.now() if s.mode != Mode.FIXED_DELAY or not s.active_runs else None
        Schedule._writer.filter(id=s.id).update(enabled=True, disabled_reason="", next_tick_at=next_tick,
                                                updated_at=clock.now())


def stop_from_run(procedure_id: uuid.UUID, lease_token: int, reason: str) -> None:
    """A run ends its own schedule: disabled, with the reason recorded (only while the run holds its lease)."""
    schedule_id = ProcedureRun._writer.filter(id=procedure_id).values_list("schedule_id", flat=True).first()
    if schedule_id is None:
        raise InvalidOperation(f"procedure {procedure_id} was not started by a schedule")
    with transaction.atomic():
        s = locked(schedule_id)
        if not ProcedureRun._writer.filter(id=procedure_id, lease_token=lease_token, status__in=LEASED).exists():
            raise LeaseLost(f"procedure {procedure_id} is no longer held by lease token {lease_token}")
        Schedule._writer.filter(id=s.id).update(enabled=False, disabled_reason=f"stopped by run {procedure_id}: "
                                                f"{reason}", updated_at=clock.now())
    logger.info("schedule %r stopped by its run %s: %s", s.name, procedure_id, reason)
