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

from django_procedures.runtime.endings import Ended, Lost, Parked
from django_procedures.runtime.outage import watch
from django_procedures.runtime.running import RunningClaim, log_extra, logger
from django_procedures.store import fence
from django_procedures.store.db import cut_while_idle, is_disconnect

#: Times one claim resumes after a lost connection before it is left to its lease expiry.
MAX_RECONNECTS = 3


def after_disconnect(running: RunningClaim, error: Error, reconnects: int) -> Ended | None:
    """Wait for the database; None to run the claim again from its last checkpoint, else how it ended."""
    claim = running.claim
    found = wait_for_database(running, error)
    if isinstance(found, Lost):
        return found
    if found.in_unsafe_step:  # a non-idempotent step was running: it may or may not have taken effect
        return Parked(claim.step_name, "the database connection was lost")
    if reconnects >= MAX_RECONNECTS:
        return Lost(f"the database connection was lost {reconnects + 1} times during this claim; leaving it to "
                    "its lease expiry")
    logger.debug("procedure %s: resuming at step %s under lease token %s after reconnecting", claim.id,
                 claim.step_name, claim.lease_token, extra=log_extra(claim))
    return None


def wait_for_database(running: RunningClaim, error: Error) -> fence.Reloaded | Lost:
    """Reconnect with backoff and re-read the claim (see ``fence.reload``); ``Lost`` if it must stop here.

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
            return Lost(f"{activity.lost_reason} (while the database was unreachable)")
        try:
            found = fence.reload(claim)
            break
        except Error as again:
            if not is_disconnect(again):
                raise
        if activity.stopping.wait(delay):
            return Lost("the worker is shutting down while the database is unreachable; the lease is left to expire")
        delay = min(delay * 2, 2.0)
    watch.restored()
    if not found.held:
        return Lost(f"no longer held by lease token {claim.lease_token} once the database was back (its last "
                    "write committed, or the lease moved); dropping this worker's result")
    return found


class Settled(Exception):
    """Raised by :func:`record` when the claim ended while its result was being written."""

    def __init__(self, ended: Ended | None) -> None:
        super().__init__(ended)
        #: How the claim ended; None: the write landed, carry on from the committed checkpoint.
        self.ended = ended


def record(running: RunningClaim, idempotent: bool, write: Callable[[], object]) -> None:
    """Commit what the steps since the last checkpoint did with ``write`` (checkpoint, completion or suspension).

    After a non-idempotent step a lost connection must not run the step again:
    the result in hand is written again once the database is back, unless the
    reloaded row shows the write landed (its checkpoint clears
    ``in_unsafe_step``) or the lease moved; then ``Settled`` says how the
    claim ended.
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
            if isinstance(found, Lost):
                raise Settled(found) from error
            if not found.in_unsafe_step:
                raise Settled(None) from error
    raise Settled(Lost(f"the database connection was lost {MAX_RECONNECTS + 1} times while writing the result"))
