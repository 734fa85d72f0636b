"""A watchdog for the worker's event loop: an ``async def`` step that blocks it (``time.sleep``, a sync query)
stalls every other awaiting step, so a stall past :data:`STALL_SECONDS` is logged with the step that runs."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("django_procedures.worker")

#: A loop that has not run a callback for this long is stalled.
STALL_SECONDS = 1.0
#: How often the watchdog asks the loop to answer.
PROBE_SECONDS = 0.1


@dataclass(frozen=True)
class LoopStall:
    """The event loop has run nothing for ``seconds`` (so far); ``culprit`` says what ran when it was seen."""

    seconds: float
    culprit: str | None


class LoopWatch(threading.Thread):
    """Measures the loop's lag with a callback it schedules every :data:`PROBE_SECONDS`; :meth:`stall` reads it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, culprit: Callable[[], str | None]) -> None:
        super().__init__(name="procedures-async-watch", daemon=True)
        self._loop = loop
        self._culprit = culprit
        self._stop = threading.Event()
        self._answered = time.monotonic()
        self._asked: float | None = None
        self._stall: LoopStall | None = None
        #: The longest stall seen, for the worker's stats (seconds).
        self.longest = 0.0

    def stall(self) -> LoopStall | None:
        """The stall going on now (the loop has not answered for over :data:`STALL_SECONDS`), or None."""
        stall, asked = self._stall, self._asked  # a stall is set once the watchdog has logged it
        if stall is None or asked is None or self._answered >= asked:
            return None
        return LoopStall(time.monotonic() - asked, stall.culprit)

    def _answer(self) -> None:
        self._answered = time.monotonic()

    def run(self) -> None:
        while not self._stop.wait(PROBE_SECONDS):
            self._asked = asked = time.monotonic()
            try:
                self._loop.call_soon_threadsafe(self._answer)
            except RuntimeError:  # the loop closed
                return
            reported = False
            while self._answered < asked and not self._stop.wait(PROBE_SECONDS / 2):
                lag = time.monotonic() - asked
                if lag > STALL_SECONDS and not reported:
                    reported = True
                    culprit = self._culprit()
                    self._stall = LoopStall(lag, culprit)
                    logger.warning("the event loop is blocked (%.1fs so far) by %s: an async def step must not "
                                   "block (time.sleep, a sync query, CPU work); every other async step waits "
                                   "meanwhile. Await instead, or make it a plain def step", lag,
                                   culprit or "code outside any step")
            if reported:
                lag = self._answered - asked
                self.longest = max(self.longest, lag)
                logger.warning("the event loop ran again after a stall of %.1fs (%s)", lag,
                               self._stall.culprit if self._stall else "unknown")
                self._stall = None

    def stop(self) -> None:
        self._stop.set()
