"""Submitting procedures in the caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from django_procedures import clock, signals
from django_procedures.conf import conf
from django_procedures.models import ProcedureRun
from django_procedures.policy.state import check_state
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.procedure import Procedure


def resolve_run_at(run_after: datetime | timedelta | None, now: datetime) -> datetime:
    if run_after is None:
        return now
    if isinstance(run_after, timedelta):
        return now + run_after
    if timezone.is_naive(run_after):
        raise ValueError("run_after must be an aware datetime or a timedelta")
    return run_after


def _parent_ids(parent: Any) -> tuple[uuid.UUID | None, uuid.UUID | None]:
    """``(parent_id, root_id)`` for a parent given as a handle, a ``ProcedureRun`` or an id."""
    if parent is None:
        return None, None
    parent_id = uuid.UUID(str(getattr(parent, "id", parent)))
    row = ProcedureRun.objects.filter(id=parent_id).values("root_id").first()
    if row is None:
        raise ValueError(f"parent procedure {parent_id} does not exist")
    return parent_id, row["root_id"] or parent_id


def submit_many(
    cls: type[Procedure],
    states: Sequence[Mapping[str, Any] | None],
    *,
    keys: Sequence[str | None] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    parent: Any = None,
) -> list[ProcedureHandle]:
    """Insert one ``ProcedureRun`` per state with one INSERT; existing idempotency keys insert nothing.

    Raises ``TypeError`` (before writing anything) when a state is not strict JSON.
    """
    from django_procedures.handle import ProcedureHandle

    if cls.abstract:
        raise TypeError(f"{cls.__qualname__} is abstract; submit one of its concrete subclasses")
    if keys is None:
        keys = [None] * len(states)
    if len(keys) != len(states):
        raise ValueError(f"got {len(states)} states but {len(keys)} keys; pass one key (or None) per state")
    plain_states: list[dict[str, Any]] = []
    for i, state in enumerate(states):
        if state is not None and not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict (a JSON object); got {type(state).__name__}")
        plain = dict(state or {})
        check_state(plain, "state" if len(states) == 1 else f"states[{i}]")
        plain_states.append(plain)

    now = clock.now()
    queue = queue or cls.queue or conf.DEFAULT_QUEUE
    priority = cls.priority if priority is None else priority
    run_at = resolve_run_at(run_after, now)
    parent_id, root_id = _parent_ids(parent)
    rows = [
        ProcedureRun(
            id=uuid.uuid4(), type_name=cls.type_name, state=state, step_name=cls.steps[0].name, queue=queue,
            priority=priority, key=key, run_at=run_at, created_at=now, parent_id=parent_id, root_id=root_id,
        )
        for state, key in zip(plain_states, keys, strict=True)
    ]
    if not rows:
        return []
    wanted_keys = {key for key in keys if key is not None}
    if wanted_keys:
        ProcedureRun.objects.bulk_create(rows, ignore_conflicts=True)
        stored = dict(ProcedureRun.objects.filter(key__in=wanted_keys).values_list("key", "id"))
        ids = [stored[row.key] if row.key is not None else row.id for row in rows]
    else:
        ProcedureRun.objects.bulk_create(rows)
        ids = [row.id for row in rows]
    created = {row.id for row in rows} & set(ids)
    if created:
        notify([queue])
        for row in rows:
            if row.id in created:
                send_after_commit(signals.procedure_submitted, procedure_id=row.id, type_name=row.type_name)
    return [ProcedureHandle(pid) for pid in ids]
