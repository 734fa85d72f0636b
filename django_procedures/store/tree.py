"""Procedure trees: a parent waiting for its children, children finishing, subtrees cancelled."""

from __future__ import annotations

import functools
import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q

from django_procedures import clock, signals
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import FINAL, LEASED, LeaseOutcome, RunStatus
from django_procedures.policy.waiting import WaitingFor
from django_procedures.store import locks
from django_procedures.store.db import bound_cursor, is_disconnect, is_postgresql, sql_list
from django_procedures.store.events import send_after_commit
from django_procedures.store.fence import close_leases
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.worker")

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
    """In the child's final transaction, after its own final write: wake its parent if it was the last one.

    A failed child wakes the parent at once (its ``on_child_failed`` runs under
    the parent's next lease); its transaction locked the parent row first. A
    child that ends ``done`` does not lock the parent: siblings finishing
    together would queue on that row, each for the whole of the one before's
    commit. It looks for a sibling that is unfinished and not being written
    right now; if there is none it may be the last, and makes the parent ready
    (see :func:`_last_one_wakes`).
    """
    if parent_id is None or not spawned_in:
        return
    if failed:
        _failed_child(parent_id, spawned_in)
    elif not _unfinished_sibling(child_id, parent_id, spawned_in):
        _last_one_wakes(parent_id, spawned_in)


def _failed_child(parent_id: uuid.UUID, suspension: int) -> None:
    """A child failed (parent row locked): the parent is ready now, with its unfinished children counted."""
    parent = (ProcedureRun._writer.filter(id=parent_id, suspension=suspension).exclude(status__in=FINAL)
              .values("status", "waiting_for", "queue").first())
    if parent is None:
        return
    fields: dict[str, Any] = {"pending_children": unfinished_count(parent_id, suspension)}
    if parent["status"] == RunStatus.WAITING and parent["waiting_for"] == WaitingFor.CHILDREN:
        fields.update(status=RunStatus.READY, waiting_for="", run_at=clock.now())
        notify([parent["queue"]])
    ProcedureRun._writer.filter(id=parent_id).update(**fields)


def unfinished_count(parent_id: uuid.UUID, suspension: int) -> int:
    return (ProcedureRun._writer.filter(parent_id=parent_id, spawned_in=suspension).exclude(status__in=FINAL)
            .count())


# A sibling of the finishing child that is unfinished and not in a final transaction right now. Only a leased
# (running) sibling can be in one that ends it ``done``; FOR SHARE conflicts with the row lock of its final write
# and SKIP LOCKED passes such a row by, never waiting. A sibling found leased stays share-locked until this
# commits, so that its own final write comes after this one's and sees it.
_PG_UNFINISHED_SIBLING = f"""
    SELECT EXISTS (
        SELECT FROM {ProcedureRun._meta.db_table}
        WHERE parent_id = %(parent)s AND spawned_in = %(suspension)s AND id <> %(child)s
          AND status NOT IN ({sql_list(FINAL)}) AND status NOT IN ({sql_list(LEASED)})
    ) OR EXISTS (
        SELECT FROM {ProcedureRun._meta.db_table}
        WHERE parent_id = %(parent)s AND spawned_in = %(suspension)s AND id <> %(child)s
          AND status IN ({sql_list(LEASED)})
        LIMIT 1 FOR SHARE SKIP LOCKED
    )
"""
# An unfinished child, waiting for final writes in flight to commit (under the parent's row lock).
_PG_UNFINISHED_CHILD = f"""
    SELECT 1 FROM {ProcedureRun._meta.db_table}
    WHERE parent_id = %s AND spawned_in = %s AND status NOT IN ({sql_list(FINAL)})
    LIMIT 1 FOR SHARE
"""


