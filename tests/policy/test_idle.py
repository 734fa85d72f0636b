"""The idle worker's decisions: how long it waits with nothing to claim, and when a ``--burst`` worker exits."""

from __future__ import annotations

from django_procedures.policy.idle import burst_done, idle_seconds


def test_with_nothing_due_it_waits_for_its_next_chore():
    assert idle_seconds(due_in=None, chore_in=5.0, burst_poll=None) == 5.0


def test_a_due_time_or_a_burst_poll_before_the_chore_cuts_the_wait():
    assert idle_seconds(due_in=1.5, chore_in=5.0, burst_poll=None) == 1.5
    assert idle_seconds(due_in=None, chore_in=5.0, burst_poll=0.5) == 0.5
    assert idle_seconds(due_in=3.0, chore_in=2.0, burst_poll=4.0) == 2.0


def test_a_wait_already_over_is_no_wait():
    assert idle_seconds(due_in=-2.0, chore_in=5.0, burst_poll=None) == 0.0
    assert idle_seconds(due_in=None, chore_in=-1.0, burst_poll=None) == 0.0


def test_a_burst_worker_exits_only_with_nothing_held_nothing_due_soon_and_no_limited_work_with_room():
    assert burst_done(held=0, due_in=None, burst_wait=1.0, limited_ready=False)
    assert burst_done(held=0, due_in=1.5, burst_wait=1.0, limited_ready=False)
    assert not burst_done(held=1, due_in=None, burst_wait=1.0, limited_ready=False)
    assert not burst_done(held=0, due_in=1.0, burst_wait=1.0, limited_ready=False)  # due within the wait
    assert not burst_done(held=0, due_in=-5.0, burst_wait=1.0, limited_ready=False)  # due already
    assert not burst_done(held=0, due_in=None, burst_wait=1.0, limited_ready=True)
