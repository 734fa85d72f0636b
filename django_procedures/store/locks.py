"""Lock keys: granting them at a procedure's first claim, releasing them when it ends, breaking deadlocks."""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from django_procedures.models import KeyRequest, ProcedureRun
from django_procedures.policy.locks import Request, blockers, tree_deadlocks
from django_procedures.policy.status import CLAIMABLE
from django_procedures.store.db import advisory_xact_locks, bound_cursor, is_postgresql, sql_list, text_array
from django_procedures.store.kinds import VERSION_OK, Kinds
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.locks")


def _key_locks(names: Iterable[str], *, wait: bool) -> bool:
    """Serialise decisions about ``names`` between transactions (PostgreSQL advisory locks, sorted).

    ``wait=False`` never blocks: it returns False if another transaction is
    deciding about one of the keys right now (the caller skips the procedure).
    """
    return advisory_xact_locks("django_procedures:", names, wait=wait)


def _root_shared(procedure_id: uuid.UUID, root_id: uuid.UUID | None) -> bool:
    """Take now, without waiting, the lock the new ``KeyRequest`` rows' foreign key to the root takes at COMMIT.

    That check (deferred to COMMIT) would otherwise wait for the root row while
    this transaction holds a key's advisory lock, the reverse of the lock order
    of a descendant's final transaction (ancestor rows, then key locks):
    a deadlock. False if the root row is locked for update right now (the
    caller passes the procedure by, as when its keys are being decided).
    """
    if root_id is None or root_id == procedure_id or not is_postgresql():
        return True
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {ProcedureRun._meta.db_table} WHERE id = %s FOR KEY SHARE SKIP LOCKED",
                       [root_id])
        return cursor.fetchone() is not None


def ancestors(procedure_id: uuid.UUID, parent_id: uuid.UUID | None) -> set[uuid.UUID]:
    found: set[uuid.UUID] = set()
    while parent_id is not None and parent_id not in found:
        found.add(parent_id)
        parent_id = ProcedureRun._writer.filter(id=parent_id).values_list("parent_id", flat=True).first()
    return found


def grant_due(*, kinds: Kinds, queues: Sequence[str] | None, limit: int, now: datetime) -> list[uuid.UUID]:
    """In the claim's transaction: due procedures taking their keys for the first time, decided in claim order.

    Each gets all its keys or none. One whose keys are busy is marked
    ``waiting_for_keys`` (so claims skip it without blocking, and unrelated
    work never queues behind it) and keeps its place in each key's queue; it
    is woken when a key it waits for is released.
    """
    granted: list[uuid.UUID] = []
    passed: list[uuid.UUID] = []  # another worker was deciding about their keys: left for the next claim
    while len(granted) < limit:
        candidates = _keyed_due(kinds, queues, limit - len(granted), now, skip=granted + passed)
        if not candidates:
            break
        for row in candidates:
            wanted = {name: mode for name, mode in row["lock_keys"]}
            if not _root_shared(row["id"], row["root_id"]) or not _key_locks(wanted, wait=False):
                passed.append(row["id"])
                continue
            KeyRequest._writer.bulk_create(
                [KeyRequest(name=name, procedure_id=row["id"], root_id=row["root_id"] or row["id"], mode=mode,
                            requested_at=now) for name, mode in wanted.items()], ignore_conflicts=True)
            if _grantable(row["id"], row["parent_id"], wanted):
                KeyRequest._writer.filter(procedure_id=row["id"]).update(granted=True)
                granted.append(row["id"])
            else:  # marked, so the next query (and every claim after it) passes it by
                ProcedureRun._writer.filter(id=row["id"]).update(waiting_for_keys=True)
    return granted


