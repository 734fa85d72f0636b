"""A schedule this process cannot tick: its error is recorded on its row, and it is tried again later.

A definition stored past validation (a fixture, a data migration, an older
version of the app), or a process whose time zone data lacks the schedule's
zone, makes computing that schedule's ticks raise. The error is written on the
schedule (``last_error``, ``last_error_at``) and logged when it first appears
or changes; the schedule is passed over by scheduling passes for
:data:`RETRY_BROKEN` and then tried again. Every other schedule ticks as usual,
and a pass that ticks it cleanly clears the error, as does a change of its
definition.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from zoneinfo import ZoneInfoNotFoundError

from django.conf import settings
from django.db.models import F, Min, Q
from django.db.models.functions import Greatest

from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import Schedule

logger = logging.getLogger("django_procedures.schedules")

#: How long a schedule whose pass failed is passed over before the next try.
RETRY_BROKEN = timedelta(seconds=10)
#: The longest error text kept on the row.
_LIMIT = 2000


def describe(schedule: Schedule, error: BaseException) -> str:
    """What went wrong, and what to change, as the admin and ``procedures_schedules`` show it."""
    if isinstance(error, ZoneInfoNotFoundError):
        zone = schedule.timezone or settings.TIME_ZONE
        text = (f"time zone {zone!r} is not in this process's time zone data: install the tzdata package "
                "(pip install tzdata) where the workers run, or change the schedule's timezone")
    elif isinstance(error, OverflowError):
        text = (f"a tick time is past what can be stored ({error}): shorten the schedule's period or initial "
                "delay (at most 100 years each)")
    elif isinstance(error, UnknownProcedureType):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    text = text.replace("\x00", "")
    return text if len(text) <= _LIMIT else text[:_LIMIT - 1] + "…"


def record(schedule: Schedule, error: BaseException, now: datetime) -> str:
    """Write ``error`` on ``schedule`` (locked by the caller); log it when it is new. Returns its text."""
    text = describe(schedule, error)
    Schedule._writer.filter(id=schedule.id).update(last_error=text, last_error_at=now)
    if text != schedule.last_error:
        logger.error("schedule %r cannot tick: %s (the other schedules are not affected; this one is tried again "
                     "every %ds)", schedule.name, text, RETRY_BROKEN.total_seconds(),
                     exc_info=not isinstance(error, UnknownProcedureType | ZoneInfoNotFoundError | OverflowError))
    schedule.last_error, schedule.last_error_at = text, now
    return text


def healthy_or_retry_due(now: datetime) -> Q:
    """Schedules a pass at ``now`` may tick: no recorded error, or one older than :data:`RETRY_BROKEN`."""
    return Q(last_error_at__isnull=True) | Q(last_error_at__lte=now - RETRY_BROKEN)


def next_due() -> datetime | None:
    """The earliest time an enabled schedule is due, a broken one counting from its next retry."""
    found = Schedule._writer.filter(enabled=True).aggregate(
        healthy=Min("next_tick_at", filter=Q(last_error_at__isnull=True)),
        broken=Min(Greatest("next_tick_at", F("last_error_at") + RETRY_BROKEN),
                   filter=Q(last_error_at__isnull=False, next_tick_at__isnull=False)))
    return min((at for at in found.values() if at is not None), default=None)
