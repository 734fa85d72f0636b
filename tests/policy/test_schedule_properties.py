"""Properties of django_procedures.policy.schedule (pure), checked with Hypothesis against the simulator of
``schedule_sim.py``: the slot bound, pending within the policy, conservation of ticks, idempotent passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from django_procedures.policy.schedule import (
    Cadence,
    Every,
    Missed,
    Mode,
    ScheduleSettings,
    TickDecision,
    decide_tick,
    decide_trigger,
    every,
    on_run_finished,
)

from .schedule_sim import MINUTE, T0, Sim, at, due_ticks, grid

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
