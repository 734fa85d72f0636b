"""The claims a worker holds: running on an executor thread, or claimed ahead and waiting for one.

:class:`HeldClaims` is the worker's bookkeeping of them: by fencing token, a
count, the prefetch estimate (``policy.prefetch``) of how many to claim, the
give-back of claims that waited too long for a thread, and the claims the
heartbeat renews. Every method takes the worker's lock (an ``RLock``: callers
may already hold it), shared with the worker so that one lock guards the
claims and the crew's threads together.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter

from django_procedures.policy.prefetch import GIVE_BACK_SECONDS, Prefetch, stale, to_claim
from django_procedures.runtime import write_lock
from django_procedures.runtime.crew import Crew
from django_procedures.runtime.endings import Interrupted
from django_procedures.runtime.running import Outcome, RunningClaim, log_extra
from django_procedures.runtime.settle import settle

logger = logging.getLogger("django_procedures.worker")

#: The worker's ``stats`` key for each claim outcome.
STAT = {Outcome.COMPLETED: "succeeded", Outcome.SUSPENDED: "suspended", Outcome.RETRIED: "retried",
        Outcome.SLEPT: "slept", Outcome.WAITED: "waited", Outcome.FAILED: "failed", Outcome.ROLLED_BACK: "rolled_back",
        Outcome.RELEASED: "released", Outcome.LOST: "lost", Outcome.CONTINUED: "continued",
        Outcome.ROLLING_BACK: "rolling_back"}


class HeldClaims:
    """The claims one worker holds, under the worker's lock (see the module)."""

    def __init__(self, lock: threading.RLock, crew: Crew, stats: Counter[str], *, concurrency: int,
                 prefetch: int) -> None:
        self._lock = lock
        self._crew = crew
        self._stats = stats
        self._concurrency = concurrency
        # By fencing token: a timed-out step's thread may still be busy with an old token of a procedure
        # this worker claimed again.
        self._claims: dict[tuple[uuid.UUID, int], RunningClaim] = {}
        # Claims held: running, or waiting for a thread (prefetched). An abandoned step still counts until
        # its thread returns.
        self.count = 0
        # Claims on the event loop (``runtime.lane``), counted apart: they use no thread.
        self.on_loop = 0
        self.prefetch = Prefetch(limit=prefetch)

    def add(self, running: RunningClaim) -> None:
        with self._lock:
            self._claims[(running.claim.id, running.claim.lease_token)] = running
            if running.on_loop:
                running.taken_at = running.claimed_at  # started at once: never stale, never given back
                self.on_loop += 1
            else:
                self.count += 1

    def finished(self, running: RunningClaim, seconds: float) -> int:
        """A thread (or the event loop) is done with ``running`` after ``seconds``; how many the main thread
        should claim now (of either kind)."""
        with self._lock:
            if self._claims.pop((running.claim.id, running.claim.lease_token), None) is not None:
                self._forget(running)  # (unless in_flight dropped it already)
            if running.on_loop:
                return 1
            self.prefetch.observe(seconds)
            return self.wanted()

    def _forget(self, running: RunningClaim) -> None:
        if running.on_loop:
            self.on_loop -= 1
        else:
            self.count -= 1

    @property
    def total(self) -> int:
        """Claims held, on threads and on the event loop."""
        return self.count + self.on_loop

    def snapshot(self) -> list[RunningClaim]:
        with self._lock:
            return list(self._claims.values())

    def busy_threads(self) -> int:
        """Executor threads running a procedure now (prefetched claims not counted)."""
        with self._lock:
            return sum(1 for r in self._claims.values() if r.taken_at is not None and not r.on_loop)

    def hold_write_lock(self) -> bool:
        """SQLite: a step of ours holds the database's write lock now."""
        with self._lock:
            return write_lock.held_by_us(self._claims.values())

    def wanted(self) -> int:
        """How many to claim now."""
        with self._lock:
            now = time.monotonic()
            running_for = max((now - r.taken_at for r in self._claims.values()
                               if r.taken_at is not None and not r.on_loop), default=0.0)
            return to_claim(self.count, self._concurrency, self.prefetch.ahead(self._concurrency, running_for))

    def next_give_back(self) -> float:
        """When the oldest prefetched claim goes stale (``time.monotonic()``); infinity if none waits."""
        with self._lock:
            return min((r.claimed_at + GIVE_BACK_SECONDS for r in self._claims.values() if r.taken_at is None),
                       default=float("inf"))

    def give_back_stale(self) -> None:
        """Release prefetched claims that waited too long for a thread, so any worker can take them."""
        now = time.monotonic()
        with self._lock:
            stale_claims = [r for r in self._claims.values() if r.taken_at is None and stale(now - r.claimed_at)]
            for r in stale_claims:
                r.given_back = True  # the thread that dequeues it skips it
                del self._claims[(r.claim.id, r.claim.lease_token)]
                self.count -= 1
        for r in stale_claims:  # settled outside the lock: it writes to the database
            # Cancelled or taken over while it waited: settled as lost (the fence refuses the release).
            outcome = settle(r, Interrupted(f"waited {now - r.claimed_at:.2f}s for a thread; given back",
                                            routine=True))
            self._stats["given_back" if outcome is Outcome.RELEASED else STAT[outcome]] += 1

    def in_flight(self) -> tuple[list[RunningClaim], bool]:
        """The claims the heartbeat renews, and whether a thread died (the main loop starts new ones).

        Held claims are those waiting for a thread or worked on by a live one (``Crew``); any other is
        dropped: its lease expires and the attempt counts as lost, never held for ever.
        """
        with self._lock:
            dead = [r for r in self._claims.values() if not self._crew.working_on(r)]
            for r in dead:
                del self._claims[(r.claim.id, r.claim.lease_token)]
                self._forget(r)
            held = list(self._claims.values())
            replace = bool(dead) or self._crew.any_dead()
        for r in dead:
            r.activity.lose("the executor thread running it died")
            self._stats["lost"] += 1
            logger.error("procedure %s: executor thread %s died while running it; its lease is no longer renewed "
                         "and will expire (a lost attempt)", r.claim.id, r.owner and r.owner.name,
                         extra=log_extra(r.claim))
        return held, replace
