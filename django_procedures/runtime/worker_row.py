"""A worker's own row in the registry: registered at start, renewed with the heartbeat, closed at exit.

Registry writes never stop a worker: a failure is logged (once until one
succeeds) and the worker carries on; the next renewal tries again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from importlib import metadata

from django.db import connection

from django_procedures.policy.workers import StopReason
from django_procedures.runtime.outage import watch
from django_procedures.store import workers as store
from django_procedures.store.db import is_disconnect

logger = logging.getLogger("django_procedures.worker")


def package_version() -> str:
    try:
        return metadata.version("django-procedures")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return ""


class WorkerRow:
    """This process's ``Worker`` row: ``register()``, then ``renew()`` from the heartbeat thread, ``stop()``."""

    def __init__(self, *, worker_id: str, queues: Sequence[str] | None, concurrency: int,
                 lease_seconds: float, with_scheduler: bool = False) -> None:
        self.worker_id, self.queues, self.concurrency = worker_id, queues, concurrency
        self.lease_seconds, self.with_scheduler = lease_seconds, with_scheduler
        self.interval = lease_seconds / 3
        self.row_id: int | None = None
        self._renewed_at = 0.0
        self._failing = False

    @property
    def renewed_at(self) -> float:
        """``time.monotonic()`` of the last successful registration or renewal (0.0: none yet)."""
        return self._renewed_at

    def register(self) -> None:
        try:
            self.row_id = store.register(
                worker_id=self.worker_id, hostname=socket.gethostname(), pid=os.getpid(),
                version=package_version(), queues=self.queues, concurrency=self.concurrency,
                lease_seconds=self.lease_seconds, with_scheduler=self.with_scheduler)
            self._renewed_at = time.monotonic()
            self._failing = False
        except Exception as error:  # the database may be down at start-up: renew() registers later
            self._failed("register", error)

    def renew(self) -> None:
        """At most once per ``lease_seconds / 3``; called by the heartbeat thread on its connection."""
        if time.monotonic() - self._renewed_at < self.interval * 0.9:
            return
        try:
            if self.row_id is None:
                self.register()
                return
            if not store.renew(self.row_id, self.lease_seconds):  # pruned while we slept: start a new row
                self.row_id = None
                self.register()
                return
            self._renewed_at = time.monotonic()
            self._failing = False
        except Exception as error:
            self._failed("renew", error)

    def stop(self, reason: StopReason, detail: str = "") -> None:
        if self.row_id is None:
            return
        try:
            store.stop(self.row_id, reason, detail)
        except Exception as error:  # it will show as gone once its renewal window passes
            self._failed("close", error)

    def _failed(self, what: str, error: Exception) -> None:
        connection.close()
        if is_disconnect(error):  # the outage watch says it once for the whole worker (guarantees, promise 8)
            watch.lost(error, "worker registry")
            return
        if not self._failing:
            logger.warning("worker %s: could not %s its row in the worker registry: %s", self.worker_id, what,
                           error)
        self._failing = True
