"""Deleting old finished trees, in batches; steps, leases and lock key rows go with their procedures.

A tree is pruned whole or not at all: its root finished before the cutoff and
every member is final. That is checked on rows this transaction has locked, in
the statement that deletes them, so a member made active again in the meantime
(a manual retry of an old failure) keeps its whole tree, and so does a tree with
a member written after the statement began (PostgreSQL does not enforce the keys
to a run: docs/scaling.md, "Foreign keys").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from django_procedures.models import Event, KeyRequest, Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL
from django_procedures.store.db import is_postgresql

#: The advisory lock a worker's retention pass holds for one batch, so one worker of a fleet prunes at a time.
#: Transaction-scoped: it works through PgBouncer's transaction pooling and cannot outlive the batch.
_PRUNER_LOCK = "hashtextextended('django_procedures:retention', 0)"


@dataclass(frozen=True)
class PruneBatch:
    trees: int = 0
    procedures: int = 0
    steps: int = 0
    leases: int = 0

    def __add__(self, other: PruneBatch) -> PruneBatch:
        return PruneBatch(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def prunable(older_than: datetime, statuses: Sequence[str] | None = None) -> QuerySet[ProcedureRun]:
    """Root procedures finished before ``older_than`` whose whole tree is final."""
    statuses = list(statuses or FINAL)
    unfinished_member = ProcedureRun._writer.filter(root_id=OuterRef("id")).exclude(status__in=FINAL)
    return (ProcedureRun._writer.filter(root__isnull=True, status__in=statuses, finished_at__lt=older_than)
            .exclude(Exists(unfinished_member)).order_by("finished_at"))


def count_trees(older_than: datetime, statuses: Sequence[str] | None = None) -> int:
    """How many trees a prune would delete now (their roots only: cheap enough to ask before a long prune)."""
    return prunable(older_than, statuses).count()


def count(older_than: datetime, statuses: Sequence[str] | None = None) -> PruneBatch:
    """What a prune would delete, without deleting."""
    roots = prunable(older_than, statuses).values("id")
    members = ProcedureRun._writer.filter(Q(id__in=roots) | Q(root_id__in=roots))
    return PruneBatch(trees=roots.count(), procedures=members.count(),
                      steps=Step._writer.filter(procedure__in=members).count(),
                      leases=Lease._writer.filter(procedure__in=members).count())


def prune_batch(older_than: datetime, statuses: Sequence[str] | None = None, batch_size: int = 500, *,
                alone: bool = False) -> PruneBatch | None:
    """Delete up to ``batch_size`` whole finished trees in one transaction; returns what it deleted.

    Roots another transaction has locked are skipped, not waited for. With
    ``alone`` (a worker's retention pass), returns None at once if another
    transaction holds the pruner's advisory lock: another worker is pruning.
    """
    own_transaction = not connection.in_atomic_block
    with transaction.atomic():
        if not is_postgresql():  # one writer at a time on SQLite: no race to lose
            return _prune_batch_portable(older_than, statuses, batch_size)
        with connection.cursor() as cursor:
            if alone:
                cursor.execute(f"SELECT pg_try_advisory_xact_lock({_PRUNER_LOCK})")
                if not cursor.fetchone()[0]:
                    return None
            if own_transaction:
                # The commit does not wait for the WAL to reach the disk (a few milliseconds a batch here, a tenth
                # of its time): a crash may forget the last batches, and their trees are pruned again later. Not
                # in a caller's transaction, whose own writes may need to be durable at its commit.
                cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute(_PRUNE_SQL.format(run=_table(ProcedureRun), step=_table(Step), lease=_table(Lease),
                                             key=_table(KeyRequest), event=_table(Event)),
                           {"cutoff": older_than, "statuses": list(statuses or FINAL), "final": sorted(FINAL),
                            "limit": batch_size})
            return PruneBatch(*cursor.fetchone())


# One statement, set-based: no rows travel to Python, and no window between checking and deleting.
#  - roots: old finished roots, oldest first, locked; those another transaction holds are skipped.
#  - descendants: the other members of those trees, found by the root index and locked (waiting for a transaction
#    that holds one, such as a manual retry of an old failed child). A locked row, root or not, is read as
#    committed at the moment it was locked, not as of the statement's start, so a tree with a member that is no
#    longer final is seen as such and left whole.
#  - changed: trees with a member whose locked version is not the one this statement's snapshot sees (its xmin,
#    the transaction that wrote it, differs): it was written after the statement started, and so may have gained
#    rows the DELETEs below cannot see (they read the snapshot) — a Step or Lease of a member retried and run to
#    its end meanwhile, or a child submitted under it. Every such row is written in a transaction that updates
#    its run, or for a child its parent (docs/scaling.md, "Foreign keys"), so the tree is left whole for the
#    next batch. PostgreSQL does not check the foreign keys to a run: this is what keeps deletes from leaving
#    rows behind.
#  - the DELETEs of children and runs all read `doomed` (each runs to completion, read or not). Events need no
#    xmin of their own: a send locks its run and refuses a final one, so a final tree gains none.
_PRUNE_SQL = """
WITH roots AS (
    SELECT r.id, r.status, r.xmin FROM {run} AS r
    WHERE r.root_id IS NULL AND r.finished_at < %(cutoff)s AND r.status = ANY(%(statuses)s)
      AND NOT EXISTS (SELECT 1 FROM {run} AS u WHERE u.root_id = r.id AND u.status <> ALL(%(final)s))
    ORDER BY r.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), descendants AS (
    SELECT m.id, m.root_id AS tree, m.status, m.xmin FROM roots AS t JOIN {run} AS m ON m.root_id = t.id
    FOR UPDATE OF m
), members AS (
    SELECT id, id AS tree, status, xmin FROM roots
    UNION ALL
    SELECT id, tree, status, xmin FROM descendants
), changed AS (
    SELECT DISTINCT m.tree FROM members AS m JOIN {run} AS seen ON seen.id = m.id WHERE seen.xmin <> m.xmin
), doomed AS (
    SELECT m.id, m.id = m.tree AS is_root FROM members AS m
    WHERE NOT EXISTS (SELECT 1 FROM members AS a WHERE a.tree = m.tree AND a.status <> ALL(%(final)s))
      AND m.tree NOT IN (SELECT tree FROM changed)
), steps AS (
    DELETE FROM {step} WHERE procedure_id IN (SELECT id FROM doomed) RETURNING 1
), leases AS (
    DELETE FROM {lease} WHERE procedure_id IN (SELECT id FROM doomed) RETURNING 1
), keys AS (
    DELETE FROM {key} WHERE procedure_id IN (SELECT id FROM doomed)
), events AS (
    DELETE FROM {event} WHERE procedure_id IN (SELECT id FROM doomed)
), runs AS (
    DELETE FROM {run} WHERE id IN (SELECT id FROM doomed) RETURNING id
)
SELECT (SELECT count(*) FROM doomed WHERE is_root), (SELECT count(*) FROM runs), (SELECT count(*) FROM steps),
       (SELECT count(*) FROM leases)
"""


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _prune_batch_portable(older_than: datetime, statuses: Sequence[str] | None, batch_size: int) -> PruneBatch:
    roots = list(prunable(older_than, statuses).values_list("id", flat=True)[:batch_size])
    if not roots:
        return PruneBatch()
    members = list(ProcedureRun._writer.filter(Q(id__in=roots) | Q(root_id__in=roots)).values_list("id", flat=True))
    steps = _delete(Step, "procedure_id", members)
    leases = _delete(Lease, "procedure_id", members)
    _delete(KeyRequest, "procedure_id", members)
    _delete(Event, "procedure_id", members)
    procedures = _delete(ProcedureRun, "id", members)
    return PruneBatch(len(roots), procedures, steps, leases)


def _delete(model: type[models.Model], column: str, ids: list[Any]) -> int:
    """A plain DELETE: the cascade is done here, not by loading every row into Python."""
    total = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        placeholders = ", ".join(["%s"] * len(chunk))
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {_table(model)} WHERE {connection.ops.quote_name(column)} IN ({placeholders})",
                           [ProcedureRun._meta.pk.get_db_prep_value(i, connection) for i in chunk])
            total += cursor.rowcount
    return total
