"""Claiming ahead of the threads: only for short procedures, in batches, never past the limit."""

import pytest

from django_procedures.policy.prefetch import GIVE_BACK_SECONDS, WINDOW_SECONDS, Prefetch, stale, to_claim


def test_nothing_ahead_until_a_procedure_has_run():
    assert Prefetch(limit=32).ahead(4) == 0


def test_nothing_ahead_when_turned_off():
    p = Prefetch(limit=0)
    p.observe(0.001)
    assert p.ahead(4) == 0


def test_short_procedures_fill_the_window_up_to_the_limit():
    p = Prefetch(limit=32)
    p.observe(0.01)  # 4 threads finish 4 * 0.05 / 0.01 = 20 within the window
    assert p.ahead(4) == 20
    p = Prefetch(limit=32)
    p.observe(0.001)
    assert p.ahead(4) == 32


def test_slow_procedures_get_no_lookahead():
    p = Prefetch(limit=32)
    p.observe(WINDOW_SECONDS * 5)
    assert p.ahead(4) == 0


def test_the_average_follows_a_change_of_pace():
    p = Prefetch(limit=32)
    for _ in range(50):
        p.observe(0.001)
    assert p.ahead(4) == 32
    for _ in range(30):
        p.observe(1.0)  # the procedures became slow: the lookahead goes away
    assert p.ahead(4) == 0


@pytest.mark.parametrize(("held", "threads", "ahead", "expected"), [
    (0, 4, 0, 4),  # no lookahead: one claim per idle thread, as before
    (3, 4, 0, 1),
    (4, 4, 0, 0),
    (0, 4, 16, 20),  # an idle worker fills threads and lookahead at once
    (13, 4, 16, 0),  # more than half the lookahead in hand: wait
    (12, 4, 16, 8),  # down to half: top up in one batch
    (2, 4, 16, 18),
])
def test_claims_top_up_in_batches(held, threads, ahead, expected):
    assert to_claim(held, threads, ahead) == expected


def test_a_step_running_past_the_window_stops_the_lookahead_before_it_ends():
    p = Prefetch(limit=32)
    p.observe(0.001)
    assert p.ahead(4, running_for=0.002) == 32
    assert p.ahead(4, running_for=WINDOW_SECONDS * 5) == 0  # the average has not heard of it yet


def test_a_prefetched_procedure_goes_back_once_it_waited_too_long():
    assert not stale(GIVE_BACK_SECONDS / 2)
    assert stale(GIVE_BACK_SECONDS)
