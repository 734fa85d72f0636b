"""Deleting old finished trees, in batches; steps and leases go with their procedures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL


@dataclass(frozen=True)
class PruneBatch:
    trees: int
    procedures: int
    steps: int
    leases: int


def prunable(older_than: datetime, statuses: Sequence[str] | None = None) -> QuerySet[ProcedureRun]:
    """Root procedures finished before ``older_than`` whose whole tree is final."""
    statuses = list(statuses or FINAL)
    unfinished_member = ProcedureRun._writer.filter(root_id=OuterRef("id")).exclude(status__in=FINAL)
    return (ProcedureRun._writer.filter(root__isnull=True, status__in=statuses, finished_at__lt=older_than)
            .exclude(Exists(unfinished_member)).order_by("finished_at"))


def count(older_than: datetime, statuses: Sequence[str] | None = None) -> PruneBatch:
    """What a prune would delete, without deleting."""
    roots = prunable(older_than, statuses).values("id")
    members = ProcedureRun._writer.filter(Q(id__in=roots) | Q(root_id__in=roots))
    return PruneBatch(trees=roots.count(), procedures=members.count(),
                      steps=Step._writer.filter(procedure__in=members).count(),
                      leases=Lease._writer.filter(procedure__in=members).count())


def prune_batch(older_than: datetime, statuses: Sequence[str] | None = None, batch_size: int = 500) -> PruneBatch:
    """Delete up to ``batch_size`` whole finished trees in one transaction."""
    with transaction.atomic():
        roots = list(prunable(older_than, statuses).select_for_update(skip_locked=True, of=("self",))
                     .values_list("id", flat=True)[:batch_size])
        if not roots:
            return PruneBatch(0, 0, 0, 0)
        members = list(ProcedureRun._writer.filter(Q(id__in=roots) | Q(root_id__in=roots))
                       .values_list("id", flat=True))
        steps = _delete(Step, "procedure_id", members)
        leases = _delete(Lease, "procedure_id", members)
        procedures = _delete(ProcedureRun, "id", members)
    return PruneBatch(len(roots), procedures, steps, leases)


def _delete(model: type[models.Model], column: str, ids: list[Any]) -> int:
    """A plain DELETE: the cascade is done here, not by loading every row into Python."""
    table = connection.ops.quote_name(model._meta.db_table)
    total = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        placeholders = ", ".join(["%s"] * len(chunk))
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE {connection.ops.quote_name(column)} IN ({placeholders})",
                           [ProcedureRun._meta.pk.get_db_prep_value(i, connection) for i in chunk])
            total += cursor.rowcount
    return total
