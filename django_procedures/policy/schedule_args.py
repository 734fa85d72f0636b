"""A schedule's definition checked at the door: argument types, and durations bounded to what can be stored.

Standard library only. ``register_schedule`` passes its keyword arguments
through :func:`normalise`, which raises ``TypeError`` (saying what to pass)
for a value of the wrong type and returns the values as the model stores them.
:func:`duration_problem` is the range check shared with ``Schedule.clean()``
and the admin form.

Durations (``period``, ``initial_delay``, ``max_run_time``) are a
``timedelta`` or a number of seconds (``int`` or ``float``, never ``bool``).
Each is at most :data:`MAX_DURATION`, 100 years: every time computed from
them (a first tick ``now + initial_delay``, a next tick ``tick + period``, a
run's deadline ``started_at + max_run_time``) then stays far inside what
Python's ``datetime`` holds (year 9999) and PostgreSQL's ``interval`` and
``timestamptz`` hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django_procedures.policy.schedule import MAX_TICKS_PER_PASS, Missed, Mode

__all__ = ["MAX_CONCURRENCY", "MAX_DURATION", "OutOfRange", "duration_problem", "normalise"]

MAX_DURATION = timedelta(days=36_525)
"""The longest ``period``, ``initial_delay`` or ``max_run_time``: 100 years."""

MAX_CONCURRENCY = MAX_TICKS_PER_PASS
"""The most runs of one schedule at once (``fixed_rate_overlap``); a pass may start that many."""



class OutOfRange(ValueError):
    """A number of seconds too large (or not finite) for a duration; ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


_LIMIT = f"at most 100 years ({MAX_DURATION.days} days), so the times computed from it can be stored"


def duration_problem(name: str, value: object, *, positive: bool) -> str | None:
    """A sentence saying what is wrong with the stored duration ``value``, or None.

    ``positive``: zero is refused too (``period``, ``max_run_time``); otherwise
    only a negative value is (``initial_delay``).
    """
    if not isinstance(value, timedelta):
        return f"{name} must be a duration (a timedelta); got {type(value).__name__} {value!r}"
    if positive and value <= timedelta(0):
        return f"{name} must be positive; got {value.total_seconds():g} seconds"
    if value < timedelta(0):
        return f"{name} must not be negative; got {value.total_seconds():g} seconds"
    if value > MAX_DURATION:
        return f"{name} must be {_LIMIT}; got {value.days} days"
    return None


def _duration(name: str, value: object, *, optional: bool) -> timedelta | None:
    if value is None and optional:
        return None
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > MAX_DURATION.total_seconds():
            raise OutOfRange(name, f"{name} must be {_LIMIT}; got {value!r} seconds")
        return timedelta(seconds=value)
    none = ", or None for none" if optional else ""
    raise TypeError(f"{name} must be a timedelta (for example timedelta(minutes=5)) or a number of seconds"
                    f"{none}; got {type(value).__name__} {value!r}")


def _choice(name: str, kind: type[Mode] | type[Missed], value: object) -> str:
    if not isinstance(value, str):
        choices = ", ".join(repr(m.value) for m in kind)
        raise TypeError(f"{name} must be one of {choices} (a string); got {type(value).__name__} {value!r}")
    return str(value)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number (an int); got {type(value).__name__} {value!r}")
    return value


def _text(name: str, value: object, example: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string such as {example!r}, or None; got {type(value).__name__} "
                        f"{value!r}")
    return value


def _timezone(value: object) -> str:
    key = getattr(value, "key", None)  # a ZoneInfo: its IANA name
    if key is not None and not isinstance(value, str):
        return str(key)
    return _text("timezone", value, "Europe/Berlin")


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} {value!r}")
    return value


def normalise(*, name: object, mode: object, period: object, cron: object, max_concurrency: object,
              missed: object, max_pending: object, initial_delay: object, max_run_time: object, state: object,
              enabled: object, timezone: object, queue: object, update: object) -> dict[str, Any]:
    """``register_schedule``'s arguments as the model stores them; ``TypeError`` for a wrong type.

    A number of seconds too large for a duration is :class:`OutOfRange`; value
    ranges and combinations are ``Schedule.clean()``'s (``validation_errors``).
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty string; got {type(name).__name__} {name!r}")
    if state is not None and not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict (a JSON object), or None for {{}}; got {type(state).__name__}")
    return {
        "name": name,
        "mode": _choice("mode", Mode, mode),
        "period": _duration("period", period, optional=True),
        "cron": _text("cron", cron, "0 3 * * *"),
        "timezone": _timezone(timezone),
        "initial_delay": _duration("initial_delay", initial_delay, optional=True) or timedelta(0),
        "max_concurrency": _count("max_concurrency", max_concurrency),
        "missed": _choice("missed", Missed, missed),
        "max_pending": _count("max_pending", max_pending),
        "max_run_time": _duration("max_run_time", max_run_time, optional=True),
        "state": dict(state or {}),
        "queue": _text("queue", queue, "default"),
        "enabled": _flag("enabled", enabled),
        "update": _flag("update", update),
    }
