"""Tests for django_procedures.policy.schedule (pure): settings that are refused, and long outages that stay
bounded (counted exactly with a fixed period, cut after the limit on a general cadence).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from django_procedures.policy import schedule
from django_procedures.policy.schedule import (
    Missed,
    Mode,
    ScheduleConfigError,
    ScheduleSettings,
    decide_tick,
    every,
)

from .schedule_sim import MINUTE, T0, ZERO, at, cfg, due_ticks, grid, quarter_past, ticks

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
