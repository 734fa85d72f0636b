"""The worker's history chores, each run by one worker of the fleet at a time: finished trees older than
``PROCEDURES['RETENTION']`` are pruned a little at a time, so claims are never kept waiting behind a long delete;
what finished is counted per minute for the dashboard (``store.activity``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from time import monotonic

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy.durations import parse_duration
from django_procedures.policy.retention import next_batch_trees
from django_procedures.store import activity, retention, workers

logger = logging.getLogger("django_procedures.worker")

#: Trees the first batch deletes (with their steps and leases); later batches are sized by how long the last took.
BATCH_TREES = 500
#: How long a batch should take: its row locks, its transaction (which holds back vacuum) and, in a worker, the
#: main thread's time away from claiming. A batch of large trees is followed by one of fewer trees.
BATCH_SECONDS = 0.05
#: Most trees per batch however fast batches go (procedures_prune's --batch-size has the same bound).
MAX_BATCH_TREES = 10_000
#: Longest a pass prunes before the main thread goes back to claiming (it ends after the batch that passes it).
PASS_SECONDS = 0.1
#: Most of the time a pass may take: while old trees remain, the next pass waits nine times as long as this one
#: took, and at least BEHIND_SECONDS, so pruning takes at most a tenth of one connection's time however slow the
#: database is.
BUSY_SHARE = 0.1
BEHIND_SECONDS = 1.0
#: Seconds between passes once nothing is left to prune (or another worker is pruning, or retention is off).
IDLE_SECONDS = 60.0
#: Seconds between counts of the minutes that finished (each counts the settled minutes since the last).
COUNT_SECONDS = 60.0


class Pace:
    """Trees per batch, for a run of batches: each batch asks for as many as fit in ``seconds`` at the last pace.

    ``seconds=None`` keeps ``trees`` fixed (``procedures_prune --batch-size``).
    """

    def __init__(self, trees: int = BATCH_TREES, seconds: float | None = BATCH_SECONDS,
                 most: int = MAX_BATCH_TREES) -> None:
        self.trees, self.seconds, self.most = min(trees, most), seconds, most

    def prune_batch(self, cutoff: datetime, statuses: Sequence[str] | None = None, *,
                    alone: bool = False) -> tuple[retention.PruneBatch | None, bool]:
        """One batch (``store.retention.prune_batch``) and whether it was full: more old trees may remain."""
        asked = self.trees
        started = monotonic()
        batch = retention.prune_batch(cutoff, statuses, asked, alone=alone)
        if batch is not None and self.seconds is not None:
            self.trees = next_batch_trees(asked, batch.trees, monotonic() - started, seconds=self.seconds,
                                          most=self.most)
        return batch, batch is not None and batch.trees >= asked


#: The worker's pace, kept from one pass to the next: a pass after one that met large trees starts small.
_pace = Pace()


def prune_pass() -> float | None:
    """Prune old finished trees for about ``PASS_SECONDS``.

    Returns the seconds to wait before the next pass while old trees remain,
    or None (the chore's ordinary interval, ``IDLE_SECONDS``) when none are
    left, ``RETENTION`` is None (off) or another worker holds the pruner's
    lock. Once the trees are done, the rows of workers stopped or gone before
    the same cutoff go too.
    """
    if conf.RETENTION is None:
        return None
    cutoff = clock.now() - parse_duration(conf.RETENTION)
    started = monotonic()
    pruned = retention.PruneBatch()
    try:
        while True:
            batch, full = _pace.prune_batch(cutoff, alone=True)
            if batch is None:  # another worker is on it
                return None
            pruned += batch
            if not full:
                workers.prune(cutoff)
                return None
            took = monotonic() - started
            if took >= PASS_SECONDS:
                return max(BEHIND_SECONDS, took * (1 - BUSY_SHARE) / BUSY_SHARE)
    finally:
        if pruned.trees:
            logger.info("retention: pruned %d trees finished before %s (%d procedures, %d steps, %d leases)",
                        pruned.trees, cutoff.isoformat(timespec="seconds"), pruned.procedures, pruned.steps,
                        pruned.leases)


def count_finished() -> None:
    """Count the procedures of the minutes that have settled since the last count (``store.activity.roll_up``):
    at most ``CATCH_UP`` of them, so the main thread is never kept long; runs every ``COUNT_SECONDS``."""
    activity.roll_up(clock.now())
