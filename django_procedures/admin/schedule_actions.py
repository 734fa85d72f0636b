"""The schedule actions as plain functions: plan (read-only) and perform (through the store).

Pause, resume, trigger-now and delete each have a plan, saying for every selected
schedule what would change (trigger-now asks the pure tick policy what its
tick would do), and a perform function that goes through
``django_procedures.store.schedules`` one schedule at a time. Nothing here
writes a column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q
from django.utils.translation import ngettext

from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.schedule import Mode, decide_trigger
from django_procedures.policy.status import UNFINISHED
from django_procedures.store import operations
from django_procedures.store import schedules as store


@dataclass(frozen=True)
class PlanItem:
    """One selected schedule and what the action would do to it."""

    schedule: Schedule
    changes: bool
    change: str


def _slots(s: Schedule) -> str:
    return ngettext("%(active)d of %(max)d slot taken", "%(active)d of %(max)d slots taken", s.max_concurrency) % {
        "active": s.active_runs, "max": s.max_concurrency}


def plan_pause(rows: Iterable[Schedule]) -> list[PlanItem]:
    items = []
    for s in rows:
        if not s.enabled:
            items.append(PlanItem(s, False, f"left alone: already paused ({s.disabled_reason or 'no reason given'})"))
            continue
        change = "enabled → paused: it stops ticking"
        if s.active_runs:
            change += ngettext("; its running run finishes on its own", "; its %(n)d running runs finish on their own",
                               s.active_runs) % {"n": s.active_runs}
        if s.pending_ticks:
            change += ngettext("; its pending tick waits until it is resumed",
                               "; its %(n)d pending ticks wait until it is resumed", len(s.pending_ticks)) % {
                "n": len(s.pending_ticks)}
        items.append(PlanItem(s, True, change))
    return items


def plan_resume(rows: Iterable[Schedule]) -> list[PlanItem]:
    items = []
    for s in rows:
        if s.enabled:
            items.append(PlanItem(s, False, "left alone: it is not paused"))
        elif s.mode == Mode.FIXED_DELAY and s.active_runs:
            items.append(PlanItem(s, True, "paused → enabled: its next tick is set when its running run finishes"))
        else:
            items.append(PlanItem(s, True, "paused → enabled: its next tick is due now (the paused stretch counts "
                                           "as one tick, not a burst)"))
    return items


def plan_trigger(rows: Iterable[Schedule], now: datetime) -> list[PlanItem]:
    """What a tick at ``now`` would do to each schedule, as the store's trigger decides it (as of now)."""
    items = []
    for s in rows:
        if not s.enabled:
            items.append(PlanItem(s, False, "left alone: it is paused; resume it first"))
            continue
        try:
            decision = decide_trigger(s.settings, now=now, next_tick_at=s.next_tick_at, active=s.active_runs,
                                      pending=s.pending())
        except ValueError as error:
            items.append(PlanItem(s, False, f"left alone: {error}"))
            continue
        if decision.start:
            change = "a tick now: starts a run"
            if decision.overlaps:
                change += f" alongside the running ones ({_slots(s)}; counted as an overlap)"
        elif now in decision.pending:
            change = f"a tick now, but no slot is free ({_slots(s)}): it waits as a pending tick ({s.missed})"
        else:
            policy = "fixed delay" if s.mode == Mode.FIXED_DELAY else s.missed
            change = f"a tick now, but no slot is free ({_slots(s)}): it is dropped and counted as a skip ({policy})"
        # Even a dropped tick counts as a skip: the trigger changes the schedule's metrics either way.
        items.append(PlanItem(s, True, change))
    return items


def plan_delete(rows: Iterable[Schedule]) -> list[PlanItem]:
    """What deleting each schedule does to its runs (``store.operations.delete_schedule``), as of now."""
    rows = list(rows)
    counts: dict[tuple[int, bool], int] = {}
    for schedule_id, unfinished, n in _run_counts([s.pk for s in rows]):
        counts[(schedule_id, unfinished)] = n
    items = []
    for s in rows:
        active, finished = counts.get((s.pk, True), 0), counts.get((s.pk, False), 0)
        parts = [ngettext("%(n)d unfinished run is cancelled (with its subtree)",
                          "%(n)d unfinished runs are cancelled (with their subtrees)", active) % {"n": active}]
        if s.pending_ticks:
            parts.append(ngettext("%(n)d pending tick is dropped", "%(n)d pending ticks are dropped",
                                  len(s.pending_ticks)) % {"n": len(s.pending_ticks)})
        parts.append(ngettext("%(n)d finished run is kept, no longer linked to it",
                              "%(n)d finished runs are kept, no longer linked to it", finished) % {"n": finished})
        if s.from_code:
            parts.append("it is declared in code: the next worker start or migrate creates it again unless its "
                         "declaration is removed")
        items.append(PlanItem(s, True, "deleted: " + "; ".join(parts)))
    return items


