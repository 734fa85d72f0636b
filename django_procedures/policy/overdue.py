"""Whether a schedule's ticks have stopped coming: its next tick is more than two ticks behind.

One late tick is a busy ticker or a slow pass; two whole ticks missed mean nothing
is ticking the schedule (no ``procedures_worker --with-scheduler``, no Celery beat).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

#: How many ticks past its next tick a schedule may fall before it shows as overdue.
TICKS_BEHIND = 2


def overdue_lag(next_tick_at: datetime | None, now: datetime,
                cadence: Callable[[datetime], datetime]) -> timedelta | None:
    """``now - next_tick_at`` once the ``TICKS_BEHIND``-th tick after ``next_tick_at`` is also past; else None.

    For a period that is ``next_tick_at < now - 2 * period``; for a cron expression, its
    next two fire times after ``next_tick_at`` are both before ``now``. ``cadence`` gives the
    tick strictly after a time (``Schedule.cadence()``). No next tick (paused, or a
    ``fixed_delay`` run still going) is never overdue.
    """
    if next_tick_at is None or next_tick_at >= now:
        return None
    later = next_tick_at
    for _ in range(TICKS_BEHIND):
        later = cadence(later)
        if later >= now:
            return None
    return now - next_tick_at
