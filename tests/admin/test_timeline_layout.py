"""The tree timeline's layout, without a database: segments from times, their places on the axis, the ticks."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.admin.timeline_layout import MIN_BAR, Attempt, Axis, Member, lay_out, segments, ticks

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(index, status, start, end, n=1, name="step"):
    return Attempt(index, name, n, status, at(start), None if end is None else at(end))


def member(*attempts, status="done", created=0.0, finished=None, children=False, retried=None):
    return Member("id", "T id", 0, status, at(created), tuple(attempts), children,
                  None if finished is None else at(finished), retried_at=None if retried is None else at(retried))


def kinds(segs):
    return [(s.kind, (s.start - T0).total_seconds(), (s.end - T0).total_seconds()) for s in segs]


@pytest.mark.parametrize(("share", "x"), [(-1, 100), (0, 100), (25, 200), (50, 300), (100, 500), (200, 500)])
def test_the_axis_maps_times_linearly_and_clamps_to_its_ends(share, x):
    axis = Axis(at(0), at(100), x0=100, width=400)
    assert axis.x(at(share)) == x


def test_a_bar_keeps_a_minimum_width_and_never_passes_the_right_end():
    axis = Axis(at(0), at(100), x0=0, width=1000)
    assert axis.place(at(10), at(30)) == (100, 200)
    assert axis.place(at(50), at(50.0001), MIN_BAR) == (500, MIN_BAR)
    assert axis.place(at(100), at(100), MIN_BAR) == (1000 - MIN_BAR, MIN_BAR)


def test_a_clean_run_is_queued_then_its_steps():
    segs = segments(member(attempt(0, "done", 2, 3), attempt(1, "done", 3, 5), finished=5), now=at(60))
    assert kinds(segs) == [("queued", 0, 2), ("done", 2, 3), ("done", 3, 5)]


def test_a_failed_attempt_is_marked_and_followed_by_a_retry_gap():
    segs = segments(member(attempt(0, "failed", 1, 2, n=1), attempt(0, "lost", 6, 7, n=2),
                           attempt(0, "done", 20, 21, n=3), finished=21), now=at(60))
    assert kinds(segs) == [("queued", 0, 1), ("failed", 1, 2), ("retry", 2, 6), ("lost", 6, 7), ("retry", 7, 20),
                           ("done", 20, 21)]
    assert segs[1].attempt.attempt == 1 and segs[5].attempt.attempt == 3


def test_time_failed_for_good_until_a_manual_retry_is_its_own_kind_not_a_retry_wait():
    # Failed at 2 with no automatic retry left; an operator retried it at 300; claimed at 301.
    segs = segments(member(attempt(0, "failed", 1, 2, n=1), attempt(0, "done", 301, 302, n=2), finished=302,
                           retried=300), now=at(400))
    assert kinds(segs) == [("queued", 0, 1), ("failed", 1, 2), ("manual", 2, 300), ("queued", 300, 301),
                           ("done", 301, 302)]


def test_a_procedure_retried_by_an_operator_and_not_claimed_yet_shows_the_wait_then_queued():
    segs = segments(member(attempt(0, "failed", 1, 2), status="ready", finished=None, retried=300), now=at(310))
    assert kinds(segs) == [("queued", 0, 1), ("failed", 1, 2), ("manual", 2, 300), ("queued", 300, 310)]


def test_automatic_retries_before_a_manual_one_stay_retry_waits():
    segs = segments(member(attempt(0, "failed", 1, 2, n=1), attempt(0, "failed", 5, 6, n=2),
                           attempt(0, "done", 100, 101, n=3), finished=101, retried=90), now=at(200))
    assert kinds(segs) == [("queued", 0, 1), ("failed", 1, 2), ("retry", 2, 5), ("failed", 5, 6), ("manual", 6, 90),
                           ("queued", 90, 100), ("done", 100, 101)]


def test_a_parent_waits_between_spawning_and_its_next_step():
    segs = segments(member(attempt(0, "done", 1, 2), attempt(1, "done", 30, 31), finished=31, children=True),
                    now=at(60))
    assert kinds(segs) == [("queued", 0, 1), ("done", 1, 2), ("waiting", 2, 30), ("done", 30, 31)]


@pytest.mark.parametrize(("status", "tail"), [("waiting", "waiting"), ("retrying", "retry"), ("ready", "queued")])
def test_an_unfinished_member_is_drawn_up_to_now(status, tail):
    last = "failed" if status == "retrying" else "done"
    segs = segments(member(attempt(0, last, 1, 2), status=status, children=status == "waiting"), now=at(50))
    assert kinds(segs)[-1] == (tail, 2, 50)


def test_a_step_in_flight_runs_to_now_and_nothing_follows_it():
    segs = segments(member(attempt(0, "done", 1, 2), attempt(1, "running", 3, None), status="running"), now=at(9))
    assert kinds(segs) == [("queued", 0, 1), ("done", 1, 2), ("queued", 2, 3), ("running", 3, 9)]


def test_a_member_never_claimed_is_one_queued_gap():
    assert kinds(segments(member(status="ready", created=5), now=at(8))) == [("queued", 5, 8)]
    assert kinds(segments(member(status="cancelled", created=5, finished=6), now=at(8))) == []


def test_lanes_share_one_axis_from_the_first_creation_to_the_last_end():
    root = Member("r", "Root r", 0, "done", at(0), (attempt(0, "done", 0, 1), attempt(1, "done", 9, 10)), True, at(10))
    child = Member("c", "Child c", 1, "done", at(1), (attempt(0, "failed", 2, 3), attempt(0, "done", 5, 9, n=2)),
                   False, at(9))
    axis, lanes = lay_out([root, child], now=at(100), x0=200, width=1000)
    assert (axis.start, axis.end) == (at(0), at(10))
    child_bars = [(p.segment.kind, p.x, p.width) for p in lanes[1].placed]
    assert child_bars == [("queued", 300, 100), ("failed", 400, 100), ("retry", 500, 200), ("done", 700, 400)]
    assert [p.segment.kind for p in lanes[0].placed] == ["done", "waiting", "done"]


def test_an_unfinished_tree_reaches_now():
    running = Member("r", "R", 0, "running", at(0), (attempt(0, "running", 1, None),))
    axis, lanes = lay_out([running], now=at(20), x0=0, width=200)
    assert axis.end == at(20)
    assert [(p.segment.kind, p.x, p.width) for p in lanes[0].placed] == [("queued", 0, 10), ("running", 10, 190)]


@pytest.mark.parametrize(("seconds", "spacing"), [(0.05, 0.01), (1, 0.2), (60, 10), (3600, 600), (86400 * 3, 43200)])
def test_ticks_fall_on_round_spacings(seconds, spacing):
    found = ticks(Axis(at(0), at(seconds), 0, 800), most=8)
    offsets = [o for _, o in found]
    assert offsets[0] == 0 and len(found) <= 9
    assert offsets[1] == pytest.approx(spacing)
    assert found[-1][0] <= 800


@pytest.mark.parametrize(("waiting_for", "tail"), [("timer", "sleep"), ("event", "event"), ("children", "waiting")])
def test_a_sleep_and_a_wait_for_an_event_are_gaps_of_their_own_kind(waiting_for, tail):
    waiting = Member("id", "T id", 0, "waiting", at(0), (attempt(0, "done", 1, 2),), waiting_for == "children",
                     waiting_for=waiting_for)
    assert kinds(segments(waiting, now=at(50))) == [("queued", 0, 1), ("done", 1, 2), (tail, 2, 50)]
