"""Helpers for users' own tests: run procedures in-process, deterministically."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django_procedures import clock, registry
from django_procedures.conf import conf
from django_procedures.runtime.executor import Outcome, RunningClaim, execute
from django_procedures.store import claim as claims
from django_procedures.store import due, timers
from django_procedures.store.maintenance import maintain

#: Claim passes ``drain()`` makes again when something due was not claimed (see there).
_LOOK_AGAIN = 3


@dataclass(frozen=True)
class DrainReport:
    """What ``drain()`` did, and when something next becomes due (``None``: nothing is waiting)."""

    claimed: int
    outcomes: dict[str, int] = field(default_factory=dict)
    next_due: datetime | None = None

    def __getitem__(self, outcome: str) -> int:
        return self.outcomes.get(outcome, 0)


def drain(queues: Sequence[str] | None = None, now: datetime | None = None) -> DrainReport:
    """Claim and run, on this thread and connection, everything due at ``now`` until nothing is.

    ``now`` (default: the real time) decides what is due and is the time
    recorded on procedures and steps; leases keep the database's clock, so
    ``drain(now=T)`` never expires another worker's lease. It never sleeps and
    runs no heartbeat; it works inside a ``TestCase``.
    """
    worker = f"drain:{os.getpid()}"
    outcomes: Counter[str] = Counter()
    claimed = 0
    with clock.frozen_at(now):
        types = registry.type_names()
        maintain()
        looked_again = 0
        timers.wake_due()  # sleepers due at ``now``
        while True:
            batch = claims.claim(worker, type_names=types, queues=queues, limit=1,
                                 lease_seconds=conf.LEASE_SECONDS)
            if not batch:
                # A sleep of this drain that is due at ``now`` already (until= a past time) is woken here, once
                # nothing else is left: not a wake pass per claim.
                if timers.wake_due():
                    continue
                next_due = due.next_due(type_names=types, queues=queues)
                # The claim skips rows another transaction holds for an instant (a handle.wait() marking its
                # procedure, say): something due now that was not claimed is looked for again, a few times.
                if looked_again < _LOOK_AGAIN and next_due is not None and next_due <= clock.now():
                    looked_again += 1
                    continue
                break
            claimed += 1
            outcome = execute(RunningClaim(batch[0]))
            outcomes[outcome.value] += 1
    return DrainReport(claimed, {o.value: outcomes[o.value] for o in Outcome if outcomes[o.value]}, next_due)


@contextmanager
def isolated_registry() -> Iterator[None]:
    """Forget, on exit, the procedure classes defined inside the block (a class defined in a test).

    The classes registered before the block stay registered; a class the block
    registered under an existing type name is replaced by the original again.
    """
    saved = dict(registry._types)
    try:
        yield
    finally:
        registry._types.clear()
        registry._types.update(saved)
