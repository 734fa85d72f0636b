"""Lease upkeep: renewing held leases, and the recovery sweep of expired ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from django.db import connection, transaction
from django.db.models import F

from django_procedures import clock, signals
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import LEASED, LeaseOutcome, RunStatus, StepStatus
from django_procedures.store import finals, tree
from django_procedures.store.db import db_now, db_now_plus, is_postgresql
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.store")

_PG_RENEW = """
UPDATE {run} SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT r.id FROM {run} AS r
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS held(id, token)
      ON r.id = held.id AND r.lease_token = held.token
    WHERE r.status IN ('running', 'rolling_back')
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
            if ProcedureRun.objects.filter(id=pid, lease_token=token, status__in=LEASED).update(
                    lease_expires_at=db_now_plus(lease_seconds)):
                renewed.add((pid, token))
    return renewed


@dataclass(frozen=True)
class SweepReport:
    resumed: int = 0
    parked: int = 0


def sweep_expired(limit: int = 100) -> SweepReport:
    """Return procedures whose lease expired to be claimed again, or park them.

    The old lease closes as ``expired`` and the lost attempt is recorded as a
    ``lost`` step. A procedure lost inside a non-idempotent step is parked
    ``failed`` instead of being re-run. Rows another transaction holds are
    skipped, never waited for.
    """
    now = clock.now()
    resumed = parked = 0
    queues = set()
    with transaction.atomic():
        expired = list(
            ProcedureRun.objects.filter(status__in=LEASED, lease_expires_at__lt=db_now())
            .select_for_update(skip_locked=True).order_by("depth", "id")
            .values("id", "lease_token", "lease_owner", "step", "step_name", "attempt", "in_unsafe_step",
                    "step_started_at", "queue", "type_name", "parent_id", "spawned_in", "in_rollback",
                    "schedule_id")[:limit]
        )
        for row in expired:
            fence = ProcedureRun.objects.filter(id=row["id"], lease_token=row["lease_token"])
            where = "the rollback" if row["in_rollback"] else f"step {row['step_name']}"
            message = f"worker {row['lease_owner']} lost: its lease expired during {where}"
            if row["in_unsafe_step"]:
                error = f"interrupted during non-idempotent step {row['step_name']}"
                fence.update(status=RunStatus.FAILED, error=error, traceback="", failed_step=row["step_name"],
                             failure_can_retry=True, finished_at=now, attempt=F("attempt") + 1, lost=F("lost") + 1,
                             lease_token=F("lease_token") + 1, lease_owner="", lease_expires_at=None,
                             in_unsafe_step=False)
                parked += 1
                tree.cancel_subtree(row["id"], f"cancelled: ancestor {row['id']} failed", include_self=False)
                finals.finished(row["id"], parent_id=row["parent_id"], spawned_in=row["spawned_in"],
                                schedule_id=row["schedule_id"], failed=True)
                send_after_commit(signals.procedure_failed, procedure_id=row["id"], type_name=row["type_name"],
                                  error=error)
            else:
                fence.update(status=RunStatus.READY, attempt=F("attempt") + 1, lost=F("lost") + 1,
                             lease_token=F("lease_token") + 1, lease_owner="", lease_expires_at=None)
                queues.add(row["queue"])
                resumed += 1
            Step.objects.create(procedure_id=row["id"], index=row["step"],
                                name="rollback" if row["in_rollback"] else row["step_name"],
                                attempt=row["attempt"], status=StepStatus.LOST, lease_token=row["lease_token"],
                                started_at=row["step_started_at"], finished_at=now, error=message)
            Lease.objects.filter(procedure_id=row["id"], token=row["lease_token"], released_at__isnull=True).update(
                released_at=db_now(), outcome=LeaseOutcome.EXPIRED)
            logger.warning("%s; %s", message, "parked as failed" if row["in_unsafe_step"] else "resuming elsewhere",
                           extra={"procedure_id": str(row["id"]), "lease_token": row["lease_token"]})
        notify(queues)
    return SweepReport(resumed, parked)
