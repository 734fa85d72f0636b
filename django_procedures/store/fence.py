"""Fenced transitions of a claimed procedure: each write matches ``(id, lease_token)`` or raises ``LeaseLost``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from django_procedures import clock, signals
from django_procedures.conf import conf
from django_procedures.exceptions import LeaseLost
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.retry import FailDecision, RetryDecision
from django_procedures.policy.status import LEASED, LeaseOutcome, RunStatus, StepStatus
from django_procedures.store.claim import Claim
from django_procedures.store.db import db_now
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify

_LEASE_CLEARED: dict[str, Any] = {"lease_owner": "", "lease_expires_at": None, "in_unsafe_step": False}


@dataclass(frozen=True)
class StepRecord:
    """A step that ran in this claim: what the ``Step`` row will say."""

    index: int
    name: str
    attempt: int
    started_at: datetime
    finished_at: datetime


def fenced_update(claim: Claim, *, at_step: int | None = None, **fields: Any) -> None:
    """Update the claimed row only while this claim still holds it; the one place that raises ``LeaseLost``.

    ``at_step`` also requires the committed step count to be unchanged (a
    failure decided by another thread must not land after a checkpoint).
    """
    rows = ProcedureRun.objects.filter(id=claim.id, lease_token=claim.lease_token, status__in=LEASED)
    if at_step is not None:
        rows = rows.filter(step=at_step)
    updated = rows.update(**fields)
    if not updated:
        raise LeaseLost(f"procedure {claim.id} is no longer held by lease token {claim.lease_token}")


@contextmanager
def _transaction() -> Iterator[None]:
    """Join the caller's transaction (an atomic step's, or a test's) or open one.

    Joining without a savepoint is safe because a ``LeaseLost`` raised here
    comes from an UPDATE that matched nothing: the transaction is still usable.
    """
    if transaction.get_connection().in_atomic_block:
        yield
    else:
        with transaction.atomic():
            yield


def close_lease(procedure_id: Any, token: int, outcome: LeaseOutcome) -> None:
    Lease.objects.filter(procedure_id=procedure_id, token=token, released_at__isnull=True).update(
        released_at=db_now(), outcome=outcome
    )


def _done_rows(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any]) -> list[Step]:
    last = len(records) - 1
    return [
        Step(procedure_id=claim.id, index=r.index, name=r.name, attempt=r.attempt, status=StepStatus.DONE,
             lease_token=claim.lease_token, started_at=r.started_at, finished_at=r.finished_at,
             state=state if i == last else None)
        for i, r in enumerate(records)
    ]


def _committed(claim: Claim, records: Sequence[StepRecord]) -> None:
    for r in records:
        send_after_commit(signals.step_committed, procedure_id=claim.id, type_name=claim.type_name,
                          step_index=r.index, step_name=r.name)


def checkpoint(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str) -> None:
    """Commit ``records`` and ``state``; the next step to run is ``next_step``.

    Inside an atomic step this runs as the last statements of the step's own
    transaction, so the step's writes and its checkpoint commit together.
    """
    now = clock.now()
    with _transaction():
        fenced_update(claim, state=state, step=records[-1].index + 1, step_name=next_step, step_started_at=now,
                      attempt=1, failures=0, lost=0, in_unsafe_step=False)
        Step.objects.bulk_create(_done_rows(claim, records, state))
    _committed(claim, records)
    claim.state, claim.step, claim.step_name = state, records[-1].index + 1, next_step
    claim.attempt, claim.failures, claim.lost = 1, 0, 0


def complete(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], output: Any) -> None:
    """Commit the last steps and finish the procedure ``done`` with ``output``."""
    now = clock.now()
    step = records[-1].index + 1 if records else claim.step
    with _transaction():
        fenced_update(claim, status=RunStatus.DONE, state=state, step=step, step_name="", output=output,
                      finished_at=now, error="", traceback="", **_LEASE_CLEARED)
        if records:
            Step.objects.bulk_create(_done_rows(claim, records, state))
        close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED)
    _committed(claim, records)
    send_after_commit(signals.procedure_done, procedure_id=claim.id, type_name=claim.type_name)


def _truncate(text: str, limit: int, keep_tail: bool = False) -> str:
    if len(text) <= limit:
        return text
    marker = "…[truncated]…"
    return marker + text[-(limit - len(marker)):] if keep_tail else text[: limit - len(marker)] + marker


def fail_attempt(claim: Claim, record: StepRecord, error: str, traceback: str,
                 decision: RetryDecision | FailDecision) -> None:
    """Record a failed attempt and either schedule the retry or fail the procedure."""
    error = _truncate(error, conf.MAX_ERROR_LENGTH)
    traceback = _truncate(traceback, conf.MAX_TRACEBACK_LENGTH, keep_tail=True)
    now = clock.now()
    with _transaction():
        if isinstance(decision, RetryDecision):
            fenced_update(claim, at_step=claim.step, status=RunStatus.RETRYING, run_at=decision.run_at,
                          failures=decision.failures, attempt=claim.attempt + 1, error=error, traceback=traceback,
                          **_LEASE_CLEARED)
        else:
            fenced_update(claim, at_step=claim.step, status=RunStatus.FAILED, failures=claim.failures + 1,
                          attempt=claim.attempt + 1, error=error, traceback=traceback, failed_step=record.name,
                          failure_can_retry=decision.manual_retry, finished_at=now, **_LEASE_CLEARED)
        Step.objects.create(procedure_id=claim.id, index=record.index, name=record.name, attempt=record.attempt,
                            status=StepStatus.FAILED, lease_token=claim.lease_token, started_at=record.started_at,
                            finished_at=record.finished_at, error=error)
        retrying = isinstance(decision, RetryDecision)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.RETRIED if retrying else LeaseOutcome.FAILED)
    signal = signals.procedure_retrying if retrying else signals.procedure_failed
    send_after_commit(signal, procedure_id=claim.id, type_name=claim.type_name, error=error)


def fail_without_attempt(claim: Claim, error: str, *, can_retry: bool = True) -> None:
    """Fail the procedure before running anything (poisonous, removed step, interrupted unsafe step)."""
    with _transaction():
        fenced_update(claim, status=RunStatus.FAILED, error=_truncate(error, conf.MAX_ERROR_LENGTH), traceback="",
                      failed_step=claim.step_name, failure_can_retry=can_retry, finished_at=clock.now(),
                      **_LEASE_CLEARED)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.FAILED)
    send_after_commit(signals.procedure_failed, procedure_id=claim.id, type_name=claim.type_name, error=error)


def release(claim: Claim) -> None:
    """Give the procedure back as ``ready`` without counting an attempt; any late write is fenced out."""
    with _transaction():
        fenced_update(claim, status=RunStatus.READY, lease_token=F("lease_token") + 1, **_LEASE_CLEARED)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.RELEASED)
        notify([claim.queue])
    send_after_commit(signals.procedure_released, procedure_id=claim.id, type_name=claim.type_name)


def enter_unsafe_step(claim: Claim) -> None:
    """Mark that a non-idempotent step starts now, so a lost worker parks the procedure instead of re-running it."""
    with _transaction():
        fenced_update(claim, in_unsafe_step=True, step_started_at=clock.now())
