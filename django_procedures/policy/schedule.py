"""Schedule ticks as pure decisions: standard library only, no Django, no database, no clock.

The caller reads a schedule row under its row lock, passes the current time in, writes back what
the decision says, and creates one run per started tick (each run carries its tick time; the
database keeps ``(schedule, tick time)`` unique).

Terms. A *tick* is a time at which the cadence asks for a run. A tick ``t`` is *due* when
``next_tick_at <= t <= now``. A run holds a *slot* until it reaches a final status; ``active``
runs hold slots and ``max_concurrency - active`` (never negative) are free. *Pending* ticks are
kept on the row, oldest first, to start when a slot frees; they are always older than newly due
ticks. A *skip* is a tick dropped; an *overlap* is a run started while another run of the schedule
holds a slot (runs started earlier in the same decision included).

Which ticks start, and what happens to the rest:

- ``catch_up``: every tick runs, in order. Pending ticks, then due ticks, oldest first, fill the
  free slots; up to ``max_pending`` of the rest stay pending (the oldest); the newer rest are skips.
- ``skip``: a tick never runs late. Only the latest due tick (the current one) may start, so at
  most one run starts per pass; every older due tick, and any pending tick, is a skip.
- ``coalesce_latest``: all due and pending ticks collapse into the latest one. It starts if a slot
  is free, otherwise it becomes the single pending tick (replacing an older one, which becomes a
  skip); every other tick is a skip.
- ``fixed_delay``: no cadence and no missed ticks; the policy does not apply. Its one due tick
  starts if the slot is free and ``next_tick_at`` becomes None until the run finishes (then
  :func:`fixed_delay_next_tick`). If a run is still active (not normally possible: the tick is
  set when the previous run finishes), the pass changes and counts nothing: the finishing run
  sets the next tick.

Every decision that handles ticks conserves them:
``due + len(old pending) == len(start) + len(new pending) + skips``.
All datetimes must be aware UTC (as Django stores them), or all naive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

__all__ = ["MAX_TICKS_PER_PASS", "Cadence", "Every", "FinishDecision", "Missed", "Mode",
           "ScheduleConfigError", "ScheduleSettings", "TickDecision", "decide_tick",
           "decide_trigger", "every", "fixed_delay_next_tick", "on_run_finished"]

MAX_TICKS_PER_PASS = 10_000
"""Most ticks a general cadence is walked through in one pass (and the most ``max_pending``)."""

Cadence = Callable[[datetime], datetime]
"""``next_tick(after)``: the first tick strictly after ``after`` (monotone in ``after``)."""

_ZERO = timedelta(0)


class Mode(StrEnum):
    """How ticks are produced and how many runs may overlap (see the module docstring)."""

    FIXED_DELAY = "fixed_delay"
    FIXED_RATE = "fixed_rate"
    FIXED_RATE_OVERLAP = "fixed_rate_overlap"


class Missed(StrEnum):
    """What happens to a due tick that cannot start now (rate modes only)."""

    SKIP = "skip"
    COALESCE_LATEST = "coalesce_latest"
    CATCH_UP = "catch_up"


class ScheduleConfigError(ValueError):
    """A schedule setting that cannot work; the message says what to change."""


def _enum(kind: type[StrEnum], name: str, value: Any) -> StrEnum:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise ScheduleConfigError(f"{name} must be one of {choices}; got {value!r}") from None


@dataclass(frozen=True)
class ScheduleSettings:
    """The settings a tick decision needs. ``mode`` and ``missed`` accept their string values.

    Construction only rejects unknown ``mode``/``missed`` strings; :meth:`errors` and
    :meth:`validate` check the rest. Every decision function validates its settings first.
    """

    mode: Mode = Mode.FIXED_RATE
    max_concurrency: int = 1
    missed: Missed = Missed.SKIP
    max_pending: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _enum(Mode, "mode", self.mode))
        object.__setattr__(self, "missed", _enum(Missed, "missed", self.missed))

    def errors(self) -> dict[str, str]:
        """Field name -> a full sentence saying what to change; empty when the settings work."""
        errors: dict[str, str] = {}
        n, mode = self.max_concurrency, self.mode.value
        if self.mode is Mode.FIXED_RATE_OVERLAP and n < 2:
            errors["max_concurrency"] = (
                f"{mode} schedules run up to max_concurrency runs at once; set max_concurrency "
                f"to 2 or more, or use mode fixed_rate; got {n}")
        elif self.mode is not Mode.FIXED_RATE_OVERLAP and n != 1:
            errors["max_concurrency"] = (
                f"{mode} schedules run one at a time; set max_concurrency to 1 or use mode "
                f"fixed_rate_overlap; got {n}")
        p = self.max_pending
        if p < 0:
            errors["max_pending"] = f"max_pending must not be negative; got {p}"
        elif p > MAX_TICKS_PER_PASS:
            errors["max_pending"] = (
                f"max_pending must be at most {MAX_TICKS_PER_PASS} (pending ticks are stored on "
                f"the schedule row); got {p}")
        elif self.missed is Missed.CATCH_UP and p < 1:
            errors["max_pending"] = (
                "catch_up keeps missed ticks to run later; set max_pending to 1 or more, or use "
                f"missed skip or coalesce_latest; got {p}")
        return errors

    def validate(self) -> ScheduleSettings:
        """Return ``self``, or raise :class:`ScheduleConfigError` with every error, one a line."""
        if errors := self.errors():
            raise ScheduleConfigError("\n".join(errors.values()))
        return self


@dataclass(frozen=True)
class Every:
    """A fixed-period cadence: ``Every(period)(after) == after + period``.

    Ticks are anchored on the first tick, so a decision counts them arithmetically: any outage
    costs O(1). ``period`` must be positive.
    """

    period: timedelta

    def __post_init__(self) -> None:
        if self.period <= _ZERO:
            raise ScheduleConfigError(
                f"period must be positive; got {self.period.total_seconds():g} seconds")

    def __call__(self, after: datetime) -> datetime:
        return after + self.period


def every(period: timedelta) -> Every:
    """The cadence of a tick every ``period``; raises :class:`ScheduleConfigError` unless positive."""
    return Every(period)


def fixed_delay_next_tick(finished_at: datetime, period: timedelta) -> datetime:
    """A ``fixed_delay`` schedule's next tick: ``period`` after its run finished."""
    return every(period)(finished_at)


