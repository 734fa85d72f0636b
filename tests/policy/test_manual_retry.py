"""Whether a manual retry may take a failed child or a failed scheduled run out of its final status."""

import pytest

from django_procedures.policy.manual_retry import ParentView, child_refusal, slot_refusal


def parent(status: str, suspension: int = 1, waiting_for: str = "children") -> ParentView:
    return ParentView("P", "app.Parent", status, suspension, waiting_for)


@pytest.mark.parametrize(("view", "spawned_in", "expected"), [
    (parent("waiting"), 1, None),
    (parent("failed"), 1, "its parent app.Parent P is already failed, so nothing would wait for its result; "
                          "retry the parent if it failed"),
    (parent("rolled_back"), 1, "is already rolled back"),
    (parent("done"), 1, "is already done"),
    (parent("cancelled"), 1, "is already cancelled"),
    (parent("waiting", suspension=2), 1, "has moved on past the children this one belongs to (it is waiting)"),
    # Its children all final, it went on and sleeps: nothing waits for this child any more.
    (parent("waiting", waiting_for="timer"), 1, "has moved on past the children this one belongs to (it waits for "
                                                "a timer (it sleeps)), so nothing would wait for its result"),
    (parent("running", suspension=2), 1, "has moved on"),
    (parent("ready"), 1, "its parent app.Parent P is ready, and a child is retried only while its parent waits"),
    (parent("running"), 1, "is running, and a child is retried only while"),
    (parent("rolling_back"), 1, "is rolling back, and a child is retried only while"),
    (parent("retrying"), 1, "is retrying"),
])
def test_a_child_is_retried_only_while_its_parent_waits_on_its_suspension(view, spawned_in, expected):
    refusal = child_refusal(spawned_in, view)
    if expected is None:
        assert refusal is None
    else:
        assert expected in refusal


@pytest.mark.parametrize(("active", "limit", "refused"), [(0, 1, False), (1, 1, True), (1, 3, False), (3, 3, True)])
def test_a_scheduled_run_is_retried_only_into_a_free_slot(active, limit, refused):
    refusal = slot_refusal("nightly", active_runs=active, max_concurrency=limit)
    assert (refusal is not None) == refused
    if refused:
        assert f"its schedule 'nightly' has no free slot ({active} of {limit} runs active)" in refusal