_PG_KEYED_DUE = f"""
    SELECT id, lock_keys, root_id, parent_id FROM {{run}}
    WHERE status IN ({sql_list(CLAIMABLE)}) AND run_at <= %(now)s AND type_name = ANY(%(types)s::text[])
      {VERSION_OK}
      {{queue_filter}} AND NOT keys_held AND NOT waiting_for_keys AND lock_keys <> '[]'::jsonb
      AND NOT id = ANY(%(skip)s::uuid[])
    ORDER BY priority DESC, run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""


def _keyed_due(kinds: Kinds, queues: Sequence[str] | None, limit: int, now: datetime,
               skip: list[uuid.UUID]) -> list[dict[str, Any]]:
    """Due procedures that take their keys for the first time, locked; rows in ``skip`` excluded.

    Raw SQL on PostgreSQL: every claim runs this query, mostly to find nothing,
    and the ORM took longer to build it than the server to answer it.
    """
    if not is_postgresql():
        due = (ProcedureRun._writer.claimable(now).filter(kinds.q(), keys_held=False, waiting_for_keys=False)
               .exclude(lock_keys=[]).exclude(id__in=skip))
        if queues:
            due = due.filter(queue__in=queues)
        return list(due.select_for_update(skip_locked=True).values("id", "lock_keys", "root_id", "parent_id")[:limit])
    sql = _PG_KEYED_DUE.format(run=ProcedureRun._meta.db_table,
                               queue_filter="AND queue = ANY(%(queues)s::text[])" if queues else "")
    with bound_cursor() as cursor:
        cursor.execute(sql, {"now": now, **kinds.params(), "queues": text_array(queues or ()),
                             "skip": skip, "limit": limit})
        rows = cursor.fetchall()
    return [{"id": pid, "lock_keys": json.loads(keys) if isinstance(keys, str) else keys, "root_id": root,
             "parent_id": parent} for pid, keys, root, parent in rows]


def _requests(names: Iterable[str]) -> list[Request]:
    """Every request (granted or waiting) on the keys ``names``."""
    rows = KeyRequest._writer.filter(name__in=list(names)).values_list(
        "name", "procedure_id", "root_id", "mode", "granted", "requested_at", "id")
    return [Request(name, pid, root, mode, granted, (at, rid)) for name, pid, root, mode, granted, at, rid in rows]


def _grantable(procedure_id: uuid.UUID, parent_id: uuid.UUID | None, names: Iterable[str],
               queue: list[Request] | None = None) -> bool:
    """Whether every key in ``names`` can go to the procedure now; ``queue``: the requests on them, if read."""
    names = list(names)
    if queue is None:
        queue = _requests(names)
    mine = {r.key: r for r in queue if r.procedure == procedure_id}
    lenders = ancestors(procedure_id, parent_id)
    return all(name in mine and not blockers(queue, mine[name], lenders) for name in names)


def release(procedure_ids: Sequence[uuid.UUID]) -> None:
    """In the transaction that writes their final status: drop the procedures' keys and wake their waiters."""
    names = list(KeyRequest._writer.filter(procedure_id__in=procedure_ids).values_list("name", flat=True))
    if not names:
        return
    _key_locks(names, wait=True)  # a claim deciding about these keys commits first, and its waiters are seen
    KeyRequest._writer.filter(procedure_id__in=procedure_ids).delete()
    ProcedureRun._writer.filter(id__in=procedure_ids).update(keys_held=False, waiting_for_keys=False)
    # A waiter's row locked by another transaction is being finalised (a cancel, a deadlock's victim), which
    # then waits for these keys' advisory locks: waiting for its row here would deadlock with it. Only
    # finalisers lock a waiter's row (claims pass waiters by), and the sweep's wake_stranded is the net.
    woken = list(ProcedureRun._writer.filter(
        waiting_for_keys=True, id__in=KeyRequest._writer.filter(name__in=names, granted=False).values("procedure_id"))
        .select_for_update(skip_locked=True).values_list("id", "queue"))
    ProcedureRun._writer.filter(id__in=[pid for pid, _ in woken]).update(waiting_for_keys=False)
    notify({queue for _, queue in woken})


