"""An event-loop claim's end wakes the main thread to claim again only when that can find something."""

import pytest

from django_procedures.policy.loop_wake import claim_for_loop, loop_recheck_in, wake_after_loop_claim
from django_procedures.runtime.lane import database_threads
from django_procedures.runtime.running import Outcome

QUIET = dict(last_claim_short=True, still_on_loop=10, has_parent=False, held_keys=False, held_limits=False)


@pytest.mark.parametrize("outcome", [Outcome.COMPLETED, Outcome.FAILED])
def test_a_final_end_after_a_short_claim_does_not_wake(outcome):
    assert not wake_after_loop_claim(outcome=outcome.value, **QUIET)


def test_after_a_full_claim_every_end_wakes():
    """More may be due than the loop had room for: a freed slot is claimed at once."""
    assert wake_after_loop_claim(outcome=Outcome.COMPLETED.value, **{**QUIET, "last_claim_short": False})


def test_the_last_claim_on_the_loop_ending_wakes():
    """So a --burst worker sees it holds nothing and exits."""
    assert wake_after_loop_claim(outcome=Outcome.COMPLETED.value, **{**QUIET, "still_on_loop": 0})


@pytest.mark.parametrize("outcome", [o for o in Outcome if o.value not in ("completed", "failed")])
def test_an_end_that_leaves_work_due_wakes(outcome):
    assert wake_after_loop_claim(outcome=outcome.value, **QUIET)


@pytest.mark.parametrize("what", ["has_parent", "held_keys", "held_limits"])
def test_an_end_that_frees_something_wakes(what):
    """A parent may be ready, a key or a limit slot free for a waiting run."""
    assert wake_after_loop_claim(outcome=Outcome.COMPLETED.value, **{**QUIET, what: True})


@pytest.mark.parametrize(("slots", "threads"), [(1, 4), (100, 4), (256, 4), (640, 10), (1000, 15), (100000, 16)])
def test_database_threads_follow_the_loop_size(slots, threads):
    assert database_threads(slots) == threads


@pytest.mark.parametrize(("short", "new", "passed", "claims"), [
    (False, False, False, True),  # the last claim filled the loop: more may be due
    (True, False, False, False),  # nothing was due for it, and nothing has changed since
    (True, True, False, True),  # a NOTIFY, a reconnect, a claim on the loop that ended
    (True, False, True, True),  # its next due time (or POLL_SECONDS) has come
])
def test_the_loop_is_claimed_for_again_only_when_something_can_be_due(short, new, passed, claims):
    assert claim_for_loop(last_claim_short=short, something_new=new, recheck_passed=passed) is claims


@pytest.mark.parametrize(("due_in", "seconds"), [
    (None, 1.0),  # nothing due: polled as a worker without LISTEN polls
    (0.25, 0.25),  # its next run falls due first
    (5.0, 1.0),  # never later than the poll
    (0.0, 1.0),  # due already (the threads' backlog, a row another transaction held): says nothing of the loop's
    (-3.0, 1.0),
])
def test_the_recheck_comes_at_the_next_due_time_and_at_most_the_poll_interval(due_in, seconds):
    assert loop_recheck_in(due_in=due_in, poll_seconds=1.0) == seconds
