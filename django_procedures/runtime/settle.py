"""The one place that writes how a claim's attempt ended: :func:`settle`.

The executor, the hooks, the heartbeat (a step past its timeout) and the
worker (shutdown, a claim given back unstarted) each describe how an attempt
ended with one of the values of :mod:`~django_procedures.runtime.endings`; :func:`settle` makes the single store
call for it, reports it to the observers and logs it, and says what the
claim's :class:`~.running.Outcome` is. A write the fence refuses (the lease
moved) is settled here too: the result is dropped, logged once at INFO, and
inside an atomic step its transaction is rolled back with it.

Each new way for a claim to end (a wait for an event, a freed
limit slot) is one more value and one more case of :func:`settle`.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from functools import partial

from django.db import transaction

from django_procedures.exceptions import LeaseLost
from django_procedures.policy.interruption import Interruption, after_interruption
from django_procedures.policy.retry import RetryDecision
from django_procedures.policy.state import written_as
from django_procedures.runtime import observe, reconnect
from django_procedures.runtime.endings import (
    Awaiting,
    Completed,
    Continued,
    Ended,
    Failed,
    Interrupted,
    Lost,
    Parked,
    RollbackFailed,
    RolledBack,
    Slept,
    StepsEnded,
    Suspended,
)
from django_procedures.runtime.running import Outcome, RunningClaim, log_extra, logger
from django_procedures.store import failures, inbox, transitions

# -- the settle point -------------------------------------------------------------------------


def settle(running: RunningClaim, ended: Ended) -> Outcome:
    """Write how ``running``'s attempt ended (one store call) and say what the claim's outcome is.

    Called where the write must happen: inside an atomic step's transaction for
    its checkpoint (so the step's writes and its checkpoint commit together),
    on the step's thread otherwise, on the heartbeat thread for a timeout, on
    the main thread at shutdown.
    """
    try:
        outcome = _write(running, ended)
    except LeaseLost:
        return fenced_out(running)
    except reconnect.Settled as settled:  # a non-idempotent step's result, written again after a reconnect
        return Outcome.CONTINUED if settled.ended is None else _write(running, settled.ended)
    return outcome


def settle_last(running: RunningClaim, ended: Ended) -> Outcome:
    """:func:`settle` as the last statement of an atomic step's (or rollback's) own transaction, called inside
    it: when the write is refused the transaction is rolled back, so the step's writes never commit without it."""
    outcome = settle(running, ended)
    if outcome is Outcome.LOST:
        transaction.set_rollback(True)
    return outcome


def fenced_out(running: RunningClaim, why: str = "") -> Outcome:
    """A write the fence refused: the lease moved, so this worker's result is dropped (logged once, at INFO)."""
    claim = running.claim
    observe.fenced_write(claim)
    logger.info("procedure %s: lease token %s was lost%s; dropping this worker's result", claim.id,
                claim.lease_token, f" ({why})" if why else "", extra=log_extra(claim))
    return Outcome.LOST


def _write(running: RunningClaim, ended: Ended) -> Outcome:
    claim = running.claim
    match ended:
        case Continued() | Completed() | Suspended() | Slept() | Awaiting():
            return _steps_ended(running, ended)
        case Failed():
            return _failed(running, ended)
        case RolledBack(record):
            failures.finish_rollback(claim, record)
            return Outcome.ROLLED_BACK
        case RollbackFailed(record, error, decision):
            failures.fail_rollback(claim, record, error, decision)
            logger.warning("procedure %s: rollback attempt %s failed: %s", claim.id, record.attempt, error,
                           extra=log_extra(claim))
            return Outcome.RETRIED if isinstance(decision, RetryDecision) else Outcome.FAILED
        case Interrupted(why, routine):
            return _interrupted(running, why, routine)
        case Parked(step_name, why):
            failures.park_interrupted(claim, step_name)
            running.effect_uncommitted = False
            logger.warning("procedure %s: %s during non-idempotent step %s; parked as failed (retry it by hand once "
                           "its effect is checked)", claim.id, why, step_name, extra=log_extra(claim))
            return Outcome.FAILED
        case Lost(why):
            logger.info("procedure %s: stopped: %s", claim.id, why, extra=log_extra(claim))
            return Outcome.LOST
    raise TypeError(f"cannot settle {ended!r}")  # pragma: no cover - every Ended is matched above


