"""Tests for django_procedures.policy.schedule (pure: no Django, no database): the scenario tables, one
pass, a trigger, a run finishing.

The scenario tables walk schedules tick by tick and double as the documentation table
(``schedule_tables.py``): times are minutes after T0; "N tick" is a scheduling pass at minute N, "N finish T"
the run for tick T reaching a final status. Finishes are handled before a pass at the same instant.
Validation and long outages: ``test_schedule_validation.py``; properties: ``test_schedule_properties.py``;
the simulator: ``schedule_sim.py``.
"""

from __future__ import annotations

import pytest

from django_procedures.policy.schedule import (
    FinishDecision,
    ScheduleConfigError,
    TickDecision,
    decide_tick,
    decide_trigger,
    every,
    fixed_delay_next_tick,
    on_run_finished,
)

from .schedule_sim import MINUTE, ZERO, at, cfg, ticks, walk

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
