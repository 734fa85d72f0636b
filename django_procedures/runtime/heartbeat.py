"""The heartbeat thread: renews every held lease in one statement, on its own connection."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from django.db import connection

from django_procedures.runtime import deadlines, write_lock
from django_procedures.runtime.executor import RunningClaim, fail_overdue
from django_procedures.runtime.outage import watch
from django_procedures.store.db import is_disconnect
from django_procedures.store.leases import renew

logger = logging.getLogger("django_procedures.worker")


class Heartbeat(threading.Thread):
    """Renews leases every ``lease_seconds / 3``; flips contexts to expired when renewal fails too long.

    A claim whose lease did not come back from the renewal (it expired and was
    reclaimed, or was cancelled) is marked lost at once. If renewals keep
    failing (database unreachable) for ``renewal_timeout`` seconds since the
    last success, every running claim is marked lost: its steps' next
    ``ctx.ensure_active()`` raises, before another worker can take over. A
    lost connection is reported to the worker's :data:`~.outage.watch` (one
    warning per outage); other renewal errors are logged once until a renewal
    succeeds again.
    """

    def __init__(self, running: Callable[[], Iterable[RunningClaim]], *, lease_seconds: float,
                 renewal_timeout: float) -> None:
        super().__init__(name="procedures-heartbeat", daemon=True)
        self.running = running
        self.interval = lease_seconds / 3
        self.lease_seconds = lease_seconds
        self.renewal_timeout = renewal_timeout
        self.stop_event = threading.Event()
        self.last_success = time.monotonic()
        self._failing = False
        #: Called after each beat on this thread's connection (the worker registry's renewal); must not raise.
        self.also: list[Callable[[], None]] = []

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.interval if self._healthy() else min(1.0, self.interval)):
                if self._sqlite_lock_is_ours():
                    continue
                self.beat()
                for chore in self.also:
                    chore()
        finally:
            connection.close()

    def _sqlite_lock_is_ours(self) -> bool:
        """Our own step holds SQLite's write lock: no beat, as nobody can take a lease meanwhile (``write_lock``)."""
        if not write_lock.held_by_us(self.running()):
            return False
        self.last_success, self._failing = time.monotonic(), False
        return True

    def _healthy(self) -> bool:
        return time.monotonic() - self.last_success < self.interval * 1.5

    def beat(self) -> None:
        claims = list(self.running())
        started = time.monotonic()
        try:
            connection.close_if_unusable_or_obsolete()
            held = renew(((r.claim.id, r.claim.lease_token) for r in claims), self.lease_seconds)
        except Exception as error:  # the database may be restarting; keep trying until the timeout
            gone = is_disconnect(error)
            connection.close()
            silent_for = time.monotonic() - self.last_success
            if gone:
                watch.lost(error, "lease renewal")
            elif not self._failing:
                logger.warning("lease renewal failed (%.1fs since the last success): %s", silent_for, error)
            self._failing = True
            if silent_for >= self.renewal_timeout:
                lost = [r for r in claims if r.activity.lost_reason is None]
                if lost:
                    logger.warning("lease renewal timed out (no success for %.1fs): %d running procedures stop at "
                                   "their next ensure_active()", silent_for, len(lost))
                for r in claims:
                    r.activity.lose(f"lease renewal failed for {silent_for:.1f}s (renewal timeout)")
            return
        self.last_success = started
        self._failing = False
        if claims:  # with nothing to renew, no statement ran: it proves nothing about the database
            watch.restored()
        for r in claims:
            if (r.claim.id, r.claim.lease_token) not in held:
                r.activity.lose(f"lease token {r.claim.lease_token} was taken over or cancelled")
            elif r.deadline is not None and time.monotonic() > r.deadline and fail_overdue(r):
                logger.warning("procedure %s: step %s ran past its timeout; attempt failed, result fenced out",
                               r.claim.id, r.current.name if r.current else "?")
        deadlines.enforce(r for r in claims if (r.claim.id, r.claim.lease_token) in held)

    def stop(self) -> None:
        self.stop_event.set()
