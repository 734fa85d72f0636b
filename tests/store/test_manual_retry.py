"""A manual retry takes back what the failure's final transition gave up: the parent's count, the schedule's slot."""

from datetime import timedelta

import pytest

from django_procedures import get_handle, register_schedule, tick
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import schedules
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, Refuses, TolerantParent

pytestmark = pytest.mark.django_db


def take(*types, limit=1):
    return claim("w", type_names=[t.type_name for t in types], limit=limit, lease_seconds=30)


def test_a_child_of_a_finished_parent_is_refused_and_left_as_it_was():
    parent = Parent.submit({"fanout": 2, "failing": [0]})
    drain()
    leaf = ProcedureRun.objects.get(parent_id=parent.id, status="failed")
    with pytest.raises(InvalidOperation) as refused:
        get_handle(leaf.id).retry()
    assert str(refused.value) == (
        f"procedure {leaf.id} cannot be retried: its parent testapp.Parent {parent.id} is already rolled back, so "
        "nothing would wait for its result; retry the parent if it failed (its on_child_failed sees this child's "
        "failure again), or submit a new procedure")
    assert ProcedureRun.objects.get(id=leaf.id).status == "failed"


def test_a_child_whose_failure_the_parent_has_not_handled_yet_is_refused_until_the_parent_waits():
    parent = TolerantParent.submit({"fanout": 2, "failing": [0]})
    (p,) = take(TolerantParent)
    execute(RunningClaim(p))
    leaves = {c.state["n"]: c for c in take(Leaf, limit=2)}
    execute(RunningClaim(leaves[0]))  # fails: the parent is ready at once, its hook not run yet
    assert ProcedureRun.objects.get(id=parent.id).status == "ready"
    with pytest.raises(InvalidOperation, match=f"its parent testapp.TolerantParent {parent.id} is ready, and a "
                                               "child is retried only while its parent waits"):
        get_handle(leaves[0].id).retry()

    (again,) = take(TolerantParent)
    execute(RunningClaim(again))  # the hook handles it; the parent waits for the other leaf again
    assert ProcedureRun.objects.get(id=parent.id).pending_children == 1
    get_handle(leaves[0].id).retry(by="ops")
    row = ProcedureRun.objects.get(id=parent.id)
    assert (row.status, row.pending_children) == ("waiting", 2)
    assert ProcedureRun.objects.get(id=leaves[0].id).failure_handled is False  # a new failure is reported again


def test_a_retried_scheduled_run_holds_a_slot_again_and_waits_for_a_free_one():
    schedule, _ = register_schedule("refusing", Refuses, period=timedelta(hours=1))
    assert tick().started == 1
    drain()
    (first,) = ProcedureRun.objects.filter(schedule_id=schedule.id)
    assert first.status == "failed"
    assert schedules.trigger(schedule.id)["started"] == 1  # a second run holds the only slot
    with pytest.raises(InvalidOperation, match="its schedule 'refusing' has no free slot \\(1 of 1 runs active\\)"):
        get_handle(first.id).retry()

    drain()
    assert Schedule.objects.get(id=schedule.id).active_runs == 0
    get_handle(first.id).retry(by="ops")
    assert Schedule.objects.get(id=schedule.id).active_runs == 1  # the retried run holds the slot again
    drain()
    s = Schedule.objects.get(id=schedule.id)
    assert (s.active_runs, s.failures) == (0, 3)
