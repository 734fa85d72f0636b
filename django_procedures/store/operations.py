"""Operator operations: what the admin and ``ProcedureHandle`` may do to a procedure."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_procedures import clock, signals
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import CLAIMABLE, FINAL, RunStatus
from django_procedures.store import transitions, tree
from django_procedures.store.notify import notify
from django_procedures.store.transitions import Ending


def retry(procedure_id: Any, *, by: str = "") -> None:
    """Make a failed procedure ready again from its last committed checkpoint.

    Allowed only for ``failed`` procedures with ``failure_can_retry``. Resets
    both retry budgets; ``Step`` rows keep their history and numbering. Records
    who retried and when. A procedure whose rollback failed resumes its steps
    (the operator has dealt with what the rollback could not).
    """
    now = clock.now()
    with transaction.atomic():
        row = ProcedureRun.objects.select_for_update().filter(id=procedure_id).first()
        if row is None:
            raise InvalidOperation(f"procedure {procedure_id} does not exist")
        if row.status != RunStatus.FAILED:
            raise InvalidOperation(
                f"procedure {procedure_id} is {row.status}; only failed procedures can be retried"
            )
        if not row.failure_can_retry:
            raise InvalidOperation(
                f"procedure {procedure_id} failed with an error marked not worth a manual retry "
                f"({row.error[:200]}); submit a new procedure instead"
            )
        ProcedureRun.objects.filter(id=row.id).update(
            status=RunStatus.READY, run_at=now, failures=0, lost=0, in_unsafe_step=False, error="", traceback="",
            failed_step="", failure_can_retry=False, finished_at=None, retried_at=now, retried_by=by,
            manual_retries=row.manual_retries + 1, in_rollback=False, rollback_error="",
        )
        notify([row.queue])


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
    row = (ProcedureRun.objects.filter(id=procedure_id)
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
        transitions.finish_one(Ending(row["id"], row["type_name"], row["parent_id"], row["spawned_in"],
                                      row["schedule_id"]), write, failed=True)
    if not cancelled:
        status = ProcedureRun.objects.filter(id=row["id"]).values_list("status", flat=True).first()
        return CancelResult((), f"procedure {procedure_id} is already {status}; nothing was cancelled")
    count = len(cancelled)
    return CancelResult(tuple(cancelled), f"cancelled {count} procedure{'s' if count != 1 else ''}")


def fail_waiting(procedure_ids: Sequence[uuid.UUID], error: str) -> list[uuid.UUID]:
    """Fail procedures that have not started (waiting for lock keys), e.g. to break a deadlock."""
    rows = list(ProcedureRun.objects.filter(id__in=procedure_ids, status__in=CLAIMABLE, keys_held=False)
                .order_by("depth", "id").values("id", "parent_id", "spawned_in", "type_name", "schedule_id"))
    runs = [Ending(r["id"], r["type_name"], r["parent_id"], r["spawned_in"], r["schedule_id"]) for r in rows]

    def write(run: Ending) -> bool:
        return bool(ProcedureRun.objects.filter(id=run.id, status__in=CLAIMABLE, keys_held=False).update(
            status=RunStatus.FAILED, error=error, failure_can_retry=True, finished_at=clock.now(),
            waiting_for_keys=False))

    ended = transitions.finalise(runs, write, failed=True, signal=signals.procedure_failed, error=error)
    return [run.id for run in ended]
