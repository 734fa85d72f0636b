"""Checking a ``ctx.progress(done, total, note)`` report: documented clamps, or a refusal that says why.

A bad report never fails the step: the caller logs the problems and stores
what :func:`normalise` returns (``None``: nothing to store).
"""

from __future__ import annotations

import math
from decimal import Decimal
from numbers import Real
from typing import Any, NamedTuple

#: Longest note kept, in characters; a longer one is cut and ends with an ellipsis.
MAX_NOTE = 500
#: At most one progress write per procedure per this many seconds; the latest report wins.
MIN_INTERVAL = 1.0


class Report(NamedTuple):
    """A report as stored (a tuple: made once per ``ctx.progress()`` call, so made cheaply)."""

    done: int | float
    total: int | float | None
    note: str

    def as_json(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "note": self.note}


def _number(value: Any) -> int | float | None:
    """``value`` as an int or a finite float; None if it is not a real number (bools are not; Decimals are)."""
    kind = type(value)
    if kind is int:  # the usual cases first, without the ABC check below
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (Real, Decimal)):
        return None
    number = value if isinstance(value, int) else float(value)
    return number if isinstance(number, int) or math.isfinite(number) else None


def normalise(done: Any, total: Any = None, note: Any = "") -> tuple[Report | None, list[str]]:
    """The report to store, and the problems found (each a sentence saying what to change).

    - ``done`` not a finite number (a string, None, NaN, a bool): refused, nothing is stored;
    - ``done`` below 0: stored as 0;
    - ``total`` not a finite number, or below 0: stored as None (no total);
    - ``done`` above ``total``: stored as ``total``;
    - ``note`` not a string: stored as ``str(note)``; NUL characters dropped; longer than
      :data:`MAX_NOTE` characters: cut.
    """
    problems: list[str] = []
    number = _number(done)
    if number is None:
        return None, [f"ctx.progress(done=...) takes a finite number of units done (int or float); got "
                      f"{type(done).__name__} {_short(done)}: the report was ignored"]
    if number < 0:
        problems.append(f"ctx.progress: done must be 0 or more; got {number}, stored as 0")
        number = 0
    limit = None
    if total is not None:
        limit = _number(total)
        if limit is None or limit < 0:
            problems.append(f"ctx.progress: total must be a finite number, 0 or more, or None; got "
                            f"{type(total).__name__} {_short(total)}, stored as no total")
            limit = None
    if limit is not None and number > limit:
        problems.append(f"ctx.progress: done ({number}) is more than total ({limit}); stored as {limit}")
        number = limit
    text = note if isinstance(note, str) else ("" if note is None else str(note))
    if "\x00" in text:
        text = text.replace("\x00", "")
    if len(text) > MAX_NOTE:
        problems.append(f"ctx.progress: a note is kept to {MAX_NOTE} characters; got {len(text)}, cut")
        text = text[:MAX_NOTE - 1] + "…"
    return Report(number, limit, text), problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def fraction(progress: dict[str, Any] | None) -> float | None:
    """How far, 0.0 to 1.0, of a stored report with a positive total; None without one."""
    if not progress:
        return None
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, (int, float)) or not isinstance(total, (int, float)) or total <= 0:
        return None
    return max(0.0, min(1.0, done / total))
