"""A failed attempt's writes: a retry, a final failure (or the rollback it starts), an attempt lost with its
worker, a parked non-idempotent step, and the end of a rollback. Each under the claim's lease (fenced)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F

from django_procedures import clock, signals
from django_procedures.conf import conf
from django_procedures.models import Step
from django_procedures.policy.retry import FailDecision, RetryDecision
from django_procedures.policy.status import LeaseOutcome, RunStatus, StepStatus
from django_procedures.policy.text import clean_text
from django_procedures.policy.tree_retry import collateral_reason
from django_procedures.store import tree
from django_procedures.store.claim import Claim
from django_procedures.store.db import db_now
from django_procedures.store.events import send_after_commit
from django_procedures.store.fence import LEASE_CLEARED, StepRecord, close_lease, fenced_update, held_row
from django_procedures.store.final import Ending, finish_one, joined
from django_procedures.store.notify import notify


def _truncate(text: str, limit: int, keep_tail: bool = False) -> str:
    text = clean_text(text)  # error texts come from foreign code: no NUL, no lone surrogate
    if len(text) <= limit:
        return text
    marker = "…[truncated]…"
    return marker + text[-(limit - len(marker)):] if keep_tail else text[: limit - len(marker)] + marker


def _failed_step(claim: Claim, record: StepRecord, error: str, traceback: str = "") -> None:
    Step._writer.create(procedure_id=claim.id, index=record.index, name=record.name, attempt=record.attempt,
                        status=StepStatus.FAILED, lease_token=claim.lease_token, started_at=record.started_at,
                        finished_at=record.finished_at, error=error, traceback=traceback)


def fail_attempt(claim: Claim, record: StepRecord | None, error: str, traceback: str,
                 decision: RetryDecision | FailDecision, *, rollback: bool = False, hand_off: bool = False,
                 at_step: int | None = None) -> None:
    """Record a failed attempt (``record``; None when no step ran) and apply ``decision``.

    A retry makes the run ``retrying`` until ``decision.run_at``. A permanent
    failure cancels the procedure's unfinished descendants. With ``rollback``
    it goes ``rolling_back`` under the same lease (never committing ``failed``
    first) and the caller runs the rollback next; with ``hand_off`` too, the
    lease ends and the rollback is left for the next claim. Without
    ``rollback`` the failure is final (through ``final.finalise``).
    """
    error = _truncate(error, conf.MAX_ERROR_LENGTH)
    traceback = _truncate(traceback, conf.MAX_TRACEBACK_LENGTH, keep_tail=True)
    failed_step = record.name if record else claim.step_name
    at_step = claim.step if at_step is None else at_step
    if isinstance(decision, RetryDecision):
        with joined():
            fenced_update(claim, at_step=at_step, status=RunStatus.RETRYING, run_at=decision.run_at,
                          failures=decision.failures, attempt=claim.attempt + 1, error=error, traceback=traceback,
                          **LEASE_CLEARED)
            if record is not None:
                _failed_step(claim, record, error, traceback)
            close_lease(claim.id, claim.lease_token, LeaseOutcome.RETRIED, queue=claim.queue)
        send_after_commit(signals.procedure_retrying, procedure_id=claim.id, type_name=claim.type_name, error=error)
        return
    if rollback:
        lease = {"status": RunStatus.READY, "run_at": clock.now(), **LEASE_CLEARED} if hand_off else {
            "status": RunStatus.ROLLING_BACK, "in_unsafe_step": False}
        with joined():
            fenced_update(claim, at_step=at_step, in_rollback=True, failures=0, lost=0, attempt=1, error=error,
                          traceback=traceback, failed_step=failed_step, failure_can_retry=decision.manual_retry,
                          pending_children=0, **lease)
            if record is not None:
                _failed_step(claim, record, error, traceback)
            tree.cancel_subtree(claim.id, collateral_reason(claim.id), include_self=False)
            if hand_off:
                close_lease(claim.id, claim.lease_token, LeaseOutcome.FAILED, queue=claim.queue)
                notify([claim.queue])
        claim.in_rollback, claim.failures, claim.lost, claim.attempt = True, 0, 0, 1
        return

    def write() -> bool:
        tried = 1 if record is not None else 0  # poisonous or removed steps fail without an attempt
        fenced_update(claim, at_step=at_step, status=RunStatus.FAILED, failures=claim.failures + tried,
                      attempt=claim.attempt + tried, error=error, traceback=traceback, failed_step=failed_step,
                      failure_can_retry=decision.manual_retry, finished_at=clock.now(), pending_children=0,
                      **LEASE_CLEARED)
        if record is not None:
            _failed_step(claim, record, error, traceback)
        tree.cancel_subtree(claim.id, collateral_reason(claim.id), include_self=False)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.FAILED, queue=claim.queue)
        return True

    finish_one(Ending.of(claim), write, failed=True, signal=signals.procedure_failed, error=error)


@dataclass(frozen=True)
class LostAttempt:
    """An attempt whose worker was lost (its lease expired): recorded as a ``lost`` step by the sweep."""

    error: str
    started_at: datetime | None
    finished_at: datetime


def record_lost_attempt(claim: Claim, lost: LostAttempt) -> None:
    """The ``lost`` Step row of the attempt, and its lease closed as ``expired``."""
    Step._writer.create(procedure_id=claim.id, index=claim.step,
                        name="rollback" if claim.in_rollback else claim.step_name,
                        attempt=claim.attempt, status=StepStatus.LOST, lease_token=claim.lease_token,
                        started_at=lost.started_at, finished_at=lost.finished_at, error=lost.error)
    close_lease(claim.id, claim.lease_token, LeaseOutcome.EXPIRED)


def park_interrupted(claim: Claim, step_name: str, *, lost: LostAttempt | None = None) -> bool:
    """Park a run interrupted inside non-idempotent step ``step_name`` as ``failed`` (retryable by hand):
    the step may or may not have taken effect, so it is never run again by itself. A final transition.

    By the worker that holds it (``lost`` None): fenced on the claim, raises
    ``LeaseLost`` if the lease moved. By the lease sweep (``lost``: the expired
    attempt): only while the lease is still expired inside the step, counting a
    lost attempt and fencing out the old token; False if the run moved on (a
    row another transaction holds is left for the next sweep).
    """
    error = f"interrupted during non-idempotent step {step_name}"
    if lost is None:
        fail_attempt(claim, None, error, "", FailDecision("interrupted", manual_retry=True))
        return True

    def write() -> bool:
        # Still expired, under the same lease, inside the step: a worker that renewed or finished meanwhile wins.
        rows = held_row(claim).filter(in_unsafe_step=True, lease_expires_at__lt=db_now())
        if rows.select_for_update(skip_locked=True).values_list("id", flat=True).first() is None:
            return False
        rows.update(status=RunStatus.FAILED, error=error, traceback="", failed_step=claim.step_name,
                    failure_can_retry=True, finished_at=lost.finished_at, attempt=F("attempt") + 1,
                    lost=F("lost") + 1, lease_token=F("lease_token") + 1, pending_children=0, **LEASE_CLEARED)
        tree.cancel_subtree(claim.id, collateral_reason(claim.id), include_self=False)
        record_lost_attempt(claim, lost)
        return True

    return finish_one(Ending.of(claim), write, failed=True, signal=signals.procedure_failed, error=error)


def finish_rollback(claim: Claim, record: StepRecord) -> None:
    """The rollback succeeded: ``rolled_back``, final."""
    def write() -> bool:
        fenced_update(claim, status=RunStatus.ROLLED_BACK, finished_at=clock.now(), rollback_error="",
                      **LEASE_CLEARED)
        Step._writer.create(procedure_id=claim.id, index=record.index, name=record.name, attempt=record.attempt,
                            status=StepStatus.DONE, lease_token=claim.lease_token, started_at=record.started_at,
                            finished_at=record.finished_at)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
        return True

    finish_one(Ending.of(claim), write, failed=True, signal=signals.procedure_rolled_back)


def fail_rollback(claim: Claim, record: StepRecord, error: str, decision: RetryDecision | FailDecision) -> None:
    """The rollback failed: try it again later, or end ``failed`` with both errors kept."""
    error = _truncate(error, conf.MAX_ERROR_LENGTH)
    if isinstance(decision, RetryDecision):
        with joined():
            fenced_update(claim, status=RunStatus.RETRYING, run_at=decision.run_at, failures=decision.failures,
                          attempt=claim.attempt + 1, rollback_error=error, **LEASE_CLEARED)
            _failed_step(claim, record, error)
            close_lease(claim.id, claim.lease_token, LeaseOutcome.RETRIED, queue=claim.queue)
        return

    def write() -> bool:
        fenced_update(claim, status=RunStatus.FAILED, failures=claim.failures + 1, attempt=claim.attempt + 1,
                      rollback_error=error, finished_at=clock.now(), pending_children=0,
                      failure_can_retry=decision.manual_retry, **LEASE_CLEARED)
        _failed_step(claim, record, error)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.FAILED, queue=claim.queue)
        return True

    finish_one(Ending.of(claim), write, failed=True, signal=signals.procedure_failed, error=error)
