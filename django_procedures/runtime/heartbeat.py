"""The heartbeat thread: renews every held lease in one statement, on its own connection."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.db import connection

from django_procedures.runtime import deadlines, write_lock
from django_procedures.runtime.executor import RunningClaim, fail_overdue
from django_procedures.runtime.outage import watch
from django_procedures.store.db import is_disconnect
from django_procedures.store.leases import renew

logger = logging.getLogger("django_procedures.worker")


@dataclass(frozen=True)
class Duty:
    """Work the heartbeat does after each beat, on its own connection (the worker's row, held-back progress)."""

    name: str
    run: Callable[[], None]


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
                 renewal_timeout: float, duties: Sequence[Duty] = (),
                 report: Callable[[str], None] | None = None) -> None:
        super().__init__(name="procedures-heartbeat", daemon=True)
        self.running = running
        self.interval = lease_seconds / 3
        self.lease_seconds = lease_seconds
        self.renewal_timeout = renewal_timeout
        self.stop_event = threading.Event()
        self.last_success = time.monotonic()
        self._failing = False
        self.duties = tuple(duties)
        self._failing_duties: set[str] = set()
        # Health checks (runtime.health): "heartbeat" at every turn, "database" after a round trip that succeeded.
        self.report = report or (lambda check: None)

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.interval if self._healthy() else min(1.0, self.interval)):
                self.report("heartbeat")
                if self._sqlite_lock_is_ours():
                    continue
                self.beat()
                for duty in self.duties:
                    self._do(duty)
        finally:
            connection.close()

    def _do(self, duty: Duty) -> None:
        """Run one duty; its failure is logged once per streak and never stops the leases being renewed."""
        try:
            duty.run()
        except Exception as error:
            if is_disconnect(error):
                connection.close()
            elif duty.name not in self._failing_duties:
                logger.warning("heartbeat: could not %s (tried again at the next beat): %s", duty.name, error)
            self._failing_duties.add(duty.name)
        else:
            self._failing_duties.discard(duty.name)

    def _sqlite_lock_is_ours(self) -> bool:
        """Our own step holds SQLite's write lock: no beat, as nobody can take a lease meanwhile (``write_lock``)."""
        if not write_lock.held_by_us(self.running()):
            return False
        self.last_success, self._failing = time.monotonic(), False
        self.report("database")  # our own step writes: the database answers
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
            self.report("database")
        for r in claims:
            if (r.claim.id, r.claim.lease_token) not in held:
                r.activity.lose(f"lease token {r.claim.lease_token} was taken over or cancelled")
            elif r.deadline is not None and time.monotonic() > r.deadline:
                fail_overdue(r)  # the settle point logs the failed attempt
        deadlines.enforce(r for r in claims if (r.claim.id, r.claim.lease_token) in held)

    def stop(self) -> None:
        self.stop_event.set()
