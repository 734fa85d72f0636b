"""Saying once that the database connection was lost, however many of a worker's threads notice it."""

from __future__ import annotations

import logging
import threading
import time

from django_procedures.store.db import is_conflict, is_disconnect

logger = logging.getLogger("django_procedures.worker")


class ConnectionWatch:
    """One WARNING when the database connection is lost and one INFO when it is back, per outage.

    The main loop, the heartbeat and every executor thread report here. Each
    has its own connection and notices an outage when it next uses it, so a
    loss reported within ``quiet_seconds`` of the last warning belongs to the
    same outage and is logged at DEBUG only.
    """

    def __init__(self, quiet_seconds: float = 60.0) -> None:
        self.quiet_seconds = quiet_seconds
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._warned_at: float | None = None
        self._announce_restore = False

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def lost(self, error: BaseException, where: str) -> None:
        """``where`` (main loop, heartbeat, an executor thread) found its connection gone with ``error``."""
        with self._lock:
            now = time.monotonic()
            if self._down_since is None:
                self._down_since = now
            if self._warned_at is None or now - self._warned_at >= self.quiet_seconds:
                self._warned_at = now
                self._announce_restore = True
                logger.warning("database connection lost (%s: %s); reconnecting with backoff, work in flight "
                               "resumes under its leases", where, _first_line(error))
            else:
                logger.debug("database connection lost (%s: %s)", where, _first_line(error))

    def restored(self) -> None:
        """A thread used the database successfully: the outage, if any, is over."""
        if self._down_since is None:  # the common case, without taking the lock
            return
        with self._lock:
            if self._down_since is None:
                return
            if self._announce_restore:
                logger.info("database connection restored after %.1fs", time.monotonic() - self._down_since)
                self._announce_restore = False
            self._down_since = None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


#: The worker process's one watch (a process runs one worker).
watch = ConnectionWatch()


def report_loop_error(worker_id: str, error: Exception, *, first: bool) -> None:
    """Log a database error of a worker's main loop once: an outage through :data:`watch` (once per outage), a
    deadlock victim as news (nothing is wrong with the database), anything else on the ``first`` try only."""
    if is_disconnect(error):
        watch.lost(error, "worker loop")
    elif is_conflict(error):
        logger.info("worker %s: %s; trying again", worker_id, error)
    elif first:
        logger.warning("worker %s: database error, retrying with backoff: %s", worker_id, error)
