"""Where the dashboard's charts draw things: buckets filled in, scales rounded up, bars placed.

Pure: no Django, no database; :mod:`django_procedures.admin.charts` renders the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Bucket:
    start: datetime
    done: int
    failed: int


@dataclass(frozen=True)
class Column:
    """One bucket's stacked column: ``done`` at the bottom, ``failed`` on top of it (y grows downwards)."""

    bucket: Bucket
    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float


def bucket_start(moment: datetime, seconds: int) -> datetime:
    """The start of the ``seconds``-long bucket ``moment`` falls in (aligned on the Unix epoch, as ``date_bin``)."""
    offset = (moment - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=(offset // seconds) * seconds)


def fill_buckets(found: Mapping[datetime, tuple[int, int]], now: datetime, window: timedelta,
                 seconds: int) -> list[Bucket]:
    """Every bucket of the ``window`` ending with the one ``now`` is in, oldest first; zeros where none was found."""
    last = bucket_start(now, seconds)
    count = int(window.total_seconds() // seconds)
    first = last - timedelta(seconds=seconds * (count - 1))
    by_start = {bucket_start(moment, seconds): counts for moment, counts in found.items()}
    out = []
    for n in range(count):
        start = first + timedelta(seconds=seconds * n)
        done, failed = by_start.get(start, (0, 0))
        out.append(Bucket(start, done, failed))
    return out


def window_start(now: datetime, window: timedelta, seconds: int) -> datetime:
    """The start of the first bucket :func:`fill_buckets` draws (what the query should read from)."""
    count = int(window.total_seconds() // seconds)
    return bucket_start(now, seconds) - timedelta(seconds=seconds * (count - 1))


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (1 for nothing)."""
    if value <= 0:
        return 1
    scale = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= value * (1 - 1e-12):
            return round(step * scale, 12)
    return 10 * scale  # pragma: no cover - the loop always returns


def columns(buckets: Sequence[Bucket], x0: float, width: float, top: float, height: float,
            gap: float = 1.0) -> tuple[float, list[Column]]:
    """``(scale maximum, columns)``: each bucket a stacked column, heights in proportion to the scale."""
    peak = nice_ceiling(max((b.done + b.failed for b in buckets), default=0))
    slot = width / max(len(buckets), 1)
    bottom = top + height
    out = []
    for i, b in enumerate(buckets):
        done_h = height * b.done / peak
        failed_h = height * b.failed / peak
        x = x0 + i * slot
        out.append(Column(b, round(x, 2), round(max(slot - gap, 0.5), 2), round(bottom - done_h, 2), round(done_h, 2),
                          round(bottom - done_h - failed_h, 2), round(failed_h, 2)))
    return peak, out


def span(value: float, peak: float, width: float) -> float:
    """The length of a horizontal bar for ``value`` on a scale of ``peak`` over ``width`` px."""
    if peak <= 0:
        return 0.0
    return round(width * max(0.0, min(value, peak)) / peak, 2)


def stack(parts: Sequence[tuple[str, int]], peak: float, x0: float,
          width: float) -> list[tuple[str, int, float, float]]:
    """``(name, value, x, width)`` of each non-zero part, laid end to end from ``x0``."""
    out, x = [], x0
    for name, value in parts:
        if value <= 0:
            continue
        w = span(value, peak, width)
        out.append((name, value, round(x, 2), max(w, 1.0)))
        x += w
    return out
