"""When the worker's main thread claims for its event loop: the state ``policy.loop_wake`` decides from.

Claims for the loop and for the threads are separate statements (the loop takes only async types). Once a
claim for the loop came back short, claiming for it at every pass of a sync drain would walk the ready backlog
for nothing; this remembers that, what woke the loop since, and when it is claimed for again regardless.
"""

from __future__ import annotations

import time
from datetime import datetime

from django_procedures import clock
from django_procedures.policy.loop_wake import claim_for_loop, loop_recheck_in, wake_after_loop_claim
from django_procedures.runtime.executor import Outcome
from django_procedures.runtime.wakeup import Waker
from django_procedures.store.claim import Claim


class LoopClaims:
    """The main thread's memory of its claims for the event loop."""

    def __init__(self, waker: Waker, poll_seconds: float) -> None:
        self.waker = waker
        self.poll_seconds = poll_seconds
        #: The latest claim for the loop found fewer than it had room for.
        self.short = False
        #: time.monotonic() at which the loop is claimed for again, whatever woke it (after a short claim).
        self.recheck_at = 0.0
        self._news = False  # a claim on the loop ended and woke the main thread (set on the loop's thread)

    def worth_claiming(self) -> bool:
        """Whether this pass claims for the loop (``policy.loop_wake.claim_for_loop``)."""
        news = self.waker.take_news() or self._news
        self._news = False
        return claim_for_loop(last_claim_short=self.short, something_new=news,
                              recheck_passed=time.monotonic() >= self.recheck_at)

    def claimed(self, got: int, wanted: int) -> None:
        self.short = got < wanted

    def recheck(self, due: datetime | None) -> None:
        """After a short claim: claim for the loop again by ``due`` (its types' next due time, or earlier)."""
        due_in = None if due is None else (due - clock.now()).total_seconds()
        self.recheck_at = time.monotonic() + loop_recheck_in(due_in=due_in, poll_seconds=self.poll_seconds)

    def ended(self, claim: Claim, outcome: Outcome, *, still_on_loop: int) -> None:
        """On the loop's thread, as one of its claims ends: wake the main thread if work may be due for it."""
        if wake_after_loop_claim(outcome=outcome.value, last_claim_short=self.short, still_on_loop=still_on_loop,
                                 has_parent=claim.parent_id is not None, held_keys=bool(claim.lock_keys),
                                 held_limits=bool(claim.limits)):
            self._news = True
            self.waker.wake()
