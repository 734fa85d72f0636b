"""Operator operations: what the admin and ``ProcedureHandle`` may do to a procedure."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F

from django_procedures import clock, signals
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy import manual_retry, tree_retry
from django_procedures.policy.status import CLAIMABLE, FINAL, UNFINISHED, RunStatus
from django_procedures.policy.waiting import WaitingFor
from django_procedures.store import final, schedules, tree
from django_procedures.store.final import Ending
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.schedules")


def retry(procedure_id: Any, *, by: str = "") -> tree_retry.TreeRetry:
    """Make a failed procedure ready again from its last committed checkpoint; returns what it brought back.

    Allowed only for ``failed`` procedures with ``failure_can_retry``. Resets
    both retry budgets; ``Step`` rows keep their history and numbering. Records
    who retried and when. A procedure whose rollback failed resumes its steps
    (the operator has dealt with what the rollback could not).

    Tree-aware (:mod:`django_procedures.policy.tree_retry`): a parent failed by
    its children retries the children of its last suspension whose failure it
    did not handle (and resumes the siblings its failure cancelled), each
    recorded as retried by ``by``, and goes back to ``waiting`` for them; a
    child that cannot come back (its failure not worth a manual retry, rolled
    back, cancelled by an operator) refuses the retry with ``InvalidOperation``.
    Every procedure brought back takes its lock keys again when it is next
    claimed, as any procedure does.

    The retry takes back what the failure's final transition gave up, under
    the same locks (schedule, then parent, then the procedure, then its
    descendants): a child counts as pending again for its parent, which must
    still be waiting on the suspension that started it (else
    ``InvalidOperation`` says what to do instead), and its next failure is
    reported to the parent again; a run of a schedule holds a slot again, and
    is refused while none is free.
    """
    now = clock.now()
    found = ProcedureRun._writer.filter(id=procedure_id).values("parent_id", "schedule_id").first()
    if found is None:
        raise InvalidOperation(f"procedure {procedure_id} does not exist")
    with transaction.atomic():
        schedule = (Schedule._writer.select_for_update().filter(id=found["schedule_id"]).first()
                    if found["schedule_id"] is not None else None)
        tree.lock_rows([found["parent_id"]])
        row = ProcedureRun._writer.select_for_update().get(id=procedure_id)
        if row.status != RunStatus.FAILED:
            raise InvalidOperation(
                f"procedure {procedure_id} is {row.status}; only failed procedures can be retried"
            )
        if not row.failure_can_retry:
            raise InvalidOperation(
                f"procedure {procedure_id} failed with an error marked not worth a manual retry "
                f"({row.error[:200]}); submit a new procedure instead"
            )
        plan = tree_plan(row)
        refusal = retry_refusal(row, parents_of([row]).get(row.parent_id), schedule) or plan.refusal
        if refusal:
            raise InvalidOperation(f"procedure {procedure_id} cannot be retried: {refusal}")
        if row.parent_id is not None and row.spawned_in:
            ProcedureRun._writer.filter(id=row.parent_id).update(pending_children=F("pending_children") + 1)
        if schedule is not None:
            Schedule._writer.filter(id=schedule.id).update(
                active_runs=F("active_runs") + 1, overlaps=F("overlaps") + (1 if schedule.active_runs else 0))
        _revive(plan, now=now, by=by)
        ready = [r.member.id for r in plan.revivals if r.status == RunStatus.READY]
        notify(set(ProcedureRun._writer.filter(id__in=ready).values_list("queue", flat=True)))
    return plan


_MEMBER_FIELDS = ("id", "type_name", "status", "parent_id", "spawned_in", "suspension", "failure_can_retry",
                  "failure_handled", "error")


def tree_plan(run: ProcedureRun) -> tree_retry.TreeRetry:
    """What retrying the failed ``run`` brings back below it (:func:`django_procedures.policy.tree_retry.plan`)."""
    target = tree_retry.Member(*(getattr(run, name) for name in _MEMBER_FIELDS))
    if not run.suspension:  # it never spawned children
        return tree_retry.plan(target, ())
    below = [pid for pid in tree.subtree(run.id) if pid != run.id]
    rows = ProcedureRun._writer.filter(id__in=below).values_list(*_MEMBER_FIELDS)
    return tree_retry.plan(target, [tree_retry.Member(*r) for r in rows])


def _revive(plan: tree_retry.TreeRetry, *, now: Any, by: str) -> None:
    """Write the retry of every procedure of ``plan`` (the retried one's row is locked; its descendants' now are)."""
    tree.lock_rows([r.member.id for r in plan.descendants])
    for revival in plan.revivals:
        member = revival.member
        # Fenced on the status planned: a descendant that moved meanwhile (pruned, retried) undoes the whole retry.
        changed = ProcedureRun._writer.filter(id=member.id, status=member.status).update(
            status=revival.status, run_at=now, pending_children=revival.waits_for, failures=0, lost=0, wake_at=None,
            waiting_for=WaitingFor.CHILDREN if revival.status == RunStatus.WAITING else "",
            in_unsafe_step=False, error="", traceback="", failed_step="", failure_can_retry=False, finished_at=None,
            retried_at=now, retried_by=by, manual_retries=F("manual_retries") + 1, in_rollback=False,
            rollback_error="", failure_handled=False,
        )
        if not changed:
            raise InvalidOperation(f"procedure {plan.revivals[0].member.id} cannot be retried: {member.type_name} "
                                   f"{member.id} of its tree changed meanwhile; try again")


def parents_of(runs: Sequence[ProcedureRun]) -> dict[Any, manual_retry.ParentView]:
    """The parents of ``runs`` that started them in a suspension, by id (one query)."""
    ids = {r.parent_id for r in runs if r.parent_id is not None and r.spawned_in}
    rows = ProcedureRun._writer.filter(id__in=ids).values_list("id", "type_name", "status", "suspension",
                                                                         "waiting_for")
    return {row[0]: manual_retry.ParentView(*row) for row in rows}


def retry_refusal(run: ProcedureRun, parent: manual_retry.ParentView | None, schedule: Schedule | None) -> str | None:
    """Why the failed ``run`` cannot be retried now because of its ``parent`` or its ``schedule``, or None.

    The caller holds the parent's and the schedule's row locks if it acts on the answer.
    """
    if parent is not None and run.spawned_in:
        refusal = manual_retry.child_refusal(run.spawned_in, parent)
        if refusal:
            return refusal
    if schedule is not None:
        return manual_retry.slot_refusal(schedule.name, active_runs=schedule.active_runs,
                                         max_concurrency=schedule.max_concurrency)
    return None


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel`` changed: the procedures it cancelled (none when it was already final)."""

    cancelled: tuple[uuid.UUID, ...]
    message: str

    @property
    def changed(self) -> bool:
        return bool(self.cancelled)