def _steps_ended(running: RunningClaim, ended: StepsEnded) -> Outcome:
    """Commit the steps with the write of their ending; a non-idempotent one's result survives a reconnect."""
    claim, progress = running.claim, running.progress
    # Each write carries a held-back progress report (no statement of its own); a checkpoint only one that is due.
    match ended:
        case Continued():
            write = partial(transitions.commit_checkpoint, claim, ended.records, ended.state, ended.next_step,
                            progress.take(if_due=True), ends_transaction=True)
            outcome = Outcome.CONTINUED
        case Completed():
            write = partial(transitions.complete, claim, ended.records, ended.state, ended.output, progress.take(),
                            ends_transaction=True)
            outcome = Outcome.COMPLETED
        case Suspended():
            write = partial(transitions.suspend, claim, ended.records, ended.state, ended.next_step, ended.rows,
                            progress.take())
            outcome = Outcome.SUSPENDED
        case Slept():
            write = partial(transitions.sleep, claim, ended.records, ended.state, ended.next_step, ended.wake_at,
                            progress.take())
            outcome = Outcome.SLEPT
        case Awaiting():
            write = partial(inbox.wait, claim, ended.records, ended.state, ended.next_step, ended.names,
                            ended.wake_at, progress.take())
            outcome = Outcome.WAITED
    # The state was encoded once, to measure it: the write reuses that text.
    with written_as(ended.state, ended.state_text) if ended.state_text else nullcontext():
        reconnect.record(running, ended.safe, write)
    running.effect_uncommitted = False
    observe.steps_committed(claim, ended.records)
    return outcome


def _failed(running: RunningClaim, ended: Failed) -> Outcome:
    claim = running.claim
    failures.fail_attempt(claim, ended.record, ended.error, ended.trace, ended.decision, rollback=ended.rollback,
                             hand_off=ended.hand_off, at_step=ended.at_step)
    running.effect_uncommitted = False
    observe.step_failed(claim, ended.record, ended.exception)
    if isinstance(ended.decision, RetryDecision):
        if ended.record is not None:
            logger.warning("procedure %s step %s attempt %s failed (retrying): %s", claim.id, ended.record.name,
                           ended.record.attempt, ended.error, extra=log_extra(claim))
        return Outcome.RETRIED
    if ended.rollback and not ended.hand_off:
        logger.error("procedure %s failed; rolling back: %s", claim.id, ended.error, extra=log_extra(claim))
        return Outcome.ROLLING_BACK
    logger.error("procedure %s failed: %s", claim.id, ended.error, extra=log_extra(claim))
    return Outcome.FAILED


def _interrupted(running: RunningClaim, why: str, routine: bool) -> Outcome:
    """Give the claim back, or park it: decided once, from what the claim's step has done."""
    claim = running.claim
    if running.activity.lost_reason:
        return _write(running, Lost(running.activity.lost_reason))
    spec = running.current
    decision = after_interruption(Interruption(step_began=running.effect_uncommitted,
                                               idempotent=spec is None or spec.idempotent))
    if decision == "park" and spec is not None:
        return _write(running, Parked(spec.name, why))
    try:
        transitions.give_back(claim)
    except LeaseLost:  # cancelled or taken over meanwhile: a claim that ended lost
        return _write(running, Lost(f"lease token {claim.lease_token} was taken over or cancelled ({why})"))
    logger.log(logging.DEBUG if routine else logging.INFO, "procedure %s: %s; released", claim.id, why,
               extra=log_extra(claim))
    return Outcome.RELEASED


__all__ = ["fenced_out", "settle", "settle_last"]
