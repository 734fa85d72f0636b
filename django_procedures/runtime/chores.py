"""Periodic work of a worker's main thread (maintenance, stats, scheduling), each failing on its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from django_procedures.runtime.outage import watch
from django_procedures.store.db import is_conflict, is_disconnect

logger = logging.getLogger("django_procedures.worker")


@dataclass
class Chore:
    """Periodic work of the main thread (maintenance, stats, scheduling), run when due."""

    name: str
    interval: float
    run: Callable[[], object]
    first_run: bool = True
    next_at: float = 0.0
    #: The last run raised (its error was logged; the next ones of the streak are not).
    failing: bool = False

    def __post_init__(self) -> None:
        self.next_at = time.monotonic() if self.first_run else time.monotonic() + self.interval

    def run_if_due(self) -> None:
        if time.monotonic() < self.next_at:
            return
        interval = self.interval
        try:
            again = self.run()
            # A run may say when it wants to run again (a number of seconds), e.g. sooner while it has more to do.
            if isinstance(again, int | float) and not isinstance(again, bool):
                interval = float(again)
        except Exception as error:  # the chore's own failure: claiming goes on, the chore runs again when due
            self._failed(error)
        else:
            self.failing = False
        finally:
            # From the chore's end: a slow maintenance pass must not starve the claims.
            self.next_at = time.monotonic() + interval

    def _failed(self, error: Exception) -> None:
        if is_disconnect(error):
            watch.lost(error, f"{self.name} chore")
            connection.close()
        elif is_conflict(error):  # a deadlock victim: the next run of the chore simply tries again
            logger.info("%s chore: %s; trying again in %gs", self.name, error, self.interval)
        elif not self.failing:  # once per streak, with the traceback; the streak's end is not logged
            logger.error("%s chore failed (claiming goes on; tried again every %gs): %s", self.name, self.interval,
                         error, exc_info=error)
        self.failing = True
