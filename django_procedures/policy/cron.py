"""Cron expressions: parsing and next fire times in a time zone, with DST rules.

Standard library only. Five fields, ``minute hour day-of-month month day-of-week``, each
``*``, a value, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n`` (``a`` to the field's
end), or a comma list of those. Months accept ``JAN``-``DEC`` and weekdays ``SUN``-``SAT``
(any case); weekday 0 and 7 are both Sunday. Aliases: ``@hourly``, ``@daily``,
``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``, ``@annually``.

Classic cron day rule: when day-of-month and day-of-week are both restricted, a day matches
if *either* matches; otherwise both must match. A field that covers its whole range
(``*``, ``*/1``, ``1-31``, ``0-7``) counts as unrestricted; any other field, ``*/2``
included, is restricted.

Fire times are wall-clock times in the schedule's zone, turned into instants like this:

- A wall time that does not exist (the spring-forward gap, e.g. 02:30 in Europe/Berlin on
  the last Sunday of March) fires once, at the first instant after the gap (03:00 local).
  Several matching times in one gap (``*/15 * * * *``) fire together, once.
- A wall time that happens twice (fall-back) fires once, at its first occurrence (fold=0).
  So every wall time fires at most once: ``*/15 * * * *`` fires through the first pass of a
  repeated hour and not during the second pass (an hour of real time with no ticks).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

__all__ = ["CronError", "CronExpression"]

SEARCH_YEARS = 10  # more than the 8-year longest wait for Feb 29 (e.g. 2096 -> 2104)

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July",
                "August", "September", "October", "November", "December")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # most a month can have

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class _Field:
    name: str
    lo: int
    hi: int  # highest value accepted in the text
    last: int  # highest value stored (day of week: 7 is stored as 0)
    names: tuple[str, ...] = ()
    name_base: int = 0


_FIELDS = (
    _Field("minute", 0, 59, 59),
    _Field("hour", 0, 23, 23),
    _Field("day of month", 1, 31, 31),
    _Field("month", 1, 12, 12, MONTHS, 1),
    _Field("day of week", 0, 7, 6, DAYS, 0),
)
_ITEM = re.compile(r"(\*|[0-9A-Za-z]+)(?:-([0-9A-Za-z]+))?(?:/([0-9]+))?")


class CronError(ValueError):
    """A cron expression that cannot be parsed, never fires, or has no fire time in range."""


def _join(items: list[str], word: str) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _value(f: _Field, token: str) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
    elif token.upper() in f.names:
        value = f.names.index(token.upper()) + f.name_base
    else:
        value = -1
    if not f.lo <= value <= f.hi:
        got = token if token.isdigit() else repr(token)
        names = f" (or {f.names[0]}-{f.names[-1]})" if f.names else ""
        raise CronError(f"{f.name} must be between {f.lo} and {f.hi}{names}; got {got}")
    return value


def _parse_field(f: _Field, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        m = _ITEM.fullmatch(item)
        if not m or (m[1] == "*" and m[2]):
            raise CronError(
                f"{f.name} has an invalid item {item!r}; use *, a number, a range a-b, "
                "a step */n, a-b/n or a/n, or a comma-separated list of these"
            )
        start, end, step = m[1], m[2], m[3]
        if start == "*":
            lo, hi = f.lo, f.last
        else:
            lo = _value(f, start)
            hi = _value(f, end) if end else (f.last if step else lo)
        if lo > hi:
            hint = " (Sunday can also be written 7, as in 5-7)" if f.names == DAYS else ""
            raise CronError(
                f"{f.name} range {item!r} runs backwards; write the smaller value first{hint}"
            )
        n = int(step) if step else 1
        if not 1 <= n <= f.hi:
            raise CronError(f"{f.name} step must be between 1 and {f.hi}; got {n}")
        values.update(v % 7 if f.names == DAYS else v for v in range(lo, hi + 1, n))
    return tuple(sorted(values))


def _format_field(values: tuple[int, ...], lo: int, last: int) -> str:
    if values == tuple(range(lo, last + 1)):
        return "*"
    if len(values) > 2 and values[0] == lo:
        step = values[1] - values[0]
        if values == tuple(range(lo, last + 1, step)):
            return f"*/{step}"
    parts: list[str] = []
    start = prev = values[0]
    for v in (*values[1:], None):
        if v is not None and v == prev + 1:
            prev = v
            continue
        if prev - start >= 2:
            parts.append(f"{start}-{prev}")
        else:
            parts.extend(str(x) for x in range(start, prev + 1))
        if v is not None:
            start = prev = v
    return ",".join(parts)


def _after(values: tuple[int, ...], current: int) -> int | None:
    """The smallest of the sorted ``values`` that is >= ``current``, or None."""
    i = bisect_left(values, current)
    return values[i] if i < len(values) else None


def _wall(instant: datetime, tz: tzinfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def _to_utc(wall: datetime, tz: tzinfo) -> datetime:
    """The instant a naive wall time fires: fold=0 if it is ambiguous, gap end if it is skipped."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if _wall(first, tz) == wall:
        return first
    # In a gap fold=1 reads the wall time with the later offset, giving an instant before the
    # transition, and fold=0 one after it. Bisect to the first instant with a later wall time.
    lo, hi = wall.replace(tzinfo=tz, fold=1).astimezone(UTC), first
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=2))
        if _wall(mid, tz) > wall:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class CronExpression:
    """A parsed cron expression; build it with :meth:`parse`. Equal when its fields are equal.

    Each field is the sorted tuple of the values it allows (weekdays 0-6, 0 = Sunday).
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse ``text``; raise :class:`CronError` saying what to change if it is invalid."""
        if not isinstance(text, str):
            raise TypeError(f"cron expression must be a string; got {type(text).__name__}")
        source = text.strip()
        try:
            if source.startswith("@"):
                if source.lower() not in ALIASES:
                    raise CronError(f"unknown alias {source!r}; use one of {', '.join(ALIASES)}")
                source = ALIASES[source.lower()]
            parts = source.split()
            if len(parts) != 5:
                raise CronError(
                    "expected 5 fields (minute hour day month weekday) or an alias like @daily;"
                    f" got {len(parts)}"
                )
            expr = cls(*(_parse_field(f, p) for f, p in zip(_FIELDS, parts, strict=True)))
            expr._check_fires()
        except CronError as exc:
            raise CronError(f"cron expression {text!r}: {exc}") from None
        return expr

    def _check_fires(self) -> None:
        if self._dow_restricted:
            return  # with or without a day-of-month, some weekday comes every month
        if self.days[0] > max(_MONTH_DAYS[m - 1] for m in self.months):
            months = [_MONTH_NAMES[m - 1] for m in self.months]
            verb = "has" if len(months) == 1 else "have"
            raise CronError(
                f"never fires: {_join(months, 'and')} {verb} no day "
                f"{_join([str(d) for d in self.days], 'or')}"
            )

    @property
    def _dom_restricted(self) -> bool:
        return len(self.days) < 31

    @property
    def _dow_restricted(self) -> bool:
        return len(self.weekdays) < 7

    def __str__(self) -> str:
        return " ".join(
            _format_field(values, f.lo, f.last)
            for f, values in zip(_FIELDS, (self.minutes, self.hours, self.days, self.months,
                                           self.weekdays), strict=True)
        )

    def __repr__(self) -> str:
        return f"CronExpression.parse({str(self)!r})"

    def _day_matches(self, day: date) -> bool:
        dom = day.day in self.days
        dow = day.isoweekday() % 7 in self.weekdays
        if self._dom_restricted and self._dow_restricted:
            return dom or dow
        return dom and dow

    def matches(self, wall: datetime) -> bool:
        """Whether the wall-clock minute of ``wall`` (its own fields; tzinfo ignored) matches."""
        return (wall.minute in self.minutes and wall.hour in self.hours
                and wall.month in self.months and self._day_matches(wall.date()))

    def _next_wall(self, t: datetime, last_year: int) -> datetime:
        """The first matching naive wall time at or after ``t`` (a whole minute)."""
        start = t
        while t.year <= last_year:
            if t.month not in self.months:
                month = _after(self.months, t.month)
                t = datetime(t.year, month, 1) if month is not None else datetime(t.year + 1, self.months[0], 1)
            elif not self._day_matches(t.date()):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            elif t.hour not in self.hours:
                hour = _after(self.hours, t.hour)
                t = (t.replace(hour=hour, minute=0) if hour is not None
                     else datetime(t.year, t.month, t.day) + timedelta(days=1))
            elif t.minute not in self.minutes:
                minute = _after(self.minutes, t.minute)
                t = (t.replace(minute=minute) if minute is not None
                     else t.replace(minute=0) + timedelta(hours=1))
            else:
                return t
        raise CronError(f"cron expression '{self}' does not fire from {start:%Y-%m-%d} to {last_year}")

    def next_after(self, after: datetime, tz: tzinfo | str) -> datetime:
        """The first fire time strictly after ``after`` (aware, any zone), as an aware UTC time.

        The expression is read in the wall-clock time of ``tz`` (a ``ZoneInfo`` or a zone
        name); see the module docstring for the DST rules. Raises :class:`CronError` when
        nothing fires within ``SEARCH_YEARS`` years (or before year 10000).
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be a timezone-aware datetime; got naive {after}")
        zone = ZoneInfo(tz) if isinstance(tz, str) else tz
        after_utc = after.astimezone(UTC)
        wall = _wall(after_utc, zone).replace(second=0, microsecond=0, fold=0)
        last_year = min(wall.year + SEARCH_YEARS, 9998)
        try:
            while True:
                wall = self._next_wall(wall, last_year)
                fire = _to_utc(wall, zone)
                if fire > after_utc:
                    return fire
                # Fired at or before `after`: a repeated hour's first pass or a gap's end.
                wall += timedelta(minutes=1)
        except OverflowError:
            raise CronError(f"cron expression '{self}' has no fire time before year 10000") from None