def _unfinished_sibling(child_id: uuid.UUID, parent_id: uuid.UUID, suspension: int) -> bool:
    """Whether a sibling is unfinished and not being written by another transaction right now.

    The sibling whose final write comes last always finds none: every other
    one has committed (final) or is still in its final transaction (row locked).
    So the parent is never left waiting for finished children. It may be woken
    early, when a running sibling was passed by because its row was locked for
    a checkpoint or a lease renewal: the parent's re-check on resuming
    (:func:`unfinished_child`) sends it back to waiting.
    """
    if not is_postgresql():  # one writer at a time: what this transaction reads is what there is
        return (ProcedureRun._writer.filter(parent_id=parent_id, spawned_in=suspension).exclude(id=child_id)
                .exclude(status__in=FINAL).exists())
    with bound_cursor() as cursor:  # on every child's completion: bound on the server, prepared once
        cursor.execute(_PG_UNFINISHED_SIBLING, {"parent": parent_id, "suspension": suspension, "child": child_id})
        return bool(cursor.fetchone()[0])


def unfinished_child(parent_id: uuid.UUID, suspension: int) -> bool:
    """Under the parent's row lock: whether a child of ``suspension`` is unfinished, once the final
    transactions of its children in flight have committed (it waits for them)."""
    if not is_postgresql():
        return unfinished_count(parent_id, suspension) > 0
    with connection.cursor() as cursor:
        cursor.execute(_PG_UNFINISHED_CHILD, [parent_id, suspension])
        return cursor.fetchone() is not None


def _make_ready(parent_id: uuid.UUID, queue: str) -> None:
    ProcedureRun._writer.filter(id=parent_id).update(status=RunStatus.READY, waiting_for="", run_at=clock.now(),
                                                     pending_children=0)
    notify([queue])


def _last_one_wakes(parent_id: uuid.UUID, suspension: int) -> None:
    """The child may be the last: make the parent ready, in this transaction if its row is free.

    Its row is taken without waiting (``SKIP LOCKED``): this transaction holds
    the child's row, and whoever holds the parent's may be waiting for the
    child's (the lock order is parent, then child). When the parent's row is
    busy, the parent is woken after this commit by :func:`wake_parent`, which
    takes the locks in order. Whoever holds it meanwhile either ends or wakes the
    parent, or leaves it waiting only after waiting for this transaction.
    """
    parent = (ProcedureRun._writer.select_for_update(skip_locked=True, no_key=True)
              .filter(id=parent_id, suspension=suspension).values("status", "waiting_for", "queue").first())
    if parent is None:  # its row is busy (or it moved on: then the wake-up below finds nothing to do)
        transaction.on_commit(functools.partial(_wake_after_commit, parent_id, suspension))
    elif parent["status"] == RunStatus.WAITING and parent["waiting_for"] == WaitingFor.CHILDREN:
        _make_ready(parent_id, parent["queue"])


def _wake_after_commit(parent_id: uuid.UUID, suspension: int) -> None:
    try:
        wake_parent(parent_id, suspension)
    except Exception as error:  # the worker carries on; the sweep's wake_stranded_parents is the net
        # A lost connection is an outage the worker reports once, where it notices it: no traceback here.
        lost = is_disconnect(error)
        logger.warning("could not wake parent %s after its last child finished; the sweep will%s", parent_id,
                       f" ({error})" if lost else "", exc_info=not lost)


def wake_parent(parent_id: uuid.UUID, suspension: int) -> bool:
    """Make the parent ready if it waits on ``suspension`` and no child of it is unfinished; True if it did.

    In a transaction of its own, locks in order: the parent's row, then the
    children's (waiting for their final transactions in flight).
    """
    with transaction.atomic():
        parent = (ProcedureRun._writer.select_for_update(no_key=True)
                  .filter(id=parent_id, suspension=suspension, status=RunStatus.WAITING,
                          waiting_for=WaitingFor.CHILDREN).values("queue").first())
        if parent is None or unfinished_child(parent_id, suspension):
            return False
        _make_ready(parent_id, parent["queue"])
    return True


def wake_stranded_parents() -> int:
    """Safety net run by the sweep: waiting parents none of whose children is unfinished are made ready.

    Only a worker lost between a last child's commit and the parent's wake-up
    after it (:func:`_last_one_wakes`) leaves one behind.
    """
    waiting = ProcedureRun._writer.filter(status=RunStatus.WAITING, waiting_for=WaitingFor.CHILDREN)  # not a sleeper
    unfinished = ProcedureRun._writer.filter(parent_id=OuterRef("id"), spawned_in=OuterRef("suspension")).exclude(
        status__in=FINAL)
    stranded = list(waiting.exclude(Exists(unfinished)).values_list("id", "suspension"))
    return sum(wake_parent(pid, suspension) for pid, suspension in stranded)


