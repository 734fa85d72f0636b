"""Whether a worker is healthy and ready: pure decisions over the ages of its named checks.

The runtime (``runtime.health``) measures; this module decides. A check is
healthy while the thing it watches reported within its limit (and, for a
thread, while that thread is alive); the worker is healthy when every check is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

#: A check's limit, in leases: a worker loop that has not turned for two leases has let every lease it holds
#: lapse once over (3 x LEASE_SECONDS is the promise: the limit plus one turn of the probe).
LIMIT_LEASES = 2.0
#: The longest the worker's main loop sleeps between turns, in leases, so that an idle loop still reports.
TURN_LEASES = 0.5


def check_limit(lease_seconds: float) -> float:
    """Seconds a worker's ``loop``, ``database`` and ``heartbeat`` checks may go without a report."""
    return LIMIT_LEASES * lease_seconds


def longest_sleep(lease_seconds: float) -> float:
    """Seconds the main loop may sleep when idle, so that its ``loop`` check stays current."""
    return TURN_LEASES * lease_seconds


class Phase(StrEnum):
    """Where a worker is in its life, for readiness."""

    STARTING = "starting"  # the command runs, the main loop has not turned yet
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was asked (SIGTERM): draining, claiming nothing new


@dataclass(frozen=True)
class Reading:
    """One check as measured now: seconds since it last reported (None: never), its limit, thread alive."""

    name: str
    age: float | None
    limit: float
    alive: bool = True
    #: What the watched thing says of itself (the step blocking the event loop), added to a failing reason.
    detail: str = ""


@dataclass(frozen=True)
class CheckVerdict:
    name: str
    ok: bool
    age: float | None
    limit: float
    reason: str

    def as_dict(self) -> dict[str, object]:
        age = None if self.age is None else round(self.age, 3)
        return {"ok": self.ok, "age_seconds": age, "limit_seconds": self.limit, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    """Healthy (or ready) or not, with one verdict per check; ``status`` is the HTTP status to answer."""

    ok: bool
    phase: Phase
    checks: tuple[CheckVerdict, ...] = ()

    @property
    def status(self) -> int:
        return 200 if self.ok else 503

    def as_dict(self) -> dict[str, object]:
        return {"status": "ok" if self.ok else "unavailable", "phase": self.phase.value,
                "checks": {c.name: c.as_dict() for c in self.checks}}


def judge_check(reading: Reading) -> CheckVerdict:
    """One check: alive, reported at least once, and not longer ago than its limit."""
    age, limit = reading.age, reading.limit
    if not reading.alive:
        return CheckVerdict(reading.name, False, age, limit, "the thread is not alive")
    if age is None:
        return CheckVerdict(reading.name, False, None, limit, "never reported")
    if math.isnan(age) or age > limit:
        detail = f" ({reading.detail})" if reading.detail else ""
        return CheckVerdict(reading.name, False, age, limit, f"last reported {age:.1f}s ago, over the limit of "
                                                              f"{limit:g}s{detail}")
    return CheckVerdict(reading.name, True, age, limit, "current")


def liveness(readings: list[Reading] | tuple[Reading, ...], phase: Phase) -> Verdict:
    """``/healthz``: every check current. Starting and stopping do not make a worker unhealthy by themselves."""
    checks = tuple(judge_check(r) for r in readings)
    return Verdict(all(c.ok for c in checks), phase, checks)


def readiness(phase: Phase) -> Verdict:
    """``/readyz``: ready only while running (not starting, not draining after SIGTERM)."""
    return Verdict(phase is Phase.RUNNING, phase)
