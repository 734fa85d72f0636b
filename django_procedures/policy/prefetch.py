"""How many procedures a worker claims ahead of its threads: pure decision logic.

Claiming costs a transaction however many rows it takes. When procedures take
a few milliseconds, claiming only for idle threads means one claim per
procedure, so a worker claims a batch ahead, but only as much as its threads
finish within :data:`WINDOW_SECONDS` at the pace of its recent procedures.
Slow procedures get no prefetch at all: nothing waits in a worker's hands
while another worker sits idle.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A prefetched procedure waits about this long, at most, for a thread (at the recent pace).
WINDOW_SECONDS = 0.05
#: Weight of the latest procedure in the moving average of run times.
SMOOTHING = 0.2


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

    def ahead(self, threads: int) -> int:
        """Procedures to hold beyond ``threads``: what they would finish within the window, up to ``limit``."""
        if self.limit <= 0 or self.average is None:
            return 0
        if self.average <= 0:
            return self.limit
        return max(0, min(self.limit, int(threads * WINDOW_SECONDS / self.average)))


def to_claim(held: int, threads: int, ahead: int) -> int:
    """How many to claim now, holding ``held``: top up to ``threads + ahead``.

    With a lookahead, nothing is claimed until the held procedures fall to half
    of it, so claims come in batches instead of one per finished procedure.
    """
    if ahead > 0 and held > threads + ahead // 2:
        return 0
    return max(0, threads + ahead - held)
