"""The worker's retention chore: finished trees older than ``PROCEDURES['RETENTION']`` are pruned a little at a
time, by one worker of the fleet at a time, so claims are never kept waiting behind a long delete."""

from __future__ import annotations

import logging
import time

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy.durations import parse_duration
from django_procedures.store import retention, workers

logger = logging.getLogger("django_procedures.worker")

#: Trees deleted per transaction (with their steps and leases): a few milliseconds of locks and WAL.
BATCH_TREES = 1000
#: Longest a pass prunes before the main thread goes back to claiming.
PASS_SECONDS = 0.1
#: Seconds between passes while old trees remain: with PASS_SECONDS, at most a tenth of one connection's time.
BEHIND_SECONDS = 1.0
#: Seconds between passes once nothing is left to prune (or another worker is pruning, or retention is off).
IDLE_SECONDS = 60.0


def prune_pass() -> bool:
    """Prune old finished trees for at most ``PASS_SECONDS``; True if some are left for the next pass.

    Returns False at once when ``RETENTION`` is None (off) or another worker
    holds the pruner's lock. Once the trees are done, the rows of workers
    stopped or gone before the same cutoff go too.
    """
    if conf.RETENTION is None:
        return False
    cutoff = clock.now() - parse_duration(conf.RETENTION)
    deadline = time.monotonic() + PASS_SECONDS
    pruned = retention.PruneBatch()
    try:
        while True:
            batch = retention.prune_batch(cutoff, batch_size=BATCH_TREES, alone=True)
            if batch is None:  # another worker is on it
                return False
            pruned += batch
            if batch.trees < BATCH_TREES:
                workers.prune(cutoff)
                return False
            if time.monotonic() >= deadline:
                return True
    finally:
        if pruned.trees:
            logger.info("retention: pruned %d trees finished before %s (%d procedures, %d steps, %d leases)",
                        pruned.trees, cutoff.isoformat(timespec="seconds"), pruned.procedures, pruned.steps,
                        pruned.leases)
