"""The operator's two actions, as plain functions: plan (read-only) and perform (through the store).

The admin views call these; tests can too, without a request. Performing
never writes a column here: ``django_procedures.store.batches`` (shared with
``manage.py procedures``) takes each procedure through
``django_procedures.store.operations.retry`` or ``cancel``, one transaction each.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django_procedures.admin.display import step_label
from django_procedures.admin.reads import step_total, subtrees
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.status import FINAL, RunStatus
from django_procedures.policy.tree_retry import Revival
from django_procedures.store import operations
from django_procedures.store.batches import CancelReport, RetryReport, cancel_procedures, retry_procedures

# -- retry -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPlanItem:
    """One selected procedure and what retrying it would do."""

    run: ProcedureRun
    will_retry: bool
    change: str
    #: The descendants retried with it (a parent failed by its children), parents before their children.
    children: tuple[Revival, ...] = ()


def plan_retry(runs: Iterable[ProcedureRun]) -> list[RetryPlanItem]:
    """What "retry" would do to each of ``runs``: only failed, manually retryable ones change.

    The store's own rules decide (``operations.retry_refusal`` and
    ``operations.tree_plan``): a child is retried only while its parent waits
    on the suspension that started it, and then counts as pending for that
    parent again; a run of a schedule only while the schedule has a free slot,
    which it then holds again; a parent failed by its children retries them
    with it and waits for them, or is refused if one of them cannot come back.
    """
    runs = list(runs)
    parents = operations.parents_of(runs)
    schedules = Schedule.objects.in_bulk({r.schedule_id for r in runs if r.schedule_id is not None})
    return [_retry_item(run, parents.get(run.parent_id), schedules.get(run.schedule_id)) for run in runs]


def _retry_item(run: ProcedureRun, parent: Any, schedule: Schedule | None) -> RetryPlanItem:
    if run.status != RunStatus.FAILED:
        return RetryPlanItem(run, False, f"left alone: it is {run.status.replace('_', ' ')}; "
                                         "only failed procedures can be retried")
    if not run.failure_can_retry:
        return RetryPlanItem(run, False, "left alone: its failure is marked not worth a manual retry")
    tree = operations.tree_plan(run)
    refusal = operations.retry_refusal(run, parent, schedule) or tree.refusal
    if refusal:
        return RetryPlanItem(run, False, f"left alone: {refusal}")
    total, machine = step_total(run.type_name)
    at = step_label(run.step, run.step_name, total, machine=machine) if run.step_name else "its last step"
    change = f"failed → ready: resumes at {at} from its last checkpoint, with a fresh retry budget"
    if tree.descendants:
        change = (f"failed → waiting: {tree.describe()}; once they finish it resumes at {at} from its last "
                  "checkpoint, with a fresh retry budget")
    if parent is not None:
        change += (f"; its parent {parent.type_name} {parent.id} waits for it again (the parent goes on "
                   "only once it finishes, and a new failure is reported to the parent again)")
    if schedule is not None:
        change += (f"; it holds a slot of schedule {schedule.name!r} again "
                   f"({schedule.active_runs + 1} of {schedule.max_concurrency} active)")
    return RetryPlanItem(run, True, change, tree.descendants)


# -- cancel ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CancelPlanItem:
    """One selected procedure and the members of its subtree that cancelling it would cancel."""

    run: ProcedureRun
    #: Unfinished members (itself first), each as it is now: these become ``cancelled``.
    members: list[ProcedureRun] = field(default_factory=list)
    #: Finished members of the subtree, left as they are.
    finished: int = 0
    #: Set when nothing changes for this one (already final, or inside another selected subtree).
    note: str = ""


def plan_cancel(ids: Iterable[Any]) -> list[CancelPlanItem]:
    """For each selected procedure: the unfinished members of its subtree that "cancel" would cancel."""
    trees = subtrees(ids)
    ordered = sorted(trees, key=lambda pid: (trees[pid][0].depth, str(pid)))
    covered: dict[uuid.UUID, uuid.UUID] = {}
    items = []
    for pid in ordered:
        run, *_ = members = trees[pid]
        if pid in covered:
            items.append(CancelPlanItem(run, note=f"included in the subtree of {covered[pid]}"))
            continue
        unfinished = [m for m in members if m.status not in FINAL]
        for member in members:
            covered.setdefault(member.id, pid)
        if run.status in FINAL:
            items.append(CancelPlanItem(run, finished=len(members),
                                        note=f"left alone: it is already {run.status.replace('_', ' ')}"))
            continue
        items.append(CancelPlanItem(run, unfinished, len(members) - len(unfinished)))
    return items


__all__ = ["CancelPlanItem", "CancelReport", "RetryPlanItem", "RetryReport", "cancel_procedures", "plan_cancel",
           "plan_retry", "retry_procedures"]