def cancel(procedure_id: Any, *, by: str = "") -> CancelResult:
    """Cancel the procedure and its whole unfinished subtree (a final transition, see ``store.transitions``).

    Running members are fenced out (their lease token is bumped), their keys
    released, and a cancelled child counts as a failed child of its parent.
    Cancelling a finished procedure changes nothing and says so.
    """
    row = (ProcedureRun._writer.filter(id=procedure_id)
           .values("id", "type_name", "status", "parent_id", "spawned_in", "schedule_id").first())
    if row is None:
        raise InvalidOperation(f"procedure {procedure_id} does not exist")
    reason = f"cancelled by {by}" if by else "cancelled"
    cancelled: list[uuid.UUID] = []

    def write() -> bool:
        cancelled.extend(tree.cancel_subtree(row["id"], reason))  # locks the subtree, ancestors first
        return row["id"] in cancelled

    if row["status"] not in FINAL:
        # Signals: cancel_subtree sends procedure_cancelled for each member it cancels.
        # has_keys=False: cancel_subtree releases the keys of every member it cancels.
        final.finish_one(Ending(row["id"], row["type_name"], row["parent_id"], row["spawned_in"],
                                      row["schedule_id"], has_keys=False), write, failed=True)
    if not cancelled:
        status = ProcedureRun._writer.filter(id=row["id"]).values_list("status", flat=True).first()
        return CancelResult((), f"procedure {procedure_id} is already {status}; nothing was cancelled")
    count = len(cancelled)
    return CancelResult(tuple(cancelled), f"cancelled {count} procedure{'s' if count != 1 else ''}")


