"""What the schedule decision tests share: times in minutes after T0, settings, cadences, and a tick-by-tick
simulator built only from the public decisions of django_procedures.policy.schedule (pure: no Django, no
database).

"N tick" is a scheduling pass at minute N, "N finish T" the run for tick T reaching a final status.
Finishes are handled before a pass at the same instant.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django_procedures.policy.schedule import (
    Cadence,
    Mode,
    ScheduleSettings,
    TickDecision,
    decide_tick,
    every,
    fixed_delay_next_tick,
    on_run_finished,
)

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
ZERO = timedelta(0)


def at(minutes: float) -> datetime:
    return T0 + MINUTE * minutes


def ticks(*minutes: float) -> tuple[datetime, ...]:
    return tuple(at(m) for m in minutes)


def fmt(times: Sequence[datetime]) -> str:
    return " ".join(f"{(t - T0) / MINUTE:g}" for t in times)


def cfg(mode: str = "fixed_rate", conc: int = 1, missed: str = "skip", max_pending: int = 0
        ) -> ScheduleSettings:
    return ScheduleSettings(mode, conc, missed, max_pending)  # type: ignore[arg-type]


def grid(period: timedelta, anchor: datetime = T0) -> Cadence:
    """A general (not :class:`Every`) cadence: the first multiple of ``period`` after ``after``."""
    return lambda after: anchor + ((after - anchor) // period + 1) * period


def quarter_past(after: datetime) -> datetime:
    """An irregular cadence, like the cron ``0,15,20 * * * *``."""
    hour = after.replace(minute=0, second=0, microsecond=0)
    for h in (hour, hour + timedelta(hours=1)):
        for m in (0, 15, 20):
            if (t := h + timedelta(minutes=m)) > after:
                return t
    raise AssertionError("unreachable")


def due_ticks(first: datetime | None, now: datetime, cadence: Cadence) -> tuple[list, datetime]:
    """Brute force: the due ticks and the first tick after ``now``."""
    out: list[datetime] = []
    t = first
    while t is not None and t <= now:
        out.append(t)
        t = cadence(t)
    return out, t  # type: ignore[return-value]


# --- a tick-by-tick simulator built only from the public decisions ---------------------------

@dataclass
class Sim:
    settings: ScheduleSettings
    run_time: Callable[[int], timedelta]  # duration of the n-th run (0-based)
    period: timedelta = MINUTE
    next_tick_at: datetime | None = T0
    pending: tuple[datetime, ...] = ()
    running: list[tuple[datetime, datetime]] = field(default_factory=list)  # heap (finish, tick)
    started: list[tuple[datetime, datetime]] = field(default_factory=list)  # (started at, tick)
    log: list[str] = field(default_factory=list)
    skips: int = 0
    overlaps: int = 0
    due: int = 0

    def _start(self, now: datetime, tick_times: Sequence[datetime]) -> None:
        for t in tick_times:
            assert t <= now, "a run never starts for a future tick"
            assert t not in {tick for _, tick in self.started}, "a tick starts at most once"
            assert not self.started or t > self.started[-1][1], "ticks start in order"
            heapq.heappush(self.running, (now + self.run_time(len(self.started)), t))
            self.started.append((now, t))
        assert len(self.running) <= self.settings.max_concurrency

    def _record(self, label: str, start: Sequence[datetime], pending: tuple[datetime, ...],
                skips: int = 0, overlaps: int = 0, drift: timedelta = ZERO,
                next_at: datetime | None = None) -> None:
        parts = [f"start {fmt(start)}"] if start else []
        if pending and pending != self.pending:
            parts.append(f"pending {fmt(pending)}")
        parts += [f"skips {skips}"] if skips else []
        parts += [f"overlaps {overlaps}"] if overlaps else []
        parts += [f"drift {drift / MINUTE:g}"] if drift else []
        parts += [f"next {fmt([next_at])}"] if next_at else []
        self.log.append(label + (": " + ", ".join(parts) if parts else ""))
        self.pending = pending
        self.skips += skips
        self.overlaps += overlaps

    def finish_until(self, now: datetime) -> None:
        while self.running and self.running[0][0] <= now:
            finished_at, tick = heapq.heappop(self.running)
            d = on_run_finished(self.settings, active_after=len(self.running),
                                pending=self.pending, enabled=True)
            next_at = None
            if self.settings.mode is Mode.FIXED_DELAY:
                next_at = self.next_tick_at = fixed_delay_next_tick(finished_at, self.period)
            label = f"{fmt([finished_at])} finish {fmt([tick])}"
            self._record(label, d.start, d.pending, overlaps=d.overlaps, next_at=next_at)
            self._start(finished_at, d.start)

    def tick(self, now: datetime) -> TickDecision:
        self.finish_until(now)
        d = decide_tick(self.settings, now=now, next_tick_at=self.next_tick_at,
                        active=len(self.running), pending=self.pending,
                        next_tick=every(self.period))
        if d.due:
            self._record(f"{fmt([now])} tick", d.start, d.pending, d.skips, d.overlaps, d.drift)
        self.next_tick_at, self.due = d.next_tick_at, self.due + d.due
        self._start(now, d.start)
        return d


def walk(s: ScheduleSettings, run_minutes: float, passes: Sequence[float]) -> list[str]:
    sim = Sim(s, lambda _: MINUTE * run_minutes)
    for m in passes:
        sim.tick(at(m))
    return sim.log

