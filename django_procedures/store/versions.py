"""Where the runs that are not final stand, for check W005 (a step list changed while its version did not)."""

from __future__ import annotations

from collections.abc import Sequence

from django_procedures.models import ProcedureRun
from django_procedures.policy.status import UNFINISHED
from django_procedures.policy.versions import Position


def positions(type_names: Sequence[str]) -> list[Position]:
    """The distinct (type, version, step count, next step) of unfinished runs of ``type_names``.

    Read through ``procedures_status_idx`` (the unfinished statuses): its cost follows the backlog, not the history.
    """
    rows = (ProcedureRun.objects.filter(status__in=UNFINISHED, type_name__in=type_names)
            .values_list("type_name", "version", "step", "step_name").distinct().order_by())
    return [Position(*row) for row in rows]
