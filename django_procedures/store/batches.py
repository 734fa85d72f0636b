"""Retry or cancel many procedures, one store transaction each: the admin's actions and ``manage.py procedures``.

A refusal of one procedure is reported, not raised, so the others go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.status import RunStatus
from django_procedures.store import operations


@dataclass(frozen=True)
class RetryReport:
    """What ``retry_procedures`` did: the ids retried, the ones refused with the store's reason, and for each
    retried parent failed by its children the descendants retried with it."""

    retried: tuple[uuid.UUID, ...] = ()
    refused: tuple[tuple[uuid.UUID, str], ...] = ()
    descendants: dict[uuid.UUID, tuple[uuid.UUID, ...]] = field(default_factory=dict)


def retry_procedures(ids: Sequence[uuid.UUID], *, by: str) -> RetryReport:
    """Retry each procedure through ``store.operations.retry``; a refusal is reported, not raised."""
    retried, refused, descendants = [], [], {}
    for pid in ids:
        try:
            tree = operations.retry(pid, by=by)
        except InvalidOperation as error:
            refused.append((pid, str(error)))
        else:
            retried.append(pid)
            if tree.descendants:
                descendants[pid] = tuple(r.member.id for r in tree.descendants)
    return RetryReport(tuple(retried), tuple(refused), descendants)


@dataclass(frozen=True)
class CancelReport:
    """What ``cancel_procedures`` did: per selected procedure the ids cancelled, and the ones unchanged."""

    cancelled: dict[uuid.UUID, tuple[uuid.UUID, ...]] = field(default_factory=dict)
    unchanged: tuple[tuple[uuid.UUID, str], ...] = ()

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.cancelled.values())


def cancel_procedures(ids: Sequence[uuid.UUID], *, by: str) -> CancelReport:
    """Cancel each procedure and its unfinished subtree through ``store.operations.cancel``, ancestors first."""
    depth = dict(ProcedureRun.objects.filter(id__in=list(ids)).values_list("id", "depth"))
    cancelled: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {}
    unchanged = []
    done: set[uuid.UUID] = set()
    for pid in sorted(depth, key=lambda p: (depth[p], str(p))):
        if pid in done:
            unchanged.append((pid, f"procedure {pid} was cancelled with an ancestor selected with it"))
            continue
        try:
            result = operations.cancel(pid, by=by)
        except InvalidOperation as error:
            unchanged.append((pid, str(error)))
            continue
        if result.changed:
            cancelled[pid] = tuple(uuid.UUID(str(c)) for c in result.cancelled)
            done |= set(cancelled[pid])
        else:
            unchanged.append((pid, result.message))
    for pid in ids:
        if pid not in depth:
            unchanged.append((pid, f"procedure {pid} does not exist"))
    return CancelReport(cancelled, tuple(unchanged))


def retry_refusals(runs: Sequence[ProcedureRun]) -> dict[uuid.UUID, str]:
    """Why ``retry`` would refuse each of ``runs`` now (the store's own rules), by id; the others are absent.

    Read without locks, for a plan shown before acting: ``operations.retry`` checks again under its locks.
    """
    parents = operations.parents_of(runs)
    schedules = Schedule.objects.in_bulk({r.schedule_id for r in runs if r.schedule_id is not None})
    found: dict[uuid.UUID, str] = {}
    for run in runs:
        if run.status != RunStatus.FAILED:
            found[run.id] = f"it is {run.status.replace('_', ' ')}; only failed procedures can be retried"
        elif not run.failure_can_retry:
            found[run.id] = "its failure is marked not worth a manual retry; submit a new procedure instead"
        else:
            refusal = (operations.retry_refusal(run, parents.get(run.parent_id), schedules.get(run.schedule_id))
                       or operations.tree_plan(run).refusal)
            if refusal:
                found[run.id] = refusal
    return found
