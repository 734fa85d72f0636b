"""How many procedures a worker claims ahead of its threads: pure decision logic.

Claiming costs a transaction however many rows it takes. When procedures take
a few milliseconds, claiming only for idle threads means one claim per
procedure, so a worker claims a batch ahead, but only as much as its threads
finish within :data:`WINDOW_SECONDS` at the pace of its recent procedures.
Slow procedures get no prefetch at all, and a step that has been running
longer than the window counts as slow at once (before it ends and enters the
average). A prefetched procedure still waiting for a thread after
:data:`GIVE_BACK_SECONDS` (the pace changed under it) is given back for any
worker to claim.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A prefetched procedure waits about this long, at most, for a thread (at the recent pace).
WINDOW_SECONDS = 0.05
#: Weight of the latest procedure in the moving average of run times.
SMOOTHING = 0.2
#: A prefetched procedure not started within this many seconds goes back to the queue.
GIVE_BACK_SECONDS = 0.5


@dataclass
class Prefetch:
    """The moving average of how long a claim kept a thread, and the lookahead it allows."""

    #: The most procedures held beyond the threads (the ``PREFETCH`` setting); 0 turns prefetch off.
    limit: int
    #: Seconds per procedure, exponentially smoothed; None until one has run.
    average: float | None = None

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.average = seconds if self.average is None else (1 - SMOOTHING) * self.average + SMOOTHING * seconds

    def ahead(self, threads: int, running_for: float = 0.0) -> int:
        """Procedures to hold beyond ``threads``: what they would finish within the window, up to ``limit``.

        ``running_for``: how long the longest-running procedure on a thread has run so far.
        """
        if self.limit <= 0 or self.average is None:
            return 0
        pace = max(self.average, running_for)
        if pace <= 0:
            return self.limit
        return max(0, min(self.limit, int(threads * WINDOW_SECONDS / pace)))


def stale(waiting_for: float) -> bool:
    """Whether a prefetched procedure that has waited ``waiting_for`` seconds for a thread goes back."""
    return waiting_for >= GIVE_BACK_SECONDS


def to_claim(held: int, threads: int, ahead: int) -> int:
    """How many to claim now, holding ``held``: top up to ``threads + ahead``.

    With a lookahead, nothing is claimed until the held procedures fall to half
    of it, so claims come in batches instead of one per finished procedure.
    """
    if ahead > 0 and held > threads + ahead // 2:
        return 0
    return max(0, threads + ahead - held)
