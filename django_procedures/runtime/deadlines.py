"""A worker cancels the scheduled runs it holds once they pass their ``max_run_time`` (checked each heartbeat)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import connection

from django_procedures import clock
from django_procedures.runtime.running import RunningClaim
from django_procedures.store.db import is_disconnect
from django_procedures.store.overdue import cancel_overdue

logger = logging.getLogger("django_procedures.worker")


def enforce(held: Iterable[RunningClaim]) -> None:
    """Cancel the held runs past the deadline their claim carries; their steps' ``ensure_active()`` then raises.

    The cancellation is the store's (subtree cancelled, lease token bumped, a
    failure of the schedule), so whatever the run's thread commits afterwards is
    fenced out. Never raises: a failure is logged and the next heartbeat, or any
    worker's maintenance pass, tries again.
    """
    now = clock.now()
    past = [r for r in held if r.claim.deadline is not None and r.claim.deadline <= now]
    if not past:
        return
    try:
        cancelled = set(cancel_overdue(now, ids=[r.claim.id for r in past]))
    except Exception as error:
        if is_disconnect(error):
            connection.close()
        logger.warning("could not cancel %d runs past their max_run_time (tried again): %s", len(past), error)
        return
    for r in past:
        if r.claim.id in cancelled:
            r.activity.lose("cancelled: the run passed its schedule's max_run_time")
