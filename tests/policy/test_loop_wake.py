"""An event-loop claim's end wakes the main thread to claim again only when that can find something."""

import pytest

from django_procedures.policy.loop_wake import wake_after_loop_claim
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
