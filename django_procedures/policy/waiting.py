"""What a waiting procedure waits for, and a sleep's wake time checked where ``Status.sleep`` is called.

Standard library only. A ``waiting`` procedure waits for one thing at a time
(``ProcedureRun.waiting_for``): its children, a timer, or (later) events.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from enum import StrEnum

from django_procedures.policy.durations import seconds_of
from django_procedures.policy.schedule_args import MAX_DURATION

__all__ = ["WaitingFor", "wake_time"]


class WaitingFor(StrEnum):
    """``ProcedureRun.waiting_for`` of a ``waiting`` procedure ("" when it is not waiting)."""

    CHILDREN = "children"
    TIMER = "timer"
    EVENT = "event"


def wake_time(delay: timedelta | float | None, until: datetime | None, *, now: datetime) -> datetime:
    """When a sleep asked for at ``now`` ends: ``now + delay``, or ``until``; ``ValueError`` saying what to pass.

    A delay is a ``timedelta`` or a number of seconds, zero or more, finite and
    at most 100 years; ``until`` is an aware datetime (a time already past wakes
    at once). Exactly one of the two is given.
    """
    if (delay is None) == (until is None):
        raise ValueError("Status.sleep takes a delay or until=, not both and not neither: "
                         "Status.sleep(timedelta(days=14)), Status.sleep(30) or Status.sleep(until=<aware datetime>)")
    if until is not None:
        if not isinstance(until, datetime):
            raise ValueError(f"Status.sleep(until=...) takes an aware datetime; got {type(until).__name__}")
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"Status.sleep(until=...) takes an aware datetime; got the naive {until.isoformat()} "
                             "(use django.utils.timezone.make_aware(), or datetime(..., tzinfo=UTC))")
        return until
    seconds = seconds_of(delay)
    if seconds is None:
        raise ValueError(f"Status.sleep takes a timedelta or a number of seconds; got {type(delay).__name__}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"Status.sleep needs a delay of zero or more seconds, finite; got {delay!r}")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"Status.sleep's delay is at most {MAX_DURATION.days} days; got {delay!r} "
                         "(for a date further away, sleep again when it wakes)")
    return now + timedelta(seconds=seconds)
