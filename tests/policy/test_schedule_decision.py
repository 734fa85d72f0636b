"""Tests for django_procedures.policy.schedule (pure: no Django, no database).

The scenario tables walk schedules tick by tick and double as the documentation table: times are
minutes after T0; "N tick" is a scheduling pass at minute N, "N finish T" the run for tick T
reaching a final status. Finishes are handled before a pass at the same instant.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_procedures.policy import schedule
from django_procedures.policy.schedule import (
    Cadence,
    Every,
    FinishDecision,
    Missed,
    Mode,
    ScheduleConfigError,
    ScheduleSettings,
    TickDecision,
    decide_tick,
    decide_trigger,
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


# --- scenario tables: a 1-minute schedule, runs of 3.5 minutes, a pass every minute ----------

SCENARIOS = {
    "fixed_rate/skip": (cfg(), [
        "0 tick: start 0", "1 tick: skips 1", "2 tick: skips 1", "3 tick: skips 1",
        "3.5 finish 0", "4 tick: start 4", "5 tick: skips 1", "6 tick: skips 1",
        "7 tick: skips 1", "7.5 finish 4", "8 tick: start 8",
    ]),
    "fixed_rate/coalesce_latest": (cfg(missed="coalesce_latest"), [
        "0 tick: start 0", "1 tick: pending 1", "2 tick: pending 2, skips 1",
        "3 tick: pending 3, skips 1", "3.5 finish 0: start 3", "4 tick: pending 4",
        "5 tick: pending 5, skips 1", "6 tick: pending 6, skips 1", "7 finish 3: start 6",
        "7 tick: pending 7", "8 tick: pending 8, skips 1",
    ]),
    "fixed_rate/catch_up(max_pending=2)": (cfg(missed="catch_up", max_pending=2), [
        "0 tick: start 0", "1 tick: pending 1", "2 tick: pending 1 2", "3 tick: skips 1",
        "3.5 finish 0: start 1, pending 2", "4 tick: pending 2 4", "5 tick: skips 1",
        "6 tick: skips 1", "7 finish 1: start 2, pending 4", "7 tick: pending 4 7",
        "8 tick: skips 1",
    ]),
    "fixed_rate_overlap(2)/skip": (cfg("fixed_rate_overlap", 2), [
        "0 tick: start 0", "1 tick: start 1, overlaps 1", "2 tick: skips 1", "3 tick: skips 1",
        "3.5 finish 0", "4 tick: start 4, overlaps 1", "4.5 finish 1",
        "5 tick: start 5, overlaps 1", "6 tick: skips 1", "7 tick: skips 1", "7.5 finish 4",
        "8 tick: start 8, overlaps 1",
    ]),
    "fixed_rate_overlap(2)/coalesce_latest": (cfg("fixed_rate_overlap", 2, "coalesce_latest"), [
        "0 tick: start 0", "1 tick: start 1, overlaps 1", "2 tick: pending 2",
        "3 tick: pending 3, skips 1", "3.5 finish 0: start 3, overlaps 1", "4 tick: pending 4",
        "4.5 finish 1: start 4, overlaps 1", "5 tick: pending 5", "6 tick: pending 6, skips 1",
        "7 finish 3: start 6, overlaps 1", "7 tick: pending 7",
        "8 finish 4: start 7, overlaps 1", "8 tick: pending 8",
    ]),
    "fixed_rate_overlap(2)/catch_up(max_pending=2)": (
        cfg("fixed_rate_overlap", 2, "catch_up", 2), [
            "0 tick: start 0", "1 tick: start 1, overlaps 1", "2 tick: pending 2",
            "3 tick: pending 2 3", "3.5 finish 0: start 2, pending 3, overlaps 1",
            "4 tick: pending 3 4", "4.5 finish 1: start 3, pending 4, overlaps 1",
            "5 tick: pending 4 5", "6 tick: skips 1",
            "7 finish 2: start 4, pending 5, overlaps 1", "7 tick: pending 5 7",
            "8 finish 3: start 5, pending 7, overlaps 1", "8 tick: pending 7 8",
        ]),
    "fixed_delay": (cfg("fixed_delay"), [
        "0 tick: start 0", "3.5 finish 0: next 4.5", "5 tick: start 4.5, drift 0.5",
    ]),
}


@pytest.mark.parametrize(("s", "expected"), SCENARIOS.values(), ids=SCENARIOS.keys())
def test_scenario_one_minute_ticks_three_and_a_half_minute_runs(s, expected):
    assert walk(s, 3.5, range(9)) == expected


# A 1-minute fixed_rate_overlap(3) schedule, runs of 2 minutes, but a pass only every 5 minutes
# (a coarse beat, or an outage): skip and coalesce_latest start only the latest tick; catch_up
# starts the oldest ones in a burst.
COARSE = {
    "skip": (cfg("fixed_rate_overlap", 3), [
        "0 tick: start 0", "2 finish 0", "5 tick: start 5, skips 4, drift 4", "7 finish 5",
        "10 tick: start 10, skips 4, drift 4",
    ]),
    "coalesce_latest": (cfg("fixed_rate_overlap", 3, "coalesce_latest"), [
        "0 tick: start 0", "2 finish 0", "5 tick: start 5, skips 4, drift 4", "7 finish 5",
        "10 tick: start 10, skips 4, drift 4",
    ]),
    "catch_up(max_pending=2)": (cfg("fixed_rate_overlap", 3, "catch_up", 2), [
        "0 tick: start 0", "2 finish 0",
        "5 tick: start 1 2 3, pending 4 5, overlaps 2, drift 4",
        "7 finish 1: start 4, pending 5, overlaps 1", "7 finish 2: start 5, overlaps 1",
        "7 finish 3", "9 finish 4", "9 finish 5",
        "10 tick: start 6 7 8, pending 9 10, overlaps 2, drift 4",
    ]),
}


@pytest.mark.parametrize(("s", "expected"), COARSE.values(), ids=COARSE.keys())
def test_scenario_coarse_scheduler(s, expected):
    assert walk(s, 2, [0, 5, 10]) == expected


# --- one pass: an outage from minute 0 to 10.5 on a 1-minute cadence (11 ticks due) ----------

NO = object()  # "unchanged": the expected pending is the given one

PASSES = [
    # id, settings, next_tick_at, now, active, pending -> start, pending, skips, overlaps, next
    ("not due yet", cfg(), 5, 4.9, 0, (), (), NO, 0, 0, 5),
    ("not due keeps pending", cfg(missed="catch_up", max_pending=3), 5, 4.9, 1, (3, 4),
     (), NO, 0, 0, 5),
    ("due exactly now", cfg(), 5, 5, 0, (), (5,), (), 0, 0, 6),
    ("skip, free", cfg(), 0, 10.5, 0, (), (10,), (), 10, 0, 11),
    ("skip, busy", cfg(), 0, 10.5, 1, (), (), (), 11, 0, 11),
    ("skip drops stale pending", cfg(), 0, 10.5, 0, (-1,), (10,), (), 11, 0, 11),
    ("coalesce, free", cfg(missed="coalesce_latest"), 0, 10.5, 0, (), (10,), (), 10, 0, 11),
    ("coalesce, busy", cfg(missed="coalesce_latest"), 0, 10.5, 1, (-1,), (), (10,), 11, 0, 11),
    ("coalesce, free, pending", cfg(missed="coalesce_latest"), 0, 0, 0, (-1,), (0,), (), 1, 0, 1),
    ("catch_up, free", cfg(missed="catch_up", max_pending=3), 0, 10.5, 0, (),
     (0,), (1, 2, 3), 7, 0, 11),
    ("catch_up, busy", cfg(missed="catch_up", max_pending=3), 0, 10.5, 1, (-2, -1),
     (), (-2, -1, 0), 10, 0, 11),
    ("catch_up, free, pending first", cfg(missed="catch_up", max_pending=3), 0, 10.5, 0, (-1,),
     (-1,), (0, 1, 2), 8, 0, 11),
    ("overlap catch_up", cfg("fixed_rate_overlap", 3, "catch_up", 2), 0, 10.5, 1, (),
     (0, 1), (2, 3), 7, 2, 11),
    ("overlap catch_up, idle", cfg("fixed_rate_overlap", 3, "catch_up", 2), 0, 10.5, 0, (),
     (0, 1, 2), (3, 4), 6, 2, 11),
    ("overlap catch_up, few due", cfg("fixed_rate_overlap", 3, "catch_up", 2), 0, 1, 0, (),
     (0, 1), (), 0, 1, 2),
    ("overlap skip", cfg("fixed_rate_overlap", 3), 0, 10.5, 1, (), (10,), (), 10, 1, 11),
    ("overlap skip, idle", cfg("fixed_rate_overlap", 3), 0, 10.5, 0, (), (10,), (), 10, 0, 11),
    ("over the limit", cfg("fixed_rate_overlap", 3, "catch_up", 2), 0, 10.5, 4, (),
     (), (0, 1), 9, 0, 11),
    ("fixed_delay, free", cfg("fixed_delay"), 4.5, 10.5, 0, (), (4.5,), (), 0, 0, None),
    ("fixed_delay, busy", cfg("fixed_delay"), 4.5, 10.5, 1, (), (), NO, 0, 0, 4.5),
    ("fixed_delay, waiting for run", cfg("fixed_delay"), None, 10.5, 1, (), (), NO, 0, 0, None),
]


@pytest.mark.parametrize(
    ("s", "first", "now", "active", "pending", "start", "kept", "skips", "overlaps", "next_at"),
    [p[1:] for p in PASSES], ids=[p[0] for p in PASSES])
def test_one_pass(s, first, now, active, pending, start, kept, skips, overlaps, next_at):
    first_at = None if first is None else at(first)
    d = decide_tick(s, now=at(now), next_tick_at=first_at, active=active,
                    pending=ticks(*pending), next_tick=every(MINUTE))
    assert d.start == ticks(*start)
    assert d.pending == ticks(*(pending if kept is NO else kept))
    assert (d.skips, d.overlaps) == (skips, overlaps)
    assert d.next_tick_at == (None if next_at is None else at(next_at))
    handled = bool(start or skips or kept is not NO)
    assert d.drift == (at(now) - first_at if handled else ZERO)


def test_nothing_due_is_the_unchanged_decision():
    d = decide_tick(cfg(), now=at(0), next_tick_at=at(1), active=0, pending=[],
                    next_tick=every(MINUTE))
    assert d == TickDecision(next_tick_at=at(1))


# --- trigger now -----------------------------------------------------------------------------

TRIGGERS = [
    # id, settings, active, pending -> start, pending, skips, overlaps
    ("skip, free", cfg(), 0, (), (9,), (), 0, 0),
    ("skip, busy", cfg(), 1, (), (), (), 1, 0),
    ("coalesce, busy, replaces pending", cfg(missed="coalesce_latest"), 1, (8,), (), (9,), 1, 0),
    ("catch_up, busy, room", cfg(missed="catch_up", max_pending=2), 1, (8,), (), (8, 9), 0, 0),
    ("catch_up, busy, full", cfg(missed="catch_up", max_pending=1), 1, (8,), (), (8,), 1, 0),
    ("catch_up, free, pending first", cfg(missed="catch_up", max_pending=2), 0, (8,),
     (8,), (9,), 0, 0),
    ("overlap, free", cfg("fixed_rate_overlap", 2), 1, (), (9,), (), 0, 1),
    ("pending tick at now merges", cfg(missed="coalesce_latest"), 1, (9,), (), (9,), 1, 0),
    ("fixed_delay, free", cfg("fixed_delay"), 0, (), (9,), (), 0, 0),
    ("fixed_delay, busy", cfg("fixed_delay"), 1, (), (), (), 1, 0),
]


@pytest.mark.parametrize(("s", "active", "pending", "start", "kept", "skips", "overlaps"),
                         [t[1:] for t in TRIGGERS], ids=[t[0] for t in TRIGGERS])
def test_trigger_now(s, active, pending, start, kept, skips, overlaps):
    for next_at in (at(10), at(5), None):
        d = decide_trigger(s, now=at(9), next_tick_at=next_at, active=active,
                           pending=ticks(*pending))
        assert (d.start, d.pending) == (ticks(*start), ticks(*kept))
        assert (d.skips, d.overlaps, d.due, d.drift) == (skips, overlaps, 1, ZERO)
        assert d.next_tick_at == next_at, "a trigger never moves the schedule's next tick"


# --- a run finished --------------------------------------------------------------------------

FINISHES = [
    # id, settings, active_after, pending, enabled -> start, pending, overlaps
    ("nothing pending", cfg(), 0, (), True, (), (), 0),
    ("oldest pending starts", cfg(missed="catch_up", max_pending=2), 0, (1, 2), True,
     (1,), (2,), 0),
    ("disabled keeps pending", cfg(missed="catch_up", max_pending=2), 0, (1, 2), False,
     (), (1, 2), 0),
    ("no free slot", cfg("fixed_rate_overlap", 2, "catch_up", 3), 2, (1, 2), True,
     (), (1, 2), 0),
    ("overlap fills slots", cfg("fixed_rate_overlap", 3, "catch_up", 3), 1, (1, 2, 3), True,
     (1, 2), (3,), 2),
    ("overlap, idle", cfg("fixed_rate_overlap", 3, "catch_up", 3), 0, (1, 2), True,
     (1, 2), (), 1),
]


@pytest.mark.parametrize(("s", "active_after", "pending", "enabled", "start", "kept", "overlaps"),
                         [f[1:] for f in FINISHES], ids=[f[0] for f in FINISHES])
def test_run_finished(s, active_after, pending, enabled, start, kept, overlaps):
    d = on_run_finished(s, active_after=active_after, pending=ticks(*pending), enabled=enabled)
    assert d == FinishDecision(ticks(*start), ticks(*kept), overlaps)


def test_fixed_delay_next_tick():
    assert fixed_delay_next_tick(at(3.5), MINUTE) == at(4.5)
    with pytest.raises(ScheduleConfigError, match="period must be positive; got 0 seconds"):
        fixed_delay_next_tick(at(3.5), ZERO)


# --- validation ------------------------------------------------------------------------------

VALIDATION = [
    ("fixed_rate", 1, "skip", 0, None),
    ("fixed_delay", 1, "catch_up", 5, None),
    ("fixed_rate_overlap", 2, "coalesce_latest", 3, None),
    ("fixed_rate", 3, "skip", 0, "fixed_rate schedules run one at a time; set max_concurrency to "
                                 "1 or use mode fixed_rate_overlap; got 3"),
    ("fixed_delay", 2, "skip", 0, "fixed_delay schedules run one at a time; set max_concurrency "
                                  "to 1 or use mode fixed_rate_overlap; got 2"),
    ("fixed_rate", 0, "skip", 0, "fixed_rate schedules run one at a time; set max_concurrency to "
                                 "1 or use mode fixed_rate_overlap; got 0"),
    ("fixed_rate_overlap", 1, "skip", 0, "fixed_rate_overlap schedules run up to max_concurrency "
     "runs at once; set max_concurrency to 2 or more, or use mode fixed_rate; got 1"),
    ("fixed_rate", 1, "catch_up", 0, "catch_up keeps missed ticks to run later; set max_pending "
     "to 1 or more, or use missed skip or coalesce_latest; got 0"),
    ("fixed_rate", 1, "skip", -1, "max_pending must not be negative; got -1"),
    ("fixed_rate", 1, "catch_up", 10_001, "max_pending must be at most 10000 (pending ticks are "
     "stored on the schedule row); got 10001"),
]


@pytest.mark.parametrize(("mode", "conc", "missed", "max_pending", "message"), VALIDATION)
def test_validation(mode, conc, missed, max_pending, message):
    s = cfg(mode, conc, missed, max_pending)
    if message is None:
        assert s.validate() is s and s.errors() == {}
        return
    assert list(s.errors().values()) == [message]
    with pytest.raises(ScheduleConfigError) as info:
        s.validate()
    assert str(info.value) == message and isinstance(info.value, ValueError)


def test_validation_reports_every_field():
    errors = cfg("fixed_rate_overlap", 1, "catch_up", 0).errors()
    assert set(errors) == {"max_concurrency", "max_pending"}
    with pytest.raises(ScheduleConfigError, match=r"(?s)max_concurrency.*\n.*max_pending"):
        decide_tick(cfg("fixed_rate_overlap", 1, "catch_up", 0), now=T0, next_tick_at=T0,
                    active=0, pending=(), next_tick=every(MINUTE))


def test_settings_take_strings_and_reject_unknown_names():
    s = cfg("fixed_rate_overlap", 2, "coalesce_latest")
    assert (s.mode, s.missed) == (Mode.FIXED_RATE_OVERLAP, Missed.COALESCE_LATEST)
    assert s == ScheduleSettings(Mode.FIXED_RATE_OVERLAP, 2, Missed.COALESCE_LATEST, 0)
    assert f"{s.mode}" == "fixed_rate_overlap"
    with pytest.raises(ScheduleConfigError, match="mode must be one of fixed_delay, fixed_rate, "
                                                  "fixed_rate_overlap; got 'hourly'"):
        cfg("hourly")
    with pytest.raises(ScheduleConfigError, match="missed must be one of skip, coalesce_latest, "
                                                  "catch_up; got 'later'"):
        cfg(missed="later")


@pytest.mark.parametrize(("period", "shown"), [(ZERO, "0"), (timedelta(seconds=-5), "-5"),
                                               (timedelta(microseconds=-1), "-1e-06")])
def test_period_must_be_positive(period, shown):
    with pytest.raises(ScheduleConfigError, match=f"period must be positive; got {shown} seconds"):
        every(period)


def test_negative_active_is_refused():
    with pytest.raises(ValueError, match="cannot be negative; got -1"):
        decide_tick(cfg(), now=T0, next_tick_at=T0, active=-1, pending=(),
                    next_tick=every(MINUTE))


def test_a_cadence_that_does_not_advance_is_refused():
    with pytest.raises(ScheduleConfigError, match="strictly after"):
        decide_tick(cfg(), now=at(5), next_tick_at=T0, active=0, pending=(),
                    next_tick=lambda t: t)


# --- long outages stay bounded ---------------------------------------------------------------

def test_ten_years_of_seconds_with_a_fixed_period_is_counted_exactly_and_fast():
    now = T0 + timedelta(days=3652, seconds=0.5)
    began = time.perf_counter()
    d = decide_tick(cfg(missed="catch_up", max_pending=3), now=now, next_tick_at=T0, active=0,
                    pending=(), next_tick=every(timedelta(seconds=1)))
    assert time.perf_counter() - began < 0.1
    assert d.due == 3652 * 86400 + 1 and not d.truncated
    assert d.start == (T0,) and len(d.pending) == 3 and d.skips == d.due - 4
    assert d.next_tick_at == T0 + timedelta(days=3652, seconds=1)


def test_a_year_of_minutes_on_a_general_cadence_jumps_after_the_limit():
    now = T0 + timedelta(days=365, seconds=30)
    began = time.perf_counter()
    d = decide_tick(cfg(), now=now, next_tick_at=T0, active=0, pending=(),
                    next_tick=grid(MINUTE))
    assert time.perf_counter() - began < 2
    assert d.truncated and d.due == 365 * 1440 + 1  # a regular cadence is counted exactly
    assert d.start == (T0 + timedelta(days=365),) and d.skips == d.due - 1
    assert d.next_tick_at == T0 + timedelta(days=365, minutes=1)


@pytest.mark.parametrize("missed", ["skip", "coalesce_latest", "catch_up"])
def test_truncation_keeps_the_policy_and_conservation(monkeypatch, missed):
    monkeypatch.setattr(schedule, "MAX_TICKS_PER_PASS", 5)
    s = cfg(missed=missed, max_pending=2 if missed == "catch_up" else 0)
    d = decide_tick(s, now=at(100.5), next_tick_at=T0, active=1, pending=(),
                    next_tick=grid(MINUTE))
    assert d.truncated and d.due == 101 and d.next_tick_at == at(101)
    assert d.pending == {"skip": (), "coalesce_latest": (at(100),), "catch_up": ticks(0, 1)}[missed]
    assert d.due == len(d.start) + len(d.pending) + d.skips


def test_truncation_on_an_irregular_cadence_finds_the_latest_tick(monkeypatch):
    monkeypatch.setattr(schedule, "MAX_TICKS_PER_PASS", 5)
    now = at(10 * 60 + 17)  # 32 ticks due, the latest 10 h 15 min after T0
    d = decide_tick(cfg(), now=now, next_tick_at=T0, active=0, pending=(),
                    next_tick=quarter_past)
    assert len(due_ticks(T0, now, quarter_past)[0]) == 32
    assert d.truncated and d.start == (at(615),) and d.next_tick_at == at(620)
    # Past the limit the ticks are counted by the mean spacing of the first five: an estimate.
    assert abs(d.due - 32) <= 8 and d.skips == d.due - 1


def test_cron_cadence_fits():
    cron = pytest.importorskip("django_procedures.policy.cron")
    expr = cron.CronExpression.parse("*/15 * * * *")
    d = decide_tick(cfg(missed="coalesce_latest"), now=at(50), next_tick_at=T0, active=1,
                    pending=(), next_tick=lambda t: expr.next_after(t, "Europe/Berlin"))
    assert (d.pending, d.skips, d.next_tick_at) == (ticks(45), 3, at(60))


# --- properties ------------------------------------------------------------------------------

PERIODS = [timedelta(seconds=1), timedelta(seconds=90), MINUTE, timedelta(hours=1)]


@st.composite
def schedule_settings(draw) -> ScheduleSettings:
    mode = draw(st.sampled_from(Mode))
    conc = draw(st.integers(2, 5)) if mode is Mode.FIXED_RATE_OVERLAP else 1
    missed = draw(st.sampled_from(Missed))
    max_pending = draw(st.integers(1 if missed is Missed.CATCH_UP else 0, 5))
    return ScheduleSettings(mode, conc, missed, max_pending)


def pending_room(s: ScheduleSettings) -> int:
    if s.mode is Mode.FIXED_DELAY or s.missed is Missed.SKIP:
        return 0
    return 1 if s.missed is Missed.COALESCE_LATEST else s.max_pending


@dataclass(frozen=True)
class Case:
    s: ScheduleSettings
    period: timedelta
    cadence: Cadence
    now: datetime
    next_tick_at: datetime | None
    active: int
    pending: tuple[datetime, ...]

    def decide(self, **changes) -> TickDecision:
        args = dict(now=self.now, next_tick_at=self.next_tick_at, active=self.active,
                    pending=self.pending, next_tick=self.cadence) | changes
        return decide_tick(self.s, **args)


@st.composite
def cases(draw, consistent: bool = True) -> Case:
    s = draw(schedule_settings())
    period = draw(st.sampled_from(PERIODS))
    cadence = every(period) if draw(st.booleans()) else grid(period)
    steps = st.integers(-3, 40)
    offset = draw(st.one_of(steps.map(lambda k: period * k),
                            st.floats(-3, 40).map(lambda k: period * k)))
    next_tick_at = None if s.mode is Mode.FIXED_DELAY and draw(st.booleans()) else T0
    room = pending_room(s) if consistent else 6
    back = draw(st.lists(st.integers(1, 10), max_size=room, unique=True))
    pending = tuple(sorted(T0 - period * k for k in back))
    active = draw(st.integers(0, s.max_concurrency + 2))
    return Case(s, period, cadence, T0 + offset, next_tick_at, active, pending)


@given(cases())
def test_never_more_runs_than_slots(c):
    d = c.decide()
    if c.active >= c.s.max_concurrency:
        assert d.start == ()
    else:
        assert c.active + len(d.start) <= c.s.max_concurrency


@given(cases())
def test_pending_stays_within_the_policy(c):
    assert len(c.decide().pending) <= pending_room(c.s)


@given(cases(consistent=False))
def test_conservation(c):
    d = c.decide()
    due, following = due_ticks(c.next_tick_at, c.now, c.cadence)
    if not due or (c.s.mode is Mode.FIXED_DELAY and c.active >= 1):
        assert d == TickDecision(pending=c.pending, next_tick_at=c.next_tick_at)
        return
    assert d.due == (1 if c.s.mode is Mode.FIXED_DELAY else len(due))
    assert d.due + len(c.pending) == len(d.start) + len(d.pending) + d.skips
    assert d.skips >= 0 and d.drift == c.now - due[0] and not d.truncated
    handled = set(c.pending) | set(due[:d.due])
    chosen = d.start + d.pending
    assert len(set(chosen)) == len(chosen) and set(chosen) <= handled
    assert list(d.start) == sorted(d.start) and list(d.pending) == sorted(d.pending)
    if c.s.mode is Mode.FIXED_DELAY:
        assert d.next_tick_at is None and d.start == (c.next_tick_at,) and d.pending == ()
        return
    assert d.next_tick_at == following and d.next_tick_at > c.now
    if c.s.missed is Missed.CATCH_UP:
        assert all(a < b for a in d.start for b in d.pending), "catch_up starts oldest first"
        assert d.start + d.pending == (*c.pending, *due)[:len(d.start) + len(d.pending)]
    else:
        assert d.start in ((), (due[-1],)), "skip and coalesce_latest start the latest tick"
        assert d.pending in ((), (due[-1],)) and not (d.start and d.pending)


@given(cases())
def test_overlaps_count_runs_started_while_a_slot_is_held(c):
    d = c.decide()
    assert d.overlaps == sum(1 for i in range(len(d.start)) if c.active + i > 0)


@given(cases())
def test_a_second_pass_at_the_same_time_changes_nothing(c):
    d = c.decide()
    again = c.decide(next_tick_at=d.next_tick_at, pending=d.pending,
                     active=c.active + len(d.start))
    assert again == TickDecision(pending=d.pending, next_tick_at=d.next_tick_at)


@given(cases(consistent=False))
def test_a_fixed_period_counts_like_walking_it(c):
    walked = c.decide(next_tick=grid(c.period))
    assert c.decide(next_tick=every(c.period)) == walked


@given(cases(consistent=False))
def test_trigger_properties(c):
    d = decide_trigger(c.s, now=c.now, next_tick_at=c.next_tick_at, active=c.active,
                       pending=c.pending)
    assert d.next_tick_at == c.next_tick_at and d.due == 1
    assert 1 + len(c.pending) == len(d.start) + len(d.pending) + d.skips
    assert len(d.start) <= max(0, c.s.max_concurrency - c.active)
    assert set(d.start + d.pending) <= set(c.pending) | {c.now}


@given(schedule_settings(), st.integers(0, 6), st.lists(st.integers(1, 10), unique=True),
       st.booleans())
def test_finish_properties(s, active_after, back, enabled):
    pending = tuple(sorted(T0 - MINUTE * k for k in back))
    d = on_run_finished(s, active_after=active_after, pending=pending, enabled=enabled)
    assert d.start + d.pending == pending
    assert len(d.start) <= (max(0, s.max_concurrency - active_after) if enabled else 0)
    assert d.overlaps == sum(1 for i in range(len(d.start)) if active_after + i > 0)


@settings(deadline=None)
@given(schedule_settings(),
       st.lists(st.floats(0.1, 6), min_size=1, max_size=20),
       st.lists(st.floats(0, 30), min_size=1, max_size=40))
def test_simulated_schedule_loses_no_tick(s, run_minutes, passes):
    sim = Sim(s, lambda n: MINUTE * run_minutes[n % len(run_minutes)])
    for m in sorted(set(passes)):
        sim.tick(at(m))  # the simulator asserts slots, order and uniqueness as it goes
    if s.mode is Mode.FIXED_DELAY:
        assert sim.due == len(sim.started) and sim.skips == 0 and sim.pending == ()
    else:
        assert sim.due == (at(max(passes)) - T0) // MINUTE + 1
        assert sim.due == len(sim.started) + len(sim.pending) + sim.skips
        assert len(sim.pending) <= pending_room(s)


def test_every_is_a_cadence():
    assert every(MINUTE) == Every(MINUTE) and every(MINUTE)(T0) == at(1)
