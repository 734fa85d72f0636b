"""Whether an event-loop claim's end should wake the worker's main thread to claim again: pure decision logic.

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
