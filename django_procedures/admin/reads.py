"""Read-only queries of the admin: a procedure's tree and what blocks its members, subtrees, the clock.

Nothing here writes; every state change goes through ``django_procedures.store``.
Each function is a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from django_procedures import clock, registry
from django_procedures.admin.why import KeyWait, NodeFacts
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import KeyRequest, Lease, LimitUse, ProcedureRun
from django_procedures.policy.status import CLAIMABLE, FINAL, LEASED, RunStatus

#: Columns the list, the tree and the confirmation pages show (never the large state/output/traceback).
ROW_FIELDS = ("id", "type_name", "status", "step", "step_name", "attempt", "failures", "lost", "parent_id",
              "root_id", "depth", "spawned_in", "position", "pending_children", "waiting_for_keys", "lock_keys",
              "in_rollback", "queue", "priority", "key", "run_at", "lease_token", "lease_owner", "lease_expires_at",
              "error", "failure_can_retry", "created_at", "started_at", "finished_at", "progress",
              "step_started_at", "retried_at", "waiting_for", "wake_at", "version",
              "waiting_events", "limits")
#: Most members of one tree the procedure page loads.
TREE_LIMIT = 500


def procedure_class(type_name: str) -> Any:
    """The registered class of ``type_name``, or None when this process does not know it."""
    try:
        return registry.get(type_name)
    except UnknownProcedureType:
        return None


def step_total(type_name: str) -> tuple[int | None, bool]:
    """``(number of steps, is a state machine)`` of the registered class; ``(None, False)`` if unknown."""
    cls = procedure_class(type_name)
    if cls is None:
        return None, False
    return len(cls.steps), cls.uses_execute()


def lease_clock() -> datetime:
    """The database's clock, which leases are written with (one query on PostgreSQL)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


@dataclass
class Node:
    """One member of a tree as the procedure page shows it."""

    row: ProcedureRun
    children: list[Node] = field(default_factory=list)
    facts: NodeFacts | None = None


@dataclass
class Tree:
    root: Node | None
    nodes: dict[uuid.UUID, Node]
    truncated: bool
    ancestors: list[ProcedureRun]


def load_tree(run: ProcedureRun, limit: int | None = None) -> Tree:
    """The tree ``run`` belongs to, with the facts of its unfinished members.

    Up to ``limit`` members, shallowest first; a larger tree still shows the
    path from the root to ``run`` and ``run``'s own children. A fixed number
    of queries: the members, ``run``'s children, the lock keys waited for, who
    holds them, the open leases (plus one per ancestor missing from a cut tree).
    """
    limit = TREE_LIMIT if limit is None else limit
    root_id = run.root_id or run.id
    order = ("depth", "spawned_in", "position", "created_at", "id")
    rows = list(ProcedureRun.objects.filter(Q(id=root_id) | Q(root_id=root_id)).only(*ROW_FIELDS)
                .order_by(*order)[:limit + 1])
    truncated = len(rows) > limit
    by_id = {r.id: r for r in rows[:limit]}
    by_id.setdefault(run.id, run)
    if truncated:
        for child in ProcedureRun.objects.filter(parent_id=run.id).only(*ROW_FIELDS).order_by(*order)[:limit]:
            by_id.setdefault(child.id, child)
    ancestors: list[ProcedureRun] = []
    parent_id = run.parent_id
    while parent_id is not None and len(ancestors) <= run.depth:
        parent = by_id.get(parent_id) or ProcedureRun.objects.only(*ROW_FIELDS).filter(id=parent_id).first()
        if parent is None:
            break
        by_id.setdefault(parent.id, parent)
        ancestors.append(parent)
        parent_id = parent.parent_id
    ancestors.reverse()
    nodes = {pid: Node(row) for pid, row in by_id.items()}
    _add_facts(nodes)
    for node in nodes.values():
        parent_node = nodes.get(node.row.parent_id) if node.row.parent_id else None
        if parent_node is not None:
            parent_node.children.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.row.spawned_in, n.row.position, n.row.created_at, str(n.row.id)))
    return Tree(nodes.get(root_id), nodes, truncated, ancestors)


def _add_facts(nodes: dict[uuid.UUID, Node]) -> None:
    unfinished = [pid for pid, n in nodes.items() if n.row.status not in FINAL]
    waits = key_waits(unfinished)
    leased = [pid for pid in unfinished if nodes[pid].row.status in LEASED]
    lengths = lease_lengths({pid: nodes[pid].row.lease_token for pid in leased})
    left = unfinished_children([pid for pid in unfinished if nodes[pid].row.status == RunStatus.WAITING])
    full = limits_full([nodes[pid].row for pid in unfinished if nodes[pid].row.status in CLAIMABLE])
    for pid in unfinished:
        nodes[pid].facts = facts_of(nodes[pid].row, waits.get(pid, ()), lengths.get(pid), left.get(pid, 0),
                                    full.get(pid, ()))


