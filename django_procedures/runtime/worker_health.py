"""The health checks of one worker process (``/healthz``): which there are, and what each reads."""

from __future__ import annotations

from collections.abc import Callable

from django_procedures.policy.health import check_limit
from django_procedures.runtime.health import Health
from django_procedures.runtime.loop_watch import STALL_SECONDS, LoopStall


def worker_health(lease_seconds: float, *, heartbeat_alive: Callable[[], bool],
                  loop_stall: Callable[[], LoopStall | None] | None = None) -> Health:
    """The main loop turns, the database answers, the heartbeat beats (and is alive), and, with async steps,
    the event loop answers: an async step blocking it holds up every other one."""
    health = Health()
    limit = check_limit(lease_seconds)
    health.add_check("loop", limit=limit)
    health.add_check("database", limit=limit)
    health.add_check("heartbeat", limit=limit, alive=heartbeat_alive)
    if loop_stall is not None:
        health.add_check("event_loop", limit=STALL_SECONDS, probe=lambda: stall_reading(loop_stall()))
    return health


def stall_reading(stall: LoopStall | None) -> tuple[float, str]:
    """The ``event_loop`` check: how long the loop has been blocked (0 while it answers), and by what."""
    if stall is None:
        return 0.0, ""
    return stall.seconds, f"blocked by {stall.culprit or 'code outside any step'}"