@dataclass(frozen=True)
class Stock:
    """What :func:`django_procedures.store.transitions.take_stock` found (see there)."""

    verdict: str
    children: tuple[ChildResult, ...]
    failures: tuple[ChildResult, ...] = ()


def stock(parent_id: uuid.UUID, suspension: int, *, unfinished: bool) -> Stock:
    """The finished children of ``suspension`` in one read; ``unfinished``: whether some child is not final."""
    rows = list(ProcedureRun._writer.filter(parent_id=parent_id, spawned_in=suspension, status__in=FINAL)
                .order_by("position").values_list("id", "type_name", "status", "output", "error", "failure_handled",
                                                  "finished_at"))
    children = tuple(ChildResult(*row[:5]) for row in rows)
    failed = sorted((row for row in rows if row[2] in FAILED_CHILD and not row[5]),
                    key=lambda r: (r[6] is not None, r[6] or 0, str(r[0])))  # in the order they failed
    if failed:
        return Stock("failures", children, tuple(ChildResult(*row[:5]) for row in failed))
    return Stock("waiting" if unfinished else "continue", children)


def subtree(procedure_id: uuid.UUID) -> list[uuid.UUID]:
    """``procedure_id`` and all its descendants, read without locks in one query: for a plan shown before acting
    (a retry's), never for a write -- writers lock with :func:`lock_subtree` and fence on what they planned."""
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


def lock_subtree(procedure_id: uuid.UUID) -> list[uuid.UUID]:
    """Lock ``procedure_id`` and all its descendants, top-down; returns them, ancestors first.

    Each level's children are read once their parents are locked, so the set is
    closed: children are only ever inserted by a transaction that holds their
    parent's row (a suspension's fenced write, ``submit(parent=...)``'s write),
    so a child committed before the lock is read here, and one inserted after
    is refused (the parent is final by then, or its lease token moved on).
    Reading the whole tree first and locking it after missed the children of a
    suspension committing in between. Level by level, by id within a level, is
    the lock order (ancestors before descendants, then by id).
    """
    level = list(ProcedureRun._writer.select_for_update().filter(id=procedure_id).values_list("id", flat=True))
    found = list(level)
    while level:
        level = list(ProcedureRun._writer.select_for_update().filter(parent_id__in=level).order_by("id")
                     .values_list("id", flat=True))
        found.extend(level)
    return found


def cancel_subtree(procedure_id: uuid.UUID, reason: str, *, include_self: bool = True) -> list[uuid.UUID]:
    """Cancel every unfinished member of the subtree, fencing out running ones by bumping their lease token.

    Runs in the caller's transaction; rows are locked in the lock order (:func:`lock_subtree`).
    """
    members = lock_subtree(procedure_id)
    if not include_self:
        members = [m for m in members if m != procedure_id]
    if not members:
        return []
    unfinished = list(ProcedureRun._writer.filter(id__in=members).exclude(status__in=FINAL)
                      .values_list("id", "type_name"))
    ids = [pid for pid, _ in unfinished]
    if not ids:
        return []
    close_leases(ids, LeaseOutcome.LOST)  # (their limit slots freed with them)
    ProcedureRun._writer.filter(id__in=ids).update(
        status=RunStatus.CANCELLED, lease_token=F("lease_token") + 1, lease_owner="", lease_expires_at=None,
        in_unsafe_step=False, waiting_for_keys=False, pending_children=0, finished_at=clock.now(), error=reason,
        waiting_for="", wake_at=None)
    if not include_self:  # its descendants are all final now: it waits for none of them any more
        ProcedureRun._writer.filter(id=procedure_id).update(pending_children=0)
    locks.release(ids)
    for pid, type_name in unfinished:
        send_after_commit(signals.procedure_cancelled, procedure_id=pid, type_name=type_name)
    return ids
