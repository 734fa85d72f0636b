"""Runs past their schedule's ``max_run_time``, counted from their start, are cancelled.

Three passes enforce it, whichever comes first: the heartbeat of the worker
holding the run (the claim carries the run's deadline), the maintenance pass
every worker runs (runs in no worker's hands: waiting for children, retrying,
released), and each scheduling pass. A run that has not started yet (queue
wait) is never overdue; a manually retried run counts from its retry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Coalesce, Greatest

from django_procedures import clock
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun
from django_procedures.policy.schedule_args import MAX_DURATION
from django_procedures.policy.status import UNFINISHED
from django_procedures.store import operations

logger = logging.getLogger("django_procedures.schedules")


def reason(limit: object) -> str:
    """The cancel reason recorded on an overdue run (``"cancelled by <reason>"``)."""
    return f"its schedule: ran past max_run_time of {limit} (counted from its start)"


def cancel_overdue(now: datetime | None = None, *, ids: Sequence[uuid.UUID] | None = None,
                   limit: int = 100) -> list[uuid.UUID]:
    """Cancel (subtree, fenced, a failure of the schedule) runs started more than ``max_run_time`` before ``now``.

    A limit stored past validation beyond ``MAX_DURATION`` (100 years) is
    never reached. ``ids`` limits the check to those runs (a worker's held claims past the
    deadline they were claimed with: the schedule's limit is read again here).
    Returns the runs cancelled.
    """
    now = now or clock.now()
    # A manual retry starts the count again (the run started before it failed).
    start = Greatest("started_at", Coalesce("retried_at", "started_at"))
    deadline = ExpressionWrapper(start + F("schedule__max_run_time"), output_field=DateTimeField())
    rows = (ProcedureRun._writer.filter(status__in=UNFINISHED, schedule__isnull=False,
                                        schedule__max_run_time__lte=MAX_DURATION, started_at__isnull=False)
            .alias(deadline=deadline).filter(deadline__lt=now))
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    cancelled = []
    for procedure_id, max_run_time in rows.values_list("id", "schedule__max_run_time")[:limit]:
        try:
            result = operations.cancel(procedure_id, by=reason(max_run_time))
        except InvalidOperation:  # deleted meanwhile (pruned)
            continue
        if result.changed:
            cancelled.append(procedure_id)
            logger.warning("procedure %s: ran past its schedule's max_run_time of %s; cancelled", procedure_id,
                           max_run_time, extra={"procedure_id": str(procedure_id)})
    return cancelled