def fail_waiting(procedure_ids: Sequence[uuid.UUID], error: str) -> list[uuid.UUID]:
    """Fail procedures that have not started (waiting for lock keys), e.g. to break a deadlock."""
    rows = list(ProcedureRun._writer.filter(id__in=procedure_ids, status__in=CLAIMABLE, keys_held=False)
                .order_by("depth", "id").values("id", "parent_id", "spawned_in", "type_name", "schedule_id"))
    runs = [Ending(r["id"], r["type_name"], r["parent_id"], r["spawned_in"], r["schedule_id"]) for r in rows]

    def write(run: Ending) -> bool:
        return bool(ProcedureRun._writer.filter(id=run.id, status__in=CLAIMABLE, keys_held=False).update(
            status=RunStatus.FAILED, error=error, failure_can_retry=True, finished_at=clock.now(),
            waiting_for_keys=False))

    ended = final.finalise(runs, write, failed=True, signal=signals.procedure_failed, error=error)
    return [run.id for run in ended]


# -- deleting a schedule (its runs are cancelled as above) ------------------------------------


@dataclass(frozen=True)
class Deleted:
    """What :func:`delete_schedule` did: the procedures it cancelled (its unfinished runs and their
    descendants), and how many finished runs it kept (unlinked)."""

    name: str
    cancelled: tuple[uuid.UUID, ...]
    kept: int


def delete_schedule(schedule: Schedule | int | str, *, by: str = "") -> Deleted:
    """Delete a schedule: its unfinished runs are cancelled, its finished runs are kept, unlinked from it.

    In one transaction, under the schedule's row lock (so no pass ticks it and
    no finishing run starts a pending tick meanwhile): the schedule stops
    ticking and drops its pending ticks; every run still holding a slot is
    cancelled with its subtree as ``cancel`` does it (fenced: whatever its
    worker commits afterwards is dropped; a non-atomic step may still be
    running); the finished runs stay in the procedures list with no schedule
    (``schedule`` NULL, ``tick_at`` kept); the schedule row is deleted. A
    schedule declared in code is created again at the next worker start or
    ``migrate`` unless its declaration is removed.
    """
    with transaction.atomic():
        s = schedules.locked(schedule)
        # Paused first: the cancelled runs' final transitions start no pending tick and set no next tick.
        Schedule._writer.filter(id=s.id).update(enabled=False, disabled_reason="being deleted", pending_ticks=[],
                                                next_tick_at=None)
        reason = f"deleting its schedule {s.name!r}" + (f" ({by})" if by else "")
        unfinished = list(ProcedureRun._writer.filter(schedule_id=s.id, status__in=UNFINISHED)
                          .values_list("id", flat=True))
        cancelled: list[uuid.UUID] = []
        for procedure_id in unfinished:
            cancelled += cancel(procedure_id, by=reason).cancelled
        kept = ProcedureRun._writer.filter(schedule_id=s.id).update(schedule=None) - len(unfinished)
        Schedule._writer.filter(id=s.id).delete()
    logger.info("schedule %r deleted%s: %d unfinished runs cancelled, %d finished runs kept", s.name,
                f" by {by}" if by else "", len(unfinished), kept)
    return Deleted(s.name, tuple(cancelled), kept)
