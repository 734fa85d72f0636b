"""A lost database connection in the middle of a claim: wait for the database, then resume or stop.

A restart of PostgreSQL or a terminated backend is not the step's fault and
costs no attempt. The executor reconnects with backoff, re-reads its row under
its lease (the last transaction's COMMIT may or may not have landed) and goes
on from the last committed checkpoint, except after a non-idempotent step,
whose result in hand is written again rather than the step run twice.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import Error, transaction

from django_procedures.runtime.outage import watch
from django_procedures.runtime.running import Outcome, RunningClaim, log_extra, logger
from django_procedures.store import transitions
from django_procedures.store.db import cut_while_idle, is_disconnect

#: Times one claim resumes after a lost connection before it is left to its lease expiry.
MAX_RECONNECTS = 3


def after_disconnect(running: RunningClaim, error: Error, reconnects: int) -> Outcome | None:
    """Wait for the database; None to run the claim again from its last checkpoint, else how it ended."""
    claim = running.claim
    found = wait_for_database(running, error)
    if found is None:
        return Outcome.LOST
    if found.in_unsafe_step:  # a non-idempotent step was running: it may or may not have taken effect
        return park_unsafe(running)
    if reconnects >= MAX_RECONNECTS:
        logger.warning("procedure %s: the database connection was lost %d times during this claim; leaving it "
                       "to its lease expiry", claim.id, reconnects + 1, extra=log_extra(claim))
        return Outcome.LOST
    logger.debug("procedure %s: resuming at step %s under lease token %s after reconnecting", claim.id,
                 claim.step_name, claim.lease_token, extra=log_extra(claim))
    return None


def wait_for_database(running: RunningClaim, error: Error) -> transitions.Reloaded | None:
    """Reconnect with backoff and re-read the claim (see ``transitions.reload``); None if it must stop here.

    It stops when the heartbeat gave the lease up (renewal timeout), when the
    worker shuts down while the database is still away (the lease is left to
    expire), or when the lease is no longer this claim's.
    """
    claim, activity = running.claim, running.activity
    watch.lost(error, f"procedure {claim.id}")
    connection = transaction.get_connection()
    delay = 0.1
    while True:
        connection.close()
        if activity.lost_reason:
            logger.info("procedure %s: stopped while the database was unreachable: %s", claim.id,
                        activity.lost_reason, extra=log_extra(claim))
            return None
        try:
            found = transitions.reload(claim)
            break
        except Error as again:
            if not is_disconnect(again):
                raise
        if activity.stopping.wait(delay):
            return None
        delay = min(delay * 2, 2.0)
    watch.restored()
    if not found.held:
        logger.info("procedure %s: no longer held by lease token %s once the database was back (its last "
                    "write committed, or the lease moved); dropping this worker's result", claim.id,
                    claim.lease_token, extra=log_extra(claim))
        return None
    return found


def park_unsafe(running: RunningClaim) -> Outcome:
    """Park the procedure ``failed``: its non-idempotent step may or may not have taken effect."""
    claim = running.claim
    transitions.park_interrupted(claim, claim.step_name)
    logger.warning("procedure %s: the database connection was lost during non-idempotent step %s; parked as "
                   "failed (retry it by hand once its effect is checked)", claim.id, claim.step_name,
                   extra=log_extra(claim))
    return Outcome.FAILED


class Settled(Exception):
    """Raised by :func:`_record` when the claim ended while its result was being written."""

    def __init__(self, outcome: Outcome | None) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def record(running: RunningClaim, idempotent: bool, write: Callable[[], object]) -> None:
    """Commit what the steps since the last checkpoint did with ``write`` (checkpoint, completion or suspension).

    After a non-idempotent step a lost connection must not run the step again:
    the result in hand is written again once the database is back, unless the
    reloaded row shows the write landed (its checkpoint clears
    ``in_unsafe_step``) or the lease moved; then ``Settled`` says how the
    claim ended (None: carry on from the committed checkpoint).
    """
    if idempotent:  # (of the first step since the checkpoint): a lost write is simply run again
        write()
        return
    for _ in range(MAX_RECONNECTS + 1):
        try:
            write()
            return
        except Error as error:  # Django's InterfaceError is no DatabaseError
            if not is_disconnect(error) or cut_while_idle(error):  # idle cut: the step's failure, see executor
                raise
            found = wait_for_database(running, error)
            if found is None:
                raise Settled(Outcome.LOST) from error
            if not found.in_unsafe_step:
                raise Settled(None) from error
    raise Settled(Outcome.LOST)
