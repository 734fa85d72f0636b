"""What every final transition does besides its own columns, in the same transaction."""

from __future__ import annotations

import uuid

from django_procedures.models import Schedule
from django_procedures.store import locks, tree


def lock_for_final(schedule_id: int | None, parent_id: uuid.UUID | None) -> None:
    """Lock what a final transition will update, in the lock order: the schedule, then the parent."""
    if schedule_id is not None:
        list(Schedule._writer.select_for_update().filter(id=schedule_id).values_list("id", flat=True))
    tree.lock_rows([parent_id])


def finished(procedure_id: uuid.UUID, *, parent_id: uuid.UUID | None, spawned_in: int, schedule_id: int | None,
             failed: bool, has_keys: bool = True) -> None:
    """Release the procedure's lock keys, count it off its parent, and complete its schedule run.

    ``has_keys=False`` (the procedure was submitted without lock keys) saves the key lookup.
    """
    from django_procedures.store import schedules

    if has_keys:
        locks.release([procedure_id])
    tree.child_finished(procedure_id, parent_id, spawned_in, failed=failed)
    if schedule_id is not None:
        schedules.run_finished(schedule_id, procedure_id, failed=failed)
