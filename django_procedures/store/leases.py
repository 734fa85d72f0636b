"""Lease upkeep: renewing held leases, and the recovery sweep of expired ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import F

from django_procedures import clock
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import LEASED, RunStatus
from django_procedures.store import failures
from django_procedures.store.claim import Claim
from django_procedures.store.db import db_now, db_now_plus, is_postgresql, sql_list
from django_procedures.store.failures import LostAttempt
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.store")

_PG_RENEW = f"""
UPDATE {{run}} SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT r.id FROM {{run}} AS r
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS held(id, token)
      ON r.id = held.id AND r.lease_token = held.token
    WHERE r.status IN ({sql_list(LEASED)})
    ORDER BY r.depth, r.id FOR UPDATE
)
RETURNING id, lease_token
"""


def renew(held: Iterable[tuple[UUID, int]], lease_seconds: float) -> set[tuple[UUID, int]]:
    """Extend every lease in ``held`` (``(id, token)`` pairs) in one fenced statement.

    Returns the pairs still held; a missing pair means that lease moved (expired
    and reclaimed, or cancelled) and its worker must stop writing.
    """
    held = list(held)
    if not held:
        return set()
    if is_postgresql():
        # One statement, in autocommit: the server commits it as it ends. In a transaction of its own, a
        # worker frozen (SIGSTOP, VM pause) before sending COMMIT kept its rows locked until the idle timeout,
        # and the sweep, which skips locked rows, could not take its procedures back.
        with connection.cursor() as cursor:
            cursor.execute(_PG_RENEW.format(run=ProcedureRun._meta.db_table), {
                "lease": float(lease_seconds), "ids": [i for i, _ in held], "tokens": [t for _, t in held]})
            return {(row[0], row[1]) for row in cursor.fetchall()}
    renewed = set()
    with transaction.atomic():
        for pid, token in sorted(held):
            if ProcedureRun._writer.filter(id=pid, lease_token=token, status__in=LEASED).update(
                    lease_expires_at=db_now_plus(lease_seconds)):
                renewed.add((pid, token))
    return renewed


@dataclass(frozen=True)
class SweepReport:
    resumed: int = 0
    parked: int = 0


_SWEPT = ("id", "lease_token", "lease_owner", "step", "step_name", "attempt", "step_started_at", "queue", "type_name",
          "parent_id", "spawned_in", "in_rollback", "schedule_id", "lock_keys")


def sweep_expired(limit: int = 100) -> SweepReport:
    """Return procedures whose lease expired to be claimed again, or park them.

    The old lease closes as ``expired`` and the lost attempt is recorded as a
    ``lost`` step. A procedure lost inside a non-idempotent step is parked
    ``failed`` instead of being re-run: a final transition, made through
    ``failures.park_interrupted`` in a transaction of its own (its schedule and
    parent are locked before its row, in the lock order). A row another
    transaction holds is skipped, never waited for (the next sweep sees it
    again); a park waits its turn for the schedule and parent rows, as a
    finishing sibling does, and parks nothing if the run was renewed or
    finished meanwhile.
    """
    resumed = _resume_expired(limit)
    parked = 0
    unsafe = list(ProcedureRun._writer.filter(status__in=LEASED, in_unsafe_step=True, lease_expires_at__lt=db_now())
                  .order_by("depth", "id").values(*_SWEPT)[:limit])
    for row in unsafe:
        parked += _park(row)
    from django_procedures.store import limits

    limits.tidy(clock.now())  # limit rows that count nothing any more (their slots came back with the leases)
    return SweepReport(resumed, parked)


def _message(row: dict[str, Any]) -> str:
    where = "the rollback" if row["in_rollback"] else f"step {row['step_name']}"
    return f"worker {row['lease_owner']} lost: its lease expired during {where}"


def _swept(row: dict[str, Any]) -> Claim:
    """The expired claim as the sweep read it (``state`` and the counters are not needed by its writes)."""
    return Claim(id=row["id"], type_name=row["type_name"], state={}, step=row["step"], step_name=row["step_name"],
                 attempt=row["attempt"], failures=0, lost=0, lease_token=row["lease_token"], queue=row["queue"],
                 parent_id=row["parent_id"], spawned_in=row["spawned_in"], schedule_id=row["schedule_id"],
                 in_rollback=row["in_rollback"], lock_keys=row["lock_keys"])


def _lost(row: dict[str, Any], now: datetime) -> LostAttempt:
    return LostAttempt(_message(row), row["step_started_at"], now)


def _resume_expired(limit: int) -> int:
    """Expired leases outside a non-idempotent step: back to ``ready`` (not final), in one transaction."""
    now = clock.now()
    queues = set()
    with transaction.atomic():
        expired = list(
            ProcedureRun._writer.filter(status__in=LEASED, in_unsafe_step=False, lease_expires_at__lt=db_now())
            .select_for_update(skip_locked=True).order_by("depth", "id").values(*_SWEPT)[:limit]
        )
        for row in expired:
            ProcedureRun._writer.filter(id=row["id"], lease_token=row["lease_token"]).update(
                status=RunStatus.READY, attempt=F("attempt") + 1, lost=F("lost") + 1,
                lease_token=F("lease_token") + 1, lease_owner="", lease_expires_at=None)
            queues.add(row["queue"])
            failures.record_lost_attempt(_swept(row), _lost(row, now))
            logger.warning("%s; resuming elsewhere", _message(row),
                           extra={"procedure_id": str(row["id"]), "lease_token": row["lease_token"]})
        notify(queues)
    return len(expired)


def _park(row: dict[str, Any]) -> bool:
    """Park a run lost inside a non-idempotent step as ``failed`` (retryable by hand); False if it moved on."""
    if not failures.park_interrupted(_swept(row), row["step_name"], lost=_lost(row, clock.now())):
        return False
    logger.warning("%s; parked as failed", _message(row),
                   extra={"procedure_id": str(row["id"]), "lease_token": row["lease_token"]})
    return True
