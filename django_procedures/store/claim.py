"""Claiming due procedures under a lease, and finding the next due time."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Min
from django.db.models.functions import Coalesce

from django_procedures import clock, signals
from django_procedures.models import Lease, ProcedureRun
from django_procedures.policy.status import CLAIMABLE, RunStatus
from django_procedures.store.db import db_now, db_now_plus, is_postgresql
from django_procedures.store.events import send_after_commit


@dataclass
class Claim:
    """A procedure this worker holds under the fencing token ``(id, lease_token)``."""

    id: uuid.UUID
    type_name: str
    state: dict[str, Any]
    step: int
    step_name: str
    attempt: int
    failures: int
    lost: int
    lease_token: int
    queue: str


_FIELDS = ["id", "type_name", "state", "step", "step_name", "attempt", "failures", "lost", "lease_token", "queue"]

_PG_CLAIM = """
WITH picked AS (
    SELECT id FROM {run}
    WHERE status IN ('ready', 'retrying') AND run_at <= %(now)s
      AND type_name = ANY(%(types)s) {queue_filter}
    ORDER BY priority DESC, run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {run} AS r
    SET status = 'running', lease_token = r.lease_token + 1, lease_owner = %(worker)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s),
        started_at = COALESCE(r.started_at, %(now)s), step_started_at = %(now)s
    FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.type_name, r.state, r.step, r.step_name, r.attempt, r.failures, r.lost,
              r.lease_token, r.queue, r.lease_expires_at, r.priority, r.run_at
), leases AS (
    INSERT INTO {lease} (procedure_id, token, worker, claimed_at, expires_at, outcome)
    SELECT id, lease_token, %(worker)s, clock_timestamp(), lease_expires_at, '' FROM claimed
)
SELECT id, type_name, state, step, step_name, attempt, failures, lost, lease_token, queue
FROM claimed ORDER BY priority DESC, run_at
"""


def claim(
    worker: str,
    *,
    type_names: Sequence[str],
    queues: Sequence[str] | None = None,
    limit: int = 1,
    lease_seconds: float,
) -> list[Claim]:
    """Claim up to ``limit`` due procedures of ``type_names`` in one short committed transaction.

    Only registered type names are claimed, so a worker that lacks a class
    leaves its procedures to workers that have it.
    """
    if not type_names or limit < 1:
        return []
    now = clock.now()
    if is_postgresql():
        claims = _claim_postgresql(worker, type_names, queues, limit, lease_seconds, now)
    else:
        claims = _claim_generic(worker, type_names, queues, limit, lease_seconds, now)
    for c in claims:
        send_after_commit(signals.procedure_started, procedure_id=c.id, type_name=c.type_name,
                          lease_token=c.lease_token)
    return claims


def _claim_postgresql(worker: str, type_names: Sequence[str], queues: Sequence[str] | None, limit: int,
                      lease_seconds: float, now: datetime) -> list[Claim]:
    sql = _PG_CLAIM.format(
        run=ProcedureRun._meta.db_table, lease=Lease._meta.db_table,
        queue_filter="AND queue = ANY(%(queues)s)" if queues else "",
    )
    params = {"now": now, "types": list(type_names), "queues": list(queues or ()), "limit": limit,
              "worker": worker, "lease": float(lease_seconds)}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    claims = []
    for row in rows:
        values = dict(zip(_FIELDS, row, strict=True))
        if isinstance(values["state"], str):  # psycopg returns jsonb decoded; stay safe for text
            import json

            values["state"] = json.loads(values["state"])
        claims.append(Claim(**values))
    return claims


def _claim_generic(worker: str, type_names: Sequence[str], queues: Sequence[str] | None, limit: int,
                   lease_seconds: float, now: datetime) -> list[Claim]:
    """The same claim in portable ORM terms (SQLite: one worker, so no row locks are needed)."""
    with transaction.atomic():
        due = ProcedureRun.objects.claimable(now).filter(type_name__in=type_names)
        if queues:
            due = due.filter(queue__in=queues)
        ids = list(due.select_for_update(skip_locked=True).values_list("id", flat=True)[:limit])
        if not ids:
            return []
        expires = db_now_plus(lease_seconds)
        ProcedureRun.objects.filter(id__in=ids, status__in=CLAIMABLE).update(
            status=RunStatus.RUNNING, lease_token=F("lease_token") + 1, lease_owner=worker,
            lease_expires_at=expires, started_at=Coalesce("started_at", now), step_started_at=now,
        )
        rows = {r["id"]: r for r in ProcedureRun.objects.filter(id__in=ids).values(*_FIELDS, "lease_expires_at")}
        Lease.objects.bulk_create(
            Lease(procedure_id=pid, token=rows[pid]["lease_token"], worker=worker, claimed_at=db_now_value(),
                  expires_at=rows[pid]["lease_expires_at"])
            for pid in ids
        )
    return [Claim(**{k: rows[pid][k] for k in _FIELDS}) for pid in ids]


def db_now_value() -> datetime:
    from django.utils import timezone

    return timezone.now()


def next_due(*, type_names: Sequence[str], queues: Sequence[str] | None = None) -> datetime | None:
    """The earliest ``run_at`` of a ready or retrying procedure this worker could claim."""
    if not type_names:
        return None
    rows = ProcedureRun.objects.pending().filter(type_name__in=type_names)
    if queues:
        rows = rows.filter(queue__in=queues)
    return rows.aggregate(at=Min("run_at"))["at"]


def unknown_types(type_names: Sequence[str]) -> dict[str, int]:
    """Ready or retrying procedures whose type this worker has not registered, by type name."""
    from django.db.models import Count

    rows = (ProcedureRun.objects.pending().exclude(type_name__in=type_names)
            .values_list("type_name").annotate(n=Count("id")).order_by("type_name"))
    return dict(rows)


__all__ = ["Claim", "claim", "db_now", "next_due", "unknown_types"]
