"""Whether a manual retry may make a failed procedure ready again, given its parent and its schedule.

A manual retry takes a final procedure out of its final status, so it must
take back what its final transition gave up: a child counts as pending again
for the suspension of its parent that started it, and a scheduled run holds
a slot of its schedule again. These decide whether that is possible; the
store applies them under the parent's and the schedule's row locks, and the
admin's confirmation page says the same thing before anything happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_procedures.policy.status import FINAL, RunStatus


@dataclass(frozen=True)
class ParentView:
    """The parent of a procedure to retry, as its row says now."""

    id: Any
    type_name: str
    status: str
    suspension: int
    waiting_for: str = "children"


def child_refusal(spawned_in: int, parent: ParentView) -> str | None:
    """Why a failed child started by its parent's suspension ``spawned_in`` cannot be retried now, or None.

    It can while its parent still waits (``waiting``) on that suspension; the
    retry then counts it as pending again, so the parent continues only once
    it finishes. Otherwise nothing would wait for its result, and counting it
    would corrupt the parent's count.
    """
    name = f"its parent {parent.type_name} {parent.id}"
    status = parent.status.replace("_", " ")
    if parent.status in FINAL:
        return (f"{name} is already {status}, so nothing would wait for its result; retry the parent if it "
                "failed (its on_child_failed sees this child's failure again), or submit a new procedure")
    if parent.suspension != spawned_in:
        return (f"{name} has moved on past the children this one belongs to (it is {status}), so nothing would "
                "wait for its result; submit a new procedure instead")
    if parent.status == RunStatus.WAITING and parent.waiting_for != "children":
        waits = {"timer": "a timer (it sleeps)", "event": "an event"}.get(parent.waiting_for, parent.waiting_for)
        return (f"{name} has moved on past the children this one belongs to (it waits for {waits}), so nothing "
                "would wait for its result; submit a new procedure instead")
    if parent.status != RunStatus.WAITING:
        return (f"{name} is {status}, and a child is retried only while its parent waits for its children; "
                "try again once the parent is waiting (if it moves on or fails instead, retry or resubmit the "
                "parent)")
    return None


def slot_refusal(schedule_name: str, *, active_runs: int, max_concurrency: int) -> str | None:
    """Why a failed run of a schedule cannot be retried now (no free slot), or None."""
    if active_runs < max_concurrency:
        return None
    return (f"its schedule {schedule_name!r} has no free slot ({active_runs} of {max_concurrency} runs active), "
            "and a retried run holds one again; retry it once a run finishes, or raise the schedule's "
            "max_concurrency")
