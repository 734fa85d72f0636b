"""The procedure page's content: tree with reasons, step timeline, leases, redacted JSON.

The step timeline never reads the ``Step`` rows' state checkpoints: only the redacted current state is shown.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.safestring import mark_safe

from django_procedures.admin.display import (
    FINAL,
    LEASED,
    attempts_made,
    attempts_text,
    pretty_json,
    run_duration,
    step_label,
)
from django_procedures.admin.progress import children_bar, progress_bar
from django_procedures.admin.reads import Node, Tree, lease_clock, load_tree, procedure_class, step_total
from django_procedures.admin.redaction import redaction_for
from django_procedures.admin.tree_timeline import text_version, tree_timeline
from django_procedures.admin.why import Reason, explain
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import RunStatus
from django_procedures.store import operations
from django_procedures.tasks.types import TYPE_PREFIX, is_task_type

STEP_LIMIT = 500
LEASE_LIMIT = 100


@dataclass
class TreeLine:
    """One line of the nested tree list: the node, its depth change markers and why it is not running."""

    node: Node
    step: str
    attempts: int | None
    reasons: tuple[Reason, ...]
    current: bool
    opens: bool  # this node has children: the template opens a nested list after it
    closes: int  # nested lists to close after this node

    @property
    def close_tags(self) -> str:
        return mark_safe("</ul></li>" * self.closes)  # constant markup


@dataclass
class TimelineRow:
    index: int
    name: str
    status: str
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    duration: str
    error: str


def tree_lines(tree: Tree, current_id: Any, now: datetime, lease_now: datetime) -> list[TreeLine]:
    """The tree flattened depth-first for a nested ``<ul>``, each unfinished node with its reasons."""
    lines: list[TreeLine] = []
    if tree.root is None:
        return lines

    def visit(node: Node, depth: int) -> None:
        row = node.row
        total, machine = step_total(row.type_name)
        reasons = explain(node.facts, now, lease_now) if node.facts is not None else ()
        lines.append(TreeLine(node, step_label(row.step, row.step_name, total, machine=machine,
                                               in_rollback=row.in_rollback and row.status not in FINAL),
                              attempts_made(row.status, row.attempt), reasons, row.id == current_id,
                              bool(node.children), 0))
        for child in node.children:
            visit(child, depth + 1)
        if node.children:
            lines[-1].closes += 1

    visit(tree.root, 0)
    return lines


def timeline(run: ProcedureRun, now: datetime) -> tuple[list[TimelineRow], bool]:
    """Ended step attempts in order, then the step in flight or next to run; and whether rows were cut."""
    steps = list(Step.objects.filter(procedure_id=run.id).order_by("index", "attempt", "id")
                 .values_list("index", "name", "status", "attempt", "started_at", "finished_at", "error")
                 [:STEP_LIMIT + 1])
    cut = len(steps) > STEP_LIMIT
    out = [TimelineRow(i, name, status, attempt, started, finished, run_duration(started, finished, now), error)
           for i, name, status, attempt, started, finished, error in steps[:STEP_LIMIT]]
    if run.status in LEASED and run.step_name:
        name = "rollback" if run.in_rollback else run.step_name
        out.append(TimelineRow(run.step, name, "running", run.attempt, run.step_started_at, None,
                               run_duration(run.step_started_at, None, now), ""))
    elif run.status not in FINAL and run.step_name:
        out.append(TimelineRow(run.step, run.step_name, "next", run.attempt, None, None, "—", ""))
    return out, cut


#: How the default ``on_child_failed`` words the parent's error (``ChildFailed`` through ``error_text``).
_CHILD_FAILED = re.compile(r"^ChildFailed: child \S+ ([0-9a-f-]{36}) ended")


def failed_child(run: ProcedureRun, node: Node) -> ProcedureRun | None:
    """The child whose failure failed ``run`` (the default ``on_child_failed``), or None.

    Such a parent's ``failed_step`` names the step it would have run next, which
    never ran; the page says "child failed" and links the child instead.
    """
    match = _CHILD_FAILED.match(run.error or "")
    if match is None or run.status not in (RunStatus.FAILED, RunStatus.ROLLED_BACK, RunStatus.ROLLING_BACK):
        return None
    try:
        child_id = uuid.UUID(match.group(1))
    except ValueError:
        return None
    child = next((c.row for c in node.children if c.row.id == child_id), None)
    return child or ProcedureRun.objects.filter(id=child_id).only("id", "type_name", "status", "error").first()


def page_context(run: ProcedureRun) -> dict[str, Any]:
    """Everything the procedure page shows about ``run`` (a fixed number of queries)."""
    now = timezone.now()
    lease_now = lease_clock()
    tree = load_tree(run)
    steps, steps_cut = timeline(run, now)
    leases = list(Lease.objects.filter(procedure_id=run.id).order_by("-token")[:LEASE_LIMIT])
    for lease in leases:
        lease.held = run_duration(lease.claimed_at, lease.released_at, lease_now)
    redaction = redaction_for(run.type_name)
    total, machine = step_total(run.type_name)
    node = tree.nodes[run.id]
    picture = tree_timeline(tree, run.id, now)
    children = [c for c in node.children if c.row.spawned_in == max(
        (k.row.spawned_in for k in node.children), default=0)]  # of the latest suspension
    return {
        "run": run,
        "ancestors": tree.ancestors,
        "tree_lines": tree_lines(tree, run.id, now, lease_now),
        "tree_truncated": tree.truncated,
        "tree_size": len(tree.nodes),
        "timeline": picture,
        "timeline_text": text_version(picture) if picture is not None else [],
        "reasons": explain(node.facts, now, lease_now) if node.facts is not None else (),
        "step_text": step_label(run.step, run.step_name, total, machine=machine,
                                in_rollback=run.in_rollback and run.status not in FINAL),
        "attempts": attempts_made(run.status, run.attempt),
        "attempts_text": attempts_text(run.status, run.attempt, run.failures, run.lost, run.manual_retries),
        "type_known": procedure_class(run.type_name) is not None,
        "steps": steps,
        "steps_cut": steps_cut,
        "leases": leases,
        "lease_limit": LEASE_LIMIT,
        "redacted_keys": redaction.keys,
        "redaction_note": redaction.note,
        "state_json": pretty_json(redaction.apply(run.state)),
        "output_json": None if run.output is None else pretty_json(redaction.apply(run.output)),
        "lock_keys": [(name, mode) for name, mode in (run.lock_keys or [])],
        "duration": run_duration(run.started_at, run.finished_at, now),
        "failed_child": failed_child(run, node),
        # What a retry would bring back with a parent failed by its children (store.operations.retry's own plan).
        "retry_tree": operations.tree_plan(run) if run.status == RunStatus.FAILED and run.failure_can_retry
        and run.suspension else None,
        "progress_bar": progress_bar(run.progress),
        "progress_at": run.progress_updated_at,
        "children_bar": children_bar(sum(c.row.status == RunStatus.DONE for c in children), len(children)),
        # A task of Django's Tasks framework: its function; the state holds its arguments, the output its return value.
        "task_function": run.type_name.removeprefix(TYPE_PREFIX) if is_task_type(run.type_name) else None,
        "now": now,
    }
