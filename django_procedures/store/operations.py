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
from django_procedures.store import finals, tree
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify


def retry(procedure_id: Any, *, by: str = "") -> None:
    """Make a failed procedure ready again from its last committed checkpoint.

    Allowed only for ``failed`` procedures with ``failure_can_retry``. Resets
    both retry budgets; ``Step`` rows keep their history and numbering. Records
    who retried and when. A procedure whose rollback failed resumes its steps
    (the operator has dealt with what the rollback could not).
    """
    now = clock.now()
    with transaction.atomic():
        row = ProcedureRun._writer.select_for_update().filter(id=procedure_id).first()
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
        ProcedureRun._writer.filter(id=row.id).update(
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
    """Cancel the procedure and its whole unfinished subtree.

    Running members are fenced out (their lease token is bumped), their keys
    released, and a cancelled child counts as a failed child of its parent.
    Cancelling a finished procedure changes nothing and says so.
    """
    with transaction.atomic():
        row = (ProcedureRun._writer.filter(id=procedure_id)
               .values("status", "parent_id", "spawned_in", "schedule_id").first())
        if row is None:
            raise InvalidOperation(f"procedure {procedure_id} does not exist")
        if row["status"] in FINAL:
            return CancelResult((), f"procedure {procedure_id} is already {row['status']}; nothing was cancelled")
        finals.lock_for_final(row["schedule_id"], row["parent_id"])
        reason = f"cancelled by {by}" if by else "cancelled"
        cancelled = tree.cancel_subtree(procedure_id, reason)
        if uuid.UUID(str(procedure_id)) in cancelled:
            finals.finished(uuid.UUID(str(procedure_id)), parent_id=row["parent_id"], spawned_in=row["spawned_in"],
                            schedule_id=row["schedule_id"], failed=True)
    count = len(cancelled)
    return CancelResult(tuple(cancelled), f"cancelled {count} procedure{'s' if count != 1 else ''}")


def fail_waiting(procedure_ids: Sequence[uuid.UUID], error: str) -> list[uuid.UUID]:
    """Fail procedures that have not started (waiting for lock keys), e.g. to break a deadlock."""
    failed = []
    with transaction.atomic():
        rows = list(ProcedureRun._writer.filter(id__in=procedure_ids, status__in=CLAIMABLE, keys_held=False)
                    .values("id", "parent_id", "spawned_in", "type_name", "schedule_id"))
        for schedule_id in sorted({r["schedule_id"] for r in rows if r["schedule_id"]}):
            finals.lock_for_final(schedule_id, None)
        tree.lock_rows([r["parent_id"] for r in rows] + [r["id"] for r in rows])
        for row in rows:
            updated = ProcedureRun._writer.filter(id=row["id"], status__in=CLAIMABLE, keys_held=False).update(
                status=RunStatus.FAILED, error=error, failure_can_retry=True, finished_at=clock.now(),
                waiting_for_keys=False)
            if not updated:
                continue
            finals.finished(row["id"], parent_id=row["parent_id"], spawned_in=row["spawned_in"],
                            schedule_id=row["schedule_id"], failed=True)
            send_after_commit(signals.procedure_failed, procedure_id=row["id"], type_name=row["type_name"],
                              error=error)
            failed.append(row["id"])
    return failed
