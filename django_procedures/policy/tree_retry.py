"""What a manual retry of a procedure brings back with it: the children whose failure failed it.

A parent failed by its children (its ``on_child_failed`` raised, as the
default does) would fail again at once if only it were retried: on resuming it
takes stock of its last suspension and is told about the same failed children.
So a retry is tree-aware. Below the retried procedure, every child of its last
suspension whose failure it has not handled is brought back with it:

* a ``failed`` child with ``failure_can_retry`` is retried, and so, first, are
  its own unhandled children if its children failed it (recursively);
* a child ``cancelled`` only because this failure cancelled the failed run's
  unfinished descendants (the reason :func:`collateral_reason` words) resumes
  from its last checkpoint, with its own such children;
* any other unhandled child (failed with a failure not worth a manual retry,
  rolled back, cancelled by an operator) refuses the whole retry, saying why.

Each run brought back waits for the children brought back with it (``waiting``,
counted as pending), or is ``ready`` when there are none; so a parent resumes
once they finish, at the step after its suspension, and its ``ctx.children``
sees their new outcomes. Children whose failure the parent handled (its hook
returned) and children that ended ``done`` are left as they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django_procedures.policy.status import FINAL, UNSUCCESSFUL, RunStatus


def collateral_reason(failed_id: Any) -> str:
    """The error a descendant gets when it is cancelled because ``failed_id`` failed for good."""
    return f"cancelled: ancestor {failed_id} failed"


@dataclass(frozen=True)
class Member:
    """A procedure of the tree being retried, as its row says now."""

    id: Any
    type_name: str
    status: str
    parent_id: Any
    spawned_in: int
    suspension: int
    failure_can_retry: bool
    failure_handled: bool
    error: str


@dataclass(frozen=True)
class Revival:
    """One procedure the retry brings back, and how many children of its last suspension it then waits for."""

    member: Member
    waits_for: int

    @property
    def status(self) -> RunStatus:
        return RunStatus.WAITING if self.waits_for else RunStatus.READY


@dataclass(frozen=True)
class TreeRetry:
    """The procedures a retry brings back (the retried one first, every parent before its children), or why not."""

    revivals: tuple[Revival, ...] = ()
    refusal: str | None = None

    @property
    def descendants(self) -> tuple[Revival, ...]:
        return self.revivals[1:]

    def describe(self) -> str:
        """What happens below the retried procedure, for the admin's confirmation page."""
        failed = sum(1 for r in self.descendants if r.member.status == RunStatus.FAILED)
        resumed = len(self.descendants) - failed
        parts = []
        if failed:
            parts.append(f"retries {failed} failed {'child' if failed == 1 else 'children'}")
        if resumed:
            parts.append(f"resumes {resumed} {'child' if resumed == 1 else 'children'} cancelled by its failure")
        if not parts:
            return ""
        return " and ".join(parts) + (", and" if resumed else " and") + (
            " waits for it" if len(self.descendants) == 1 else " waits for them")


def _child_refusal(child: Member, anchor: Any) -> str | None:
    """Why an unhandled child of the tree cannot come back with it (``anchor``: the failed run above it), or None."""
    name = f"its child {child.type_name} {child.id}"
    if child.status == RunStatus.FAILED:
        if child.failure_can_retry:
            return None
        return (f"{name} failed with an error marked not worth a manual retry ({child.error[:200]}), and the parent "
                "would fail again at once on it; submit a new procedure instead")
    if child.status == RunStatus.CANCELLED:
        if child.error == collateral_reason(anchor):
            return None
        return (f"{name} was cancelled ({child.error[:200] or 'no reason given'}), and a cancelled procedure is not "
                "retried, so the parent would fail again at once on it; submit a new procedure instead")
    return (f"{name} is {child.status.replace('_', ' ')} (only failed procedures can be retried), so the parent "
            "would fail again at once on it; submit a new procedure instead")


def plan(target: Member, descendants: Iterable[Member]) -> TreeRetry:
    """What retrying the failed ``target`` brings back from its ``descendants`` (all of them, any order).

    The caller has checked that ``target`` itself may be retried.
    """
    children: dict[tuple[Any, int], list[Member]] = defaultdict(list)
    for member in descendants:
        children[(member.parent_id, member.spawned_in)].append(member)
    revivals: list[Revival] = []

    def visit(run: Member, anchor: Any) -> str | None:
        last = children.get((run.id, run.suspension), []) if run.suspension else []
        back = [c for c in last if c.status in UNSUCCESSFUL and not c.failure_handled]
        unfinished = sum(1 for c in last if c.status not in FINAL)
        revivals.append(Revival(run, len(back) + unfinished))
        for child in back:
            refusal = _child_refusal(child, anchor)
            if refusal is None:
                refusal = visit(child, child.id if child.status == RunStatus.FAILED else anchor)
            if refusal is not None:
                return refusal if run is target else f"{refusal} (below {run.type_name} {run.id})"
        return None

    refusal = visit(target, target.id)
    if refusal is not None:
        return TreeRetry(refusal=refusal)
    return TreeRetry(tuple(revivals))