def unfinished_children(parent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Unfinished children of each waiting parent, counted now (children ending ``done`` do not count
    themselves off ``pending_children``: the last one wakes the parent)."""
    if not parent_ids:
        return {}
    rows = (ProcedureRun.objects.filter(parent_id__in=parent_ids, spawned_in__gt=0).exclude(status__in=FINAL)
            .values_list("parent_id").annotate(n=Count("id")).order_by())
    return dict(rows)


def limits_full(rows: Sequence[ProcedureRun]) -> dict[uuid.UUID, tuple[str, ...]]:
    """For each ready or retrying row with limits (its own, or its queue's), the limits full now, in words
    (``"crm-api: 5 of 5 running"``); one query for the limit rows."""
    from django_procedures.conf import conf
    from django_procedures.policy.limits import Use, admits, parse, queue_limits

    try:
        by_queue = queue_limits(conf.QUEUES)
    except (TypeError, ValueError):  # check E021 says what is wrong
        by_queue = {}
    wanted = {row.id: parse(row.limits) + by_queue.get(row.queue, []) for row in rows}
    wanted = {pid: limits for pid, limits in wanted.items() if limits}
    if not wanted:
        return {}
    names = {limit.name for limits in wanted.values() for limit in limits}
    uses = {name: Use(in_use, recent) for name, in_use, recent in
            LimitUse.objects.filter(name__in=names).with_use(clock.now()).values_list("name", "in_use", "recent")}
    found = {}
    for pid, limits in wanted.items():
        full = tuple(text for limit in limits if (text := admits([limit], uses)))
        if full:
            found[pid] = full
    return found


def facts_of(row: ProcedureRun, waits: Sequence[KeyWait] = (), lease_seconds: float | None = None,
             unfinished: int | None = None, limits_full: Sequence[str] = ()) -> NodeFacts:
    """What the "why" column says of ``row``; ``unfinished``: its unfinished children, if counted."""
    cls = procedure_class(row.type_name)
    return NodeFacts(
        status=row.status, run_at=row.run_at,
        pending_children=row.pending_children if unfinished is None else unfinished,
        waiting_for_keys=row.waiting_for_keys, key_waits=tuple(waits), lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at, lease_seconds=lease_seconds,
        type_known=cls is not None, type_name=row.type_name,
        in_rollback=row.in_rollback, attempt=row.attempt, error=row.error, waiting_for=row.waiting_for,
        wake_at=row.wake_at, waiting_events=tuple(row.waiting_events or ()), version=row.version,
        code_version=cls.version if cls is not None else None, limits_full=tuple(limits_full))


def key_waits(procedure_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[KeyWait]]:
    """For each procedure, the keys it waits for and their holders (two queries)."""
    if not procedure_ids:
        return {}
    wanted = list(KeyRequest.objects.filter(procedure_id__in=procedure_ids, granted=False)
                  .order_by("requested_at", "id").values_list("procedure_id", "name", "mode"))
    if not wanted:
        return {}
    holders: dict[str, list[str]] = defaultdict(list)
    for name, holder in (KeyRequest.objects.filter(name__in={n for _, n, _ in wanted}, granted=True)
                         .order_by("requested_at", "id").values_list("name", "procedure_id")):
        holders[name].append(str(holder))
    found: dict[uuid.UUID, list[KeyWait]] = defaultdict(list)
    for pid, name, mode in wanted:
        found[pid].append(KeyWait(name, mode, tuple(h for h in holders[name] if h != str(pid))))
    return found


def lease_lengths(tokens: dict[uuid.UUID, int]) -> dict[uuid.UUID, float]:
    """Seconds each current lease was granted for (``expires_at - claimed_at`` of its ``Lease`` row)."""
    if not tokens:
        return {}
    rows = Lease.objects.filter(procedure_id__in=list(tokens), released_at__isnull=True).values_list(
        "procedure_id", "token", "claimed_at", "expires_at")
    return {pid: (expires - claimed).total_seconds() for pid, token, claimed, expires in rows
            if tokens.get(pid) == token and claimed is not None and expires is not None}


def subtrees(ids: Iterable[Any]) -> dict[uuid.UUID, list[ProcedureRun]]:
    """Each procedure of ``ids`` with its descendants (itself first, then depth-first); two queries."""
    selected = list(ProcedureRun.objects.filter(id__in=list(ids)).only(*ROW_FIELDS))
    roots = {r.root_id or r.id for r in selected}
    members = list(ProcedureRun.objects.filter(Q(id__in=roots) | Q(root_id__in=roots)).only(*ROW_FIELDS)
                   .order_by("depth", "spawned_in", "position", "created_at", "id"))
    children: dict[Any, list[ProcedureRun]] = defaultdict(list)
    for member in members:
        children[member.parent_id].append(member)
    found: dict[uuid.UUID, list[ProcedureRun]] = {}
    for run in selected:
        out, stack = [], [run]
        while stack:
            current = stack.pop(0)
            out.append(current)
            stack[:0] = children.get(current.id, [])
        found[run.id] = out
    return found
