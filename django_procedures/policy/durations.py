"""Parsing durations written by people: ``7d``, ``12h``, ``90m``, ``30s``, ``2w``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def seconds_of(value: Any) -> float | None:
    """The seconds of a ``timedelta`` or a number (not a bool), as a float; None for anything else.

    The one reading of "a ``timedelta`` or seconds" that sleeps, timeouts, rates and debounces share; each
    caller says in its own words what it refuses.
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """``"7d"``, ``"1d12h"``, a number of seconds, or a ``timedelta``; ``ValueError`` otherwise.

    ``ValueError`` too for a duration Python cannot hold (more than 999,999,999 days).
    """
    if isinstance(text, timedelta):
        value = text
    elif isinstance(text, int | float) and not isinstance(text, bool):
        try:
            value = timedelta(seconds=text)
        except (OverflowError, ValueError):  # too large, infinite or NaN
            raise ValueError(f"{text!r} seconds is not a duration; give a finite number of at most "
                             f"{timedelta.max.days} days") from None
    elif isinstance(text, str) and text.strip():
        compact = text.strip().lower().replace(" ", "")
        parts = _PART.findall(compact)
        if not parts or "".join(n + u for n, u in parts) != compact:
            raise ValueError(
                f"cannot read {text!r} as a duration; write a number with a unit, like 7d, 12h, 30m or 1d12h"
            )
        try:
            value = sum((timedelta(**{_UNITS[u]: float(n)}) for n, u in parts), timedelta())
        except OverflowError:
            raise ValueError(f"{text!r} is too long; a duration is at most {timedelta.max.days} days") from None
    else:
        raise ValueError(f"cannot read {text!r} as a duration; write a number with a unit, like 7d or 12h")
    if value <= timedelta(0):
        raise ValueError(f"a duration must be positive; got {text!r}")
    return value