@dataclass(frozen=True)
class TickDecision:
    """What one pass does to a schedule; ``TickDecision(pending=p, next_tick_at=n)`` is a no-op.

    ``start``: tick times to start runs for now, oldest first, one run each. ``pending``: the new
    pending ticks, oldest first. ``skips``/``overlaps``: counts to add to the metrics.
    ``next_tick_at``: the first tick strictly after ``now`` (rate modes), None for a
    ``fixed_delay`` run that started (set when it finishes), unchanged when nothing was due and for
    a trigger. ``drift``: ``now`` minus the earliest due tick handled (zero if none). ``due``: the
    ticks handled. ``truncated``: a general cadence had more than ``MAX_TICKS_PER_PASS`` due ticks;
    ``due`` and ``skips`` then include an estimate of the ticks past that limit.
    """

    start: tuple[datetime, ...] = ()
    pending: tuple[datetime, ...] = ()
    skips: int = 0
    overlaps: int = 0
    next_tick_at: datetime | None = None
    drift: timedelta = _ZERO
    due: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class FinishDecision:
    """Pending ticks to start now that a run finished (oldest first), and what stays pending."""

    start: tuple[datetime, ...] = ()
    pending: tuple[datetime, ...] = ()
    overlaps: int = 0


@dataclass(frozen=True)
class _Due:
    count: int
    oldest: tuple[datetime, ...]  # the first due ticks, as many as the policy may need
    latest: datetime
    next_tick_at: datetime | None  # what the schedule's next_tick_at becomes
    truncated: bool = False


def _step(cadence: Cadence, after: datetime) -> datetime:
    tick = cadence(after)
    if tick <= after:
        raise ScheduleConfigError(
            f"a cadence must return a time strictly after the one it is given; got {tick} "
            f"after {after}")
    return tick


def _due_ticks(first: datetime, now: datetime, cadence: Cadence, wanted: int) -> _Due:
    """The ticks from ``first`` (due) to ``now``, in bounded time however long the outage.

    An :class:`Every` is counted arithmetically. A general cadence is walked for at most
    ``MAX_TICKS_PER_PASS`` ticks; past that the pass jumps: the latest due tick is found by
    bisection (``cadence`` is monotone), and the ticks in between are counted by the mean spacing
    of the walked ones (exact for a regular cadence) and skipped.
    """
    if isinstance(cadence, Every):
        count = (now - first) // cadence.period + 1
        latest = first + (count - 1) * cadence.period
        oldest = tuple(first + i * cadence.period for i in range(min(count, wanted)))
        return _Due(count, oldest, latest, latest + cadence.period)
    walked, tick = [first], _step(cadence, first)
    while tick <= now and len(walked) < MAX_TICKS_PER_PASS:
        walked.append(tick)
        tick = _step(cadence, tick)
    if tick > now:
        return _Due(len(walked), tuple(walked[:wanted]), walked[-1], tick)
    lo, hi = walked[-1], now  # invariant: cadence(lo) <= now < cadence(hi)
    while hi - lo > timedelta(microseconds=1):
        mid = lo + (hi - lo) / 2
        lo, hi = (mid, hi) if _step(cadence, mid) <= now else (lo, mid)
    latest = _step(cadence, lo)
    spacing = (tick - first) / len(walked)
    rest = max(1, round((latest - walked[-1]) / spacing))
    return _Due(len(walked) + rest, tuple(walked[:wanted]), latest, _step(cadence, latest), True)


