"""The worker's retention chore: finished trees older than ``PROCEDURES['RETENTION']`` are pruned a little at a
time, by one worker of the fleet at a time, so claims are never kept waiting behind a long delete."""

from __future__ import annotations

import logging
from time import monotonic

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy.durations import parse_duration
from django_procedures.store import retention, workers

logger = logging.getLogger("django_procedures.worker")

#: Trees deleted per transaction (with their steps and leases): tens of milliseconds of locks and WAL.
BATCH_TREES = 500
#: Longest a pass prunes before the main thread goes back to claiming (it ends after the batch that passes it).
PASS_SECONDS = 0.1
#: Most of the time a pass may take: while old trees remain, the next pass waits nine times as long as this one
#: took, and at least BEHIND_SECONDS, so pruning takes at most a tenth of one connection's time however slow the
#: database is.
BUSY_SHARE = 0.1
BEHIND_SECONDS = 1.0
#: Seconds between passes once nothing is left to prune (or another worker is pruning, or retention is off).
IDLE_SECONDS = 60.0


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
            batch = retention.prune_batch(cutoff, batch_size=BATCH_TREES, alone=True)
            if batch is None:  # another worker is on it
                return None
            pruned += batch
            if batch.trees < BATCH_TREES:
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
