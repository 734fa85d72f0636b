"""Operator operations: what the admin and ``ProcedureHandle`` may do to a procedure."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_procedures import clock
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import RunStatus
from django_procedures.store.notify import notify


def retry(procedure_id: Any, *, by: str = "") -> None:
    """Make a failed procedure ready again from its last committed checkpoint.

    Allowed only for ``failed`` procedures with ``failure_can_retry``. Resets
    both retry budgets; ``Step`` rows keep their history and numbering. Records
    who retried and when.
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
            manual_retries=row.manual_retries + 1,
        )
        notify([row.queue])
