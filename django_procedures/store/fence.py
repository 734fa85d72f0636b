"""The fence: every write and check about a claimed run matches ``(id, lease_token)`` while the run is leased.

:func:`fenced_update` is the one place that raises ``LeaseLost``; :func:`reload`
re-reads a claim after a lost connection; :func:`close_lease` ends a ``Lease`` row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from django_procedures.exceptions import LeaseLost
from django_procedures.models import Lease, ProcedureRun
from django_procedures.policy.status import LEASED, LeaseOutcome
from django_procedures.store.claim import Claim
from django_procedures.store.db import bound_cursor, db_now, is_postgresql

#: What ending a lease clears on the run's row.
LEASE_CLEARED: dict[str, Any] = {"lease_owner": "", "lease_expires_at": None, "in_unsafe_step": False}


@dataclass(frozen=True)
class StepRecord:
    """A step that ran in this claim: what the ``Step`` row will say."""

    index: int
    name: str
    attempt: int
    started_at: datetime
    finished_at: datetime


def held_row(claim: Claim) -> QuerySet[ProcedureRun]:
    """The claimed row while ``claim`` still holds it: the fence every write and check of a claim goes through."""
    return ProcedureRun._writer.filter(id=claim.id, lease_token=claim.lease_token, status__in=LEASED)


def fenced_update(claim: Claim, *, at_step: int | None = None, **fields: Any) -> None:
    """Update the claimed row only while this claim still holds it; the one place that raises ``LeaseLost``.

    ``at_step`` also requires the committed step count to be unchanged (a
    failure decided by another thread must not land after a checkpoint).
    """
    rows = held_row(claim)
    if at_step is not None:
        rows = rows.filter(step=at_step)
    if not rows.update(**fields):
        raise lost(claim)


def lost(claim: Claim) -> LeaseLost:
    return LeaseLost(f"procedure {claim.id} is no longer held by lease token {claim.lease_token}")


def holds(claim: Claim) -> bool:
    """Whether this claim still holds the procedure (a read; acting on it still needs a fenced write)."""
    return held_row(claim).exists()


@dataclass(frozen=True)
class Reloaded:
    """What :func:`reload` found: whether the claim still holds the procedure, and where it stands."""

    held: bool
    in_unsafe_step: bool = False


def reload(claim: Claim) -> Reloaded:
    """Re-read the claimed row after the connection was lost, and bring ``claim`` up to date with it.

    The last transaction's COMMIT may or may not have landed: the row says
    which (a checkpoint that committed has moved ``step`` on). ``held`` is
    False when the lease moved meanwhile, or the procedure left the running
    state (it finished, waits or retries: that outcome committed).
    """
    row = (held_row(claim)
           .values("state", "step", "step_name", "attempt", "failures", "lost", "suspension", "in_rollback",
                   "in_unsafe_step", "version").first())
    if row is None:
        return Reloaded(held=False)
    claim.state, claim.step, claim.step_name = row["state"], row["step"], row["step_name"]
    claim.attempt, claim.failures, claim.lost = row["attempt"], row["failures"], row["lost"]
    claim.suspension, claim.in_rollback = row["suspension"], row["in_rollback"]
    claim.version, claim.upgraded_to = row["version"], None  # upgraded again, from what committed
    return Reloaded(held=True, in_unsafe_step=row["in_unsafe_step"])


_PG_CLOSE = """
    UPDATE {lease} SET released_at = clock_timestamp(), outcome = %s
    WHERE procedure_id = %s AND token = %s AND released_at IS NULL
    RETURNING limits IS NOT NULL
"""

#: Outcomes after which the worker that held the lease claims again at once (it is not stopping): a slot its
#: lease frees is its own to take, so the queue it claims from is not woken for it (``store.limits.free``).
_CLAIMS_AGAIN = frozenset({LeaseOutcome.COMPLETED, LeaseOutcome.RETRIED, LeaseOutcome.FAILED})


def close_lease(procedure_id: Any, token: int, outcome: LeaseOutcome, *, queue: str | None = None) -> None:
    """End the lease ``(procedure_id, token)`` with ``outcome``; the limit slots it held are freed in the same
    transaction (``store.limits``), once: only by the statement that closed it. ``queue``: the procedure's."""
    if is_postgresql():  # one statement, as before limits: the lease's slots come back with it
        with bound_cursor() as cursor:
            cursor.execute(_PG_CLOSE.format(lease=Lease._meta.db_table), (outcome.value, procedure_id, token))
            held = any(row[0] for row in cursor.fetchall())
    else:
        rows = Lease._writer.filter(procedure_id=procedure_id, token=token, released_at__isnull=True)
        held = rows.filter(limits__isnull=False).exists()
        rows.update(released_at=db_now(), outcome=outcome)
    if held:
        free_slots([(procedure_id, token)], own_queue=queue if outcome in _CLAIMS_AGAIN else None)


def close_leases(procedure_ids: Sequence[Any], outcome: LeaseOutcome) -> None:
    """End every open lease of ``procedure_ids`` (a cancelled subtree), freeing their limit slots."""
    rows = Lease._writer.filter(procedure_id__in=procedure_ids, released_at__isnull=True)
    held = list(rows.filter(limits__isnull=False).values_list("procedure_id", "token"))
    rows.update(released_at=db_now(), outcome=outcome)
    free_slots(held)


def free_slots(leases: Sequence[tuple[Any, int]], *, own_queue: str | None = None) -> None:
    """Give back the limit slots the ended leases ``(procedure_id, token)`` held (see ``store.limits.free``)."""
    from django_procedures.store import limits

    limits.free(leases, own_queue=own_queue)