def _run_counts(ids: Sequence[int]) -> list[tuple[int, bool, int]]:
    """``(schedule id, unfinished, runs)`` for the schedules ``ids``: one grouped query."""
    rows = (ProcedureRun.objects.filter(schedule_id__in=list(ids)).values("schedule_id")
            .annotate(unfinished=Count("id", filter=Q(status__in=UNFINISHED)), total=Count("id")))
    out = []
    for r in rows:
        out += [(r["schedule_id"], True, r["unfinished"]), (r["schedule_id"], False, r["total"] - r["unfinished"])]
    return out


@dataclass(frozen=True)
class ScheduleActionReport:
    """What an action did: ``(schedule id, what happened)`` per changed schedule, and the refusals."""

    changed: tuple[tuple[int, str], ...] = ()
    refused: tuple[tuple[int, str], ...] = ()
    #: trigger-now only: runs started, ticks skipped, and ticks pending afterwards, summed.
    totals: dict[str, int] = field(default_factory=dict)


def _states(ids: Sequence[int]) -> dict[int, tuple[str, bool]]:
    return {pk: (name, enabled) for pk, name, enabled in
            Schedule.objects.filter(id__in=list(ids)).values_list("id", "name", "enabled")}


def pause_schedules(ids: Sequence[int], *, reason: str) -> ScheduleActionReport:
    """Pause each enabled schedule through ``store.schedules.pause``, with ``reason`` recorded."""
    changed, refused = [], []
    states = _states(ids)
    for pk in ids:
        name, enabled = states.get(pk, (None, False))
        if name is None:
            refused.append((pk, f"schedule {pk} does not exist"))
        elif not enabled:
            refused.append((pk, f"schedule {name!r} is already paused"))
        else:
            store.pause(pk, reason=reason)
            changed.append((pk, f"Paused from the admin: {reason}"))
    return ScheduleActionReport(tuple(changed), tuple(refused))


def resume_schedules(ids: Sequence[int]) -> ScheduleActionReport:
    """Resume each paused schedule through ``store.schedules.resume``."""
    changed, refused = [], []
    states = _states(ids)
    for pk in ids:
        name, enabled = states.get(pk, (None, True))
        if name is None:
            refused.append((pk, f"schedule {pk} does not exist"))
        elif enabled:
            refused.append((pk, f"schedule {name!r} is not paused"))
        else:
            store.resume(pk)
            changed.append((pk, "Resumed from the admin."))
    return ScheduleActionReport(tuple(changed), tuple(refused))


def trigger_schedules(ids: Sequence[int]) -> ScheduleActionReport:
    """Trigger each schedule now through ``store.schedules.trigger``; a paused one is refused by the store."""
    changed, refused = [], []
    totals = {"started": 0, "skipped": 0, "pending": 0}
    for pk in ids:
        try:
            result = store.trigger(pk)
        except InvalidOperation as error:
            refused.append((pk, str(error)))
            continue
        for key in totals:
            totals[key] += result[key]
        changed.append((pk, "Triggered from the admin: " + trigger_summary(result) + "."))
    return ScheduleActionReport(tuple(changed), tuple(refused), totals)


def delete_schedules(ids: Sequence[int], *, by: str) -> ScheduleActionReport:
    """Delete each schedule through ``store.operations.delete_schedule``; one deleted meanwhile is refused."""
    changed, refused = [], []
    for pk in ids:
        try:
            deleted = operations.delete_schedule(pk, by=by)
        except InvalidOperation as error:
            refused.append((pk, str(error)))
            continue
        changed.append((pk, f"Deleted from the admin: {len(deleted.cancelled)} procedures cancelled (its unfinished "
                            f"runs and their subtrees), {deleted.kept} finished runs kept."))
    return ScheduleActionReport(tuple(changed), tuple(refused))


def trigger_summary(result: dict[str, int]) -> str:
    """``"1 run started, 0 ticks skipped, 1 tick pending"``: one trigger's (or a sum of triggers') result."""
    return ", ".join([
        ngettext("%(n)d run started", "%(n)d runs started", result["started"]) % {"n": result["started"]},
        ngettext("%(n)d tick skipped", "%(n)d ticks skipped", result["skipped"]) % {"n": result["skipped"]},
        ngettext("%(n)d tick pending", "%(n)d ticks pending", result["pending"]) % {"n": result["pending"]},
    ])
