"""A parent that fails while children are still running ends with no pending children (found by the soak)."""

import pytest

from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from testproject.testapp.procedures import Leaf, Parent

pytestmark = pytest.mark.django_db
TYPES = [Parent.type_name, Leaf.type_name]


def take(limit=1):
    return claim("w", type_names=TYPES, limit=limit, lease_seconds=30)


def test_a_parent_failing_while_a_sibling_runs_cancels_it_and_waits_for_nothing():
    parent = Parent.submit({"fanout": 2, "failing": [0]})
    (p,) = take()
    execute(RunningClaim(p))  # spawns a failing leaf and a good one
    leaves = {c.state["n"]: c for c in take(limit=2)}  # both leaves are running
    execute(RunningClaim(leaves[0]))  # the failing leaf fails: the parent is ready at once
    (again,) = take()
    assert again.id == parent.id
    execute(RunningClaim(again))  # on_child_failed fails the parent: the running sibling is cancelled

    row = ProcedureRun.objects.get(id=parent.id)
    assert row.status == "rolled_back"
    assert ProcedureRun.objects.get(id=leaves[1].id).status == "cancelled"
    assert row.pending_children == 0