def _overlaps(active: int, started: int) -> int:
    """Runs among ``started`` that begin while a slot is held (by ``active`` or an earlier one)."""
    return started if active > 0 else max(0, started - 1)


def _checked(settings: ScheduleSettings, name: str, active: int) -> None:
    settings.validate()
    if active < 0:
        raise ValueError(f"{name} counts runs holding a slot and cannot be negative; got {active}")


def _apply(s: ScheduleSettings, active: int, pending: tuple[datetime, ...], due: _Due,
           drift: timedelta) -> TickDecision:
    free = max(0, s.max_concurrency - active)
    missed = Missed.SKIP if s.mode is Mode.FIXED_DELAY else s.missed
    if missed is Missed.CATCH_UP:
        queue = (*pending, *due.oldest)
        start, kept = queue[:free], queue[free:free + s.max_pending]
    else:
        start = (due.latest,) if free else ()
        kept = (due.latest,) if not free and missed is Missed.COALESCE_LATEST else ()
    skips = due.count + len(pending) - len(start) - len(kept)
    return TickDecision(start, kept, skips, _overlaps(active, len(start)), due.next_tick_at,
                        drift, due.count, due.truncated)


def decide_tick(settings: ScheduleSettings, *, now: datetime, next_tick_at: datetime | None,
                active: int, pending: Iterable[datetime], next_tick: Cadence) -> TickDecision:
    """One scheduling pass over one schedule at ``now`` (see the module docstring).

    ``next_tick_at`` is the schedule's first tick not yet handled (None: a ``fixed_delay`` run is
    in progress); ``active`` the runs holding a slot; ``pending`` the stored pending ticks, oldest
    first; ``next_tick`` the cadence (``every(period)`` or a cron expression's next fire time;
    unused by ``fixed_delay``). Nothing due: a no-op decision. A second pass at the same ``now``
    after applying a decision is a no-op too.
    """
    _checked(settings, "active", active)
    pending = tuple(pending)
    if next_tick_at is None or next_tick_at > now:
        return TickDecision(pending=pending, next_tick_at=next_tick_at)
    if settings.mode is Mode.FIXED_DELAY:
        if active >= settings.max_concurrency:
            return TickDecision(pending=pending, next_tick_at=next_tick_at)
        due = _Due(1, (next_tick_at,), next_tick_at, None)
    else:
        free = max(0, settings.max_concurrency - active)
        wanted = free + settings.max_pending if settings.missed is Missed.CATCH_UP else 0
        due = _due_ticks(next_tick_at, now, next_tick, wanted)
    return _apply(settings, active, pending, due, now - next_tick_at)


def decide_trigger(settings: ScheduleSettings, *, now: datetime, next_tick_at: datetime | None,
                   active: int, pending: Iterable[datetime]) -> TickDecision:
    """Trigger now: one extra tick at ``now``, under the same bound and policy as any tick.

    It is :func:`decide_tick` with a single due tick at ``now``; ``next_tick_at`` is returned
    unchanged in every mode (a ``fixed_delay`` schedule's next tick is set again when a run
    finishes) and drift is zero. With no free slot the trigger is a skip, stays pending
    (coalesce_latest, or catch_up with room) or is a skip past ``max_pending``; a ``fixed_delay``
    schedule with its run active counts it as a skip. A pending tick at exactly ``now`` is the
    same tick: it merges with the trigger and counts as a skip.
    """
    _checked(settings, "active", active)
    pending = tuple(pending)
    rest = tuple(t for t in pending if t != now)
    decision = _apply(settings, active, rest, _Due(1, (now,), now, next_tick_at), _ZERO)
    return replace(decision, skips=decision.skips + len(pending) - len(rest))


def on_run_finished(settings: ScheduleSettings, *, active_after: int,
                    pending: Iterable[datetime], enabled: bool) -> FinishDecision:
    """Pending ticks to start in the transaction where a run reached a final status.

    ``active_after`` counts the runs still holding a slot without the finished one. While the
    schedule is enabled, the oldest pending ticks fill the free slots; a disabled schedule starts
    nothing and keeps its pending ticks. A ``fixed_delay`` schedule has none: the caller sets its
    ``next_tick_at`` to :func:`fixed_delay_next_tick` instead.
    """
    _checked(settings, "active_after", active_after)
    pending = tuple(pending)
    free = max(0, settings.max_concurrency - active_after) if enabled else 0
    start = pending[:free]
    return FinishDecision(start, pending[free:], _overlaps(active_after, len(start)))
