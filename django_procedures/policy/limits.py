"""Flow control: ``Limit`` values, their stored form, and the pure decision whether a claim may take them.

A run's limits are stored on its row as plain data (``[[name, kind, amount, per_seconds], ...]``, sorted),
computed by the procedure side from the user's ``limits()``; queue limits come from
``PROCEDURES["QUEUES"]`` and are added at claim time. The store takes them as slot rows (``store.limits``);
this module says, of a name's use read from those rows, whether one more claim fits (the admin's "why").

Rate limits are a sliding-window log: a claim is admitted while fewer than ``count`` claims fall in the last
``per`` seconds. Exact (never more than ``count`` claims in any window of ``per`` seconds) and bursty: after a
rest, ``count`` claims go at once. The store keeps it as ``count`` slots, each free again ``per`` after the
claim that took it, hence :data:`MAX_RATE_COUNT`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django_procedures.policy.durations import seconds_of

#: Longest limit name: the limit table's primary key column.
MAX_NAME_LENGTH = 200
#: Largest ``count`` of a rate limit: a name has that many slot rows.
MAX_RATE_COUNT = 10_000
#: Largest concurrency ``max``: the limit table's integer column.
MAX_CONCURRENCY = 2**31 - 1
#: Longest rate window: ten years (a wake time past the year 9999 cannot be written).
MAX_PER_SECONDS = 10 * 365 * 86400.0
CONCURRENCY = "concurrency"
RATE = "rate"
#: The limit name of a queue's ``PROCEDURES["QUEUES"]`` limits.
QUEUE_PREFIX = "queue:"


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a limit name must be a str; got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError("a limit name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"a limit name is at most {MAX_NAME_LENGTH} characters; got {len(name)} "
                         f"({name[:40]!r}...): hash long names")
    if "\x00" in name:
        raise ValueError(f"a limit name must not contain NUL characters; got {name!r}")
    return name


def _check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int; got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1; got {value} (to stop work, do not submit it)")
    return value


def _check_per(per: Any) -> float:
    seconds = seconds_of(per)
    if seconds is None:
        raise TypeError(f"a rate's per must be a timedelta or seconds; got {type(per).__name__} {per!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a rate's per must be a positive, finite duration; got {per!r}")
    if seconds > MAX_PER_SECONDS:
        raise ValueError(f"a rate's per is at most ten years ({MAX_PER_SECONDS:g} seconds); got {per!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class Limit:
    """A fleet-wide limit a procedure declares in ``limits()``; made by :meth:`concurrency` or :meth:`rate`."""

    name: str
    kind: str
    #: ``max`` of a concurrency limit, ``count`` of a rate limit.
    amount: int
    #: A rate's window in seconds (0 for a concurrency limit).
    per_seconds: float = 0.0

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.kind not in (CONCURRENCY, RATE):
            raise ValueError(f"a limit's kind is {CONCURRENCY!r} or {RATE!r}; got {self.kind!r}")
        _check_positive_int(self.amount, "a concurrency limit's max" if self.kind == CONCURRENCY
                            else "a rate limit's count")
        if self.kind == CONCURRENCY and self.amount > MAX_CONCURRENCY:
            raise ValueError(f"a concurrency limit's max is at most {MAX_CONCURRENCY}; got {self.amount}")
        if self.kind == RATE:
            if self.amount > MAX_RATE_COUNT:
                raise ValueError(f"a rate limit's count is at most {MAX_RATE_COUNT}; got {self.amount} "
                                 "(state the rate over a shorter per)")
            _check_per(self.per_seconds)

    @classmethod
    def concurrency(cls, name: str, max: int) -> Limit:
        """At most ``max`` procedures holding a limit ``name`` run (hold a lease) at once, across the fleet."""
        return cls(name, CONCURRENCY, max)

    @classmethod
    def rate(cls, name: str, count: int, per: timedelta | float) -> Limit:
        """At most ``count`` claims of procedures holding a limit ``name`` per ``per`` (timedelta or seconds)."""
        return cls(name, RATE, count, _check_per(per))

    def stored(self) -> list[Any]:
        return [self.name, self.kind, self.amount, self.per_seconds]

    def __repr__(self) -> str:
        if self.kind == CONCURRENCY:
            return f"Limit.concurrency({self.name!r}, {self.amount})"
        return f"Limit.rate({self.name!r}, {self.amount}, {self.per_seconds:g})"


def stored_limits(limits: Any, owner: str) -> list[list[Any]] | None:
    """The stored form of what ``owner``'s ``limits()`` returned: sorted, one per (name, kind), the stricter
    kept; None for none. ``TypeError`` for anything that is not an iterable of ``Limit``."""
    if limits is None:
        return None
    if isinstance(limits, Limit | str | bytes | Mapping) or not isinstance(limits, Iterable):
        raise TypeError(f"{owner}.limits() must return a list of Limit values; got {limits!r}")
    chosen: dict[tuple[str, str], Limit] = {}
    for limit in limits:
        if not isinstance(limit, Limit):
            raise TypeError(f"{owner}.limits() must return Limit.concurrency(name, max) or "
                            f"Limit.rate(name, count, per) values; got {limit!r}")
        key = (limit.name, limit.kind)
        old = chosen.get(key)
        if old is None or _stricter(limit, old):
            chosen[key] = limit
    return [chosen[k].stored() for k in sorted(chosen)] or None


def _stricter(a: Limit, b: Limit) -> bool:
    return a.amount / (a.per_seconds or 1) < b.amount / (b.per_seconds or 1)


def parse(stored: Iterable[Sequence[Any]] | None) -> list[Limit]:
    """The limits of a stored form (a row's ``limits``)."""
    return [Limit(str(n), str(k), int(a), float(p)) for n, k, a, p in stored or ()]


def queue_limits(queues: Mapping[str, Any] | None) -> dict[str, list[Limit]]:
    """``PROCEDURES["QUEUES"]`` as limits per queue name (``ValueError``/``TypeError`` on a bad entry)."""
    found: dict[str, list[Limit]] = {}
    for queue, spec in (queues or {}).items():
        if not isinstance(queue, str) or not queue:
            raise TypeError(f'PROCEDURES["QUEUES"] keys are queue names (non-empty str); got {queue!r}')
        if not isinstance(spec, Mapping):
            raise TypeError(f'PROCEDURES["QUEUES"][{queue!r}] must be a dict like {{"concurrency": 10, '
                            f'"rate": (100, 60)}}; got {spec!r}')
        unknown = set(spec) - {"concurrency", "rate"}
        if unknown:
            raise ValueError(f'PROCEDURES["QUEUES"][{queue!r}] has unknown keys {sorted(unknown)}; '
                             'use "concurrency" and "rate"')
        name = QUEUE_PREFIX + queue
        limits = []
        if spec.get("concurrency") is not None:
            limits.append(Limit.concurrency(name, spec["concurrency"]))
        if spec.get("rate") is not None:
            rate = spec["rate"]
            if not isinstance(rate, tuple | list) or len(rate) != 2:
                raise TypeError(f'PROCEDURES["QUEUES"][{queue!r}]["rate"] must be (count, per), per a '
                                f"timedelta or seconds; got {rate!r}")
            limits.append(Limit.rate(name, rate[0], rate[1]))
        if limits:
            found[queue] = limits
    return found


@dataclass(frozen=True)
class Use:
    """A limit name's use as read from its slots: leases holding it now, and claims its rate still counts."""

    in_use: int = 0
    #: Claims under a rate of this name inside its window now (its slots not free again yet).
    recent: int = 0


def admits(limits: Iterable[Limit], uses: Mapping[str, Use]) -> str | None:
    """None if one more claim fits every limit, else which one is full, e.g. ``"crm-api: 5 of 5 running"``."""
    for limit in limits:
        use = uses.get(limit.name, Use())
        if limit.kind == CONCURRENCY and use.in_use >= limit.amount:
            return f"{limit.name}: {use.in_use} of {limit.amount} running"
        if limit.kind == RATE and use.recent >= limit.amount:
            return f"{limit.name}: {use.recent} of {limit.amount} per {limit.per_seconds:g}s"
    return None


__all__ = ["CONCURRENCY", "MAX_NAME_LENGTH", "MAX_RATE_COUNT", "QUEUE_PREFIX", "RATE", "Limit", "Use", "admits",
           "parse", "queue_limits", "stored_limits"]
