"""When the worker's main thread claims for its event loop again: pure decision logic.

Whether an event-loop claim's end should wake the main thread to claim again (:func:`wake_after_loop_claim`),
and whether a pass of the main thread claims for the loop at all (:func:`claim_for_loop`).

A thousand awaiting steps end within a second of each other. Woken by each,
the main thread would claim again each time (a transaction that finds nothing
once the last claim for the loop came back short, then a read of the next due
time), and those statements compete with the loop's own checkpoints for the
database and the interpreter: measured at 300 extra transactions per 1,000
steps ending, the last checkpoint late by a second. A claim ending makes no
other work due unless the procedure has a parent (awaited rows NOTIFY anyway),
held lock keys or limit slots, or did not end final (a retry, a suspension, a
release); new submissions NOTIFY, and without LISTEN the worker polls.
"""

from __future__ import annotations

#: The outcomes (``runtime.running.Outcome`` values) after which nothing of the procedure is due again.
FINAL_OUTCOMES = frozenset({"completed", "failed"})


def wake_after_loop_claim(*, outcome: str, last_claim_short: bool, still_on_loop: int, has_parent: bool,
                          held_keys: bool, held_limits: bool) -> bool:
    """Whether the main thread should claim again now that a claim on the event loop ended with ``outcome``.

    ``last_claim_short``: the latest claim for the loop found fewer due procedures than it had room for (so
    nothing else was due then); ``still_on_loop``: claims the loop still holds (none left: the main thread
    wakes, so a ``--burst`` worker notices it is done).
    """
    if not last_claim_short or still_on_loop <= 0:
        return True
    return outcome not in FINAL_OUTCOMES or has_parent or held_keys or held_limits


def loop_recheck_in(*, due_in: float | None, poll_seconds: float) -> float:
    """After a claim for the event loop came back short: seconds until the main thread claims for it again
    unless something new wakes it first (:func:`claim_for_loop`).

    ``due_in``: seconds until the earliest due time read after that claim, of the loop's types or of all of
    the worker's (never later than the loop's own); None when nothing is due. Something due already (the
    threads' backlog, a row another transaction held) says nothing of when the loop's next is: the bound is
    then ``poll_seconds``, the longest a worker without LISTEN waits before it claims again.
    """
    if due_in is None or due_in <= 0:
        return poll_seconds
    return min(due_in, poll_seconds)


def claim_for_loop(*, last_claim_short: bool, something_new: bool, recheck_passed: bool) -> bool:
    """Whether the main thread claims for the event loop on this pass (it has room).

    Once a claim for the loop came back short, nothing more was due for it then; claiming for it again before
    anything can have changed finds nothing, at every pass the threads' claims make (a transaction and a read
    of the next due time each, beside every claim of a drain of sync procedures). It claims again after
    ``something_new`` (a NOTIFY for its queues, a reconnect of its LISTEN connection, a claim on the loop
    ending as :func:`wake_after_loop_claim` says) or once the recheck time (:func:`loop_recheck_in`, at most
    ``POLL_SECONDS``: how a worker without LISTEN finds new work) has passed.
    """
    return not last_claim_short or something_new or recheck_passed


#: How soon an idle worker claims again when a due procedure's limits have room but its claim got none (another
#: claim was taking that slot or row right then): not at once, which would spin every idle worker of a busy
#: limit against the one whose lease freed the slot (it claims again by itself), yet well before a poll.
LIMITED_POLL_SECONDS = 0.25