def wake_stranded() -> int:
    """Safety net run by the sweep: waiters none of whose keys is blocked any more are made claimable.

    The requests on every key a waiter wants are read in one query, not one per
    waiter: the sweep runs every few seconds on every worker, and thousands may wait.
    """
    stranded = list(ProcedureRun._writer.filter(waiting_for_keys=True).values("id", "parent_id", "lock_keys"))
    if not stranded:
        return 0
    by_key: dict[str, list[Request]] = defaultdict(list)
    for request in _requests({name for row in stranded for name, _ in row["lock_keys"]}):
        by_key[request.key].append(request)
    woken = []
    for row in stranded:
        names = [name for name, _ in row["lock_keys"]]
        if _grantable(row["id"], row["parent_id"], names, [r for name in names for r in by_key[name]]):
            woken.append(row["id"])
    if woken:
        ProcedureRun._writer.filter(id__in=woken).update(waiting_for_keys=False)
        notify(ProcedureRun._writer.filter(id__in=woken).values_list("queue", flat=True))
    return len(woken)


class FoundDeadlock(NamedTuple):
    """A cycle of trees: its ``trees``, the ``youngest`` of them, its waiting procedures (the ``victims``)
    and the ``message`` to fail them with."""

    trees: frozenset[uuid.UUID]
    youngest: uuid.UUID
    victims: list[uuid.UUID]
    message: str


def deadlocks() -> list[FoundDeadlock]:
    """Cycles of trees waiting for each other's keys, as of one moment, in the order to break them.

    Procedures wait for each other as ``policy.locks.waits_for`` says: a
    waiter for whoever blocks it (holders, and older conflicting waiters ahead
    of it in the key's queue), a holder for its descendants that wait. A cycle
    of such waits spanning trees is a deadlock; a tree that waits behind a
    holder that can finish is not in one. The victims are the waiting
    procedures of the youngest tree in each cycle. Every request on the
    contended keys is read with its procedure's parent in one statement:
    reads spread over several statements see different moments, and a request
    that appeared in between (a child's, claimed meanwhile) would be read
    without the ancestor lending it the key, as if it waited behind
    outsiders: a cycle that does not exist.
    """
    rows = list(KeyRequest._writer.filter(name__in=KeyRequest._writer.filter(granted=False).values("name"))
                .values_list("name", "procedure_id", "root_id", "mode", "granted", "requested_at", "id",
                             "procedure__parent_id"))
    if not rows:
        return []
    requests = [Request(name, pid, root, mode, granted, (at, rid))
                for name, pid, root, mode, granted, at, rid, _ in rows]
    parents = {pid: parent for _, pid, _, _, _, _, _, parent in rows}
    # parent ids never change, so reading the grandparents later agrees with the snapshot
    # (policy.locks is generic over Hashable ids; here each is a UUID)
    lenders = {r.procedure: ancestors(r.procedure, parents[r.procedure]) for r in requests  # type: ignore[arg-type]
               if not r.granted}
    waiting: defaultdict[Any, set[Any]] = defaultdict(set)
    for request in requests:
        if not request.granted:
            waiting[request.tree].add(request.procedure)
    cycles = tree_deadlocks(requests, lenders)
    created = dict(ProcedureRun._writer.filter(id__in={t for c in cycles for t in c.trees})
                   .values_list("id", "created_at"))
    found = []
    for cycle in cycles:
        youngest = max(cycle.trees, key=lambda t: (created[t], str(t)))
        parts = [f"tree {waiter} waits for {key!r} behind tree {holder}" for waiter, key, holder in cycle.edges]
        message = f"lock key deadlock: {'; '.join(parts)}; failing the younger tree {youngest}"
        found.append(FoundDeadlock(frozenset(cycle.trees), youngest,  # type: ignore[arg-type]  # UUIDs, as above
                                   sorted(waiting[youngest], key=str), message))
    # The cycle whose younger tree is the oldest first: failing that tree may end later cycles through it.
    return sorted(found, key=lambda d: (created[d.youngest], str(d.youngest)))


__all__ = ["FoundDeadlock", "ancestors", "deadlocks", "grant_due", "release", "wake_stranded"]
