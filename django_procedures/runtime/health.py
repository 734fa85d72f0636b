"""What a worker's parts report, for ``/healthz`` and ``/readyz`` (the decision is ``policy.health``'s).

Each part that must keep moving reports to a named check (:meth:`Health.report`);
a check whose last report is older than its limit, or whose thread died, makes
the worker unhealthy. The worker adds ``loop`` (its main loop turned),
``database`` (a database round trip succeeded) and ``heartbeat`` (the
heartbeat thread turned, and is alive). Other parts add their own the same
way, e.g. an event loop running async steps::

    worker.health.add_check("event_loop", limit=10.0)
    worker.health.report("event_loop")   # from a callback the event loop runs every second

Reports are a dictionary write (the GIL makes it atomic): cheap enough for every turn of a loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django_procedures.policy.health import Phase, Reading, Verdict, liveness, readiness


@dataclass
class _Check:
    limit: float
    alive: Callable[[], bool] | None
    #: Measures the check when read, instead of reports: ``(age in seconds, detail)``.
    probe: Callable[[], tuple[float, str]] | None = None


class Health:
    """The named checks of one worker and its phase (starting, running, stopping)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._created = clock()
        self._checks: dict[str, _Check] = {}
        self._last: dict[str, float] = {}
        self.phase = Phase.STARTING

    def add_check(self, name: str, *, limit: float, alive: Callable[[], bool] | None = None,
                  probe: Callable[[], tuple[float, str]] | None = None) -> None:
        """Watch ``name``: healthy while it reported within ``limit`` seconds (and ``alive()``, if given).

        Until its first report its age counts from when the check was added, so start-up gets the same grace.
        With ``probe``, the check is measured when read instead: ``probe()`` gives its age and a detail.
        """
        if not limit > 0:
            raise ValueError(f"a health check's limit must be positive; got {limit!r} for {name!r}")
        self._checks[name] = _Check(float(limit), alive, probe)
        self._last.setdefault(name, self._clock())

    def remove_check(self, name: str) -> None:
        self._checks.pop(name, None)
        self._last.pop(name, None)

    def report(self, name: str, at: float | None = None) -> None:
        """``name`` is current now (or at ``at``, a ``time.monotonic()`` value, if later than its last report)."""
        now = self._clock() if at is None else at
        if now >= self._last.get(name, 0.0):
            self._last[name] = now

    def running(self) -> None:
        """The worker started work: ready, unless it is already stopping."""
        if self.phase is Phase.STARTING:
            self.phase = Phase.RUNNING

    def stopping(self) -> None:
        self.phase = Phase.STOPPING

    def readings(self) -> list[Reading]:
        now = self._clock()
        found = []
        for name, check in list(self._checks.items()):
            alive = True if check.alive is None else bool(check.alive())
            if check.probe is not None:
                age, detail = check.probe()
                found.append(Reading(name, age, check.limit, alive, detail))
                continue
            last = self._last.get(name, self._created)
            found.append(Reading(name, max(0.0, now - last), check.limit, alive))
        return found

    def liveness(self) -> Verdict:
        return liveness(self.readings(), self.phase)

    def readiness(self) -> Verdict:
        return readiness(self.phase)
