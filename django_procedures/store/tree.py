"""Procedure trees: a parent waiting for its children, children finishing, subtrees cancelled."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q

from django_procedures import clock, signals
from django_procedures.models import Lease, ProcedureRun
from django_procedures.policy.status import FINAL, LeaseOutcome, RunStatus
from django_procedures.store import locks
from django_procedures.store.db import db_now
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify

#: A finished child's failure that its parent has to hear about.
FAILED_CHILD = (RunStatus.FAILED, RunStatus.ROLLED_BACK, RunStatus.CANCELLED)


@dataclass(frozen=True)
class ChildResult:
    """A finished child of the last suspension, as ``ctx.children`` and ``on_child_failed`` see it."""

    id: uuid.UUID
    type_name: str
    status: str
    output: Any
    error: str


def lock_rows(ids: Sequence[Any]) -> None:
    """Lock rows in the one lock order: ancestors before descendants, then by id."""
    ids = [i for i in ids if i is not None]
    if ids:
        list(ProcedureRun._writer.select_for_update().filter(id__in=ids).order_by("depth", "id")
             .values_list("id", flat=True))


def child_finished(child_id: uuid.UUID, parent_id: uuid.UUID | None, spawned_in: int, *, failed: bool) -> None:
    """In the child's final transaction (parent row locked first): count it off its parent's suspension.

    The last child makes the parent ready; a failed child makes it ready at once
    (its ``on_child_failed`` runs under the parent's next lease).
    """
    if parent_id is None or not spawned_in:
        return
    parent = (ProcedureRun._writer.filter(id=parent_id, suspension=spawned_in).exclude(status__in=FINAL)
              .values("pending_children", "status", "queue").first())
    if parent is None:
        return
    left = max(parent["pending_children"] - 1, 0)
    fields: dict[str, Any] = {"pending_children": left}
    if parent["status"] == RunStatus.WAITING and (left == 0 or failed):
        fields.update(status=RunStatus.READY, run_at=clock.now())
        notify([parent["queue"]])
    ProcedureRun._writer.filter(id=parent_id).update(**fields)


def children_of(parent_id: uuid.UUID, suspension: int) -> list[ChildResult]:
    """The finished children of the parent's suspension number ``suspension``."""
    rows = (ProcedureRun._writer.filter(parent_id=parent_id, spawned_in=suspension, status__in=FINAL)
            .order_by("position").values_list("id", "type_name", "status", "output", "error"))
    return [ChildResult(*row) for row in rows]


def unhandled_failures(parent_id: uuid.UUID, suspension: int) -> list[ChildResult]:
    rows = (ProcedureRun._writer.filter(parent_id=parent_id, spawned_in=suspension, status__in=FAILED_CHILD,
                                        failure_handled=False)
            .order_by("finished_at", "id").values_list("id", "type_name", "status", "output", "error"))
    return [ChildResult(*row) for row in rows]


def subtree(procedure_id: uuid.UUID) -> list[uuid.UUID]:
    """``procedure_id`` and all its descendants."""
    root = ProcedureRun._writer.filter(id=procedure_id).values_list("root_id", flat=True).first() or procedure_id
    children: dict[Any, list[Any]] = defaultdict(list)
    for pid, parent in ProcedureRun._writer.filter(Q(root_id=root) | Q(id=root)).values_list("id", "parent_id"):
        children[parent].append(pid)
    found, stack = [], [procedure_id]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def cancel_subtree(procedure_id: uuid.UUID, reason: str, *, include_self: bool = True) -> list[uuid.UUID]:
    """Cancel every unfinished member of the subtree, fencing out running ones by bumping their lease token.

    Runs in the caller's transaction; rows are locked in the lock order.
    """
    members = subtree(procedure_id)
    if not include_self:
        members = [m for m in members if m != procedure_id]
    if not members:
        return []
    lock_rows(members)
    unfinished = list(ProcedureRun._writer.filter(id__in=members).exclude(status__in=FINAL)
                      .values_list("id", "type_name"))
    ids = [pid for pid, _ in unfinished]
    if not ids:
        return []
    open_leases = Lease._writer.filter(procedure_id__in=ids, released_at__isnull=True)
    open_leases.update(released_at=db_now(), outcome=LeaseOutcome.LOST)
    ProcedureRun._writer.filter(id__in=ids).update(
        status=RunStatus.CANCELLED, lease_token=F("lease_token") + 1, lease_owner="", lease_expires_at=None,
        in_unsafe_step=False, waiting_for_keys=False, pending_children=0, finished_at=clock.now(), error=reason)
    if not include_self:  # its descendants are all final now: it waits for none of them any more
        ProcedureRun._writer.filter(id=procedure_id).update(pending_children=0)
    locks.release(ids)
    for pid, type_name in unfinished:
        send_after_commit(signals.procedure_cancelled, procedure_id=pid, type_name=type_name)
    return ids
