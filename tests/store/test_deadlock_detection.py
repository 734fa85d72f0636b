"""The deadlock detector fails a tree only for a cycle that exists (found by the soak: trees failed for waiting).

The detector read the waiting requests, then (in a later statement) every
request on their keys. A child's request claimed in between was read without
its parent, so the key its parent lends it looked held against it by an
outsider waiting for the same key: tree A "waited" behind tree B, B behind A.
"""

import pytest
from django.db import connection

from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import locks
from django_procedures.store.claim import claim
from django_procedures.store.maintenance import maintain
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, Spawner

pytestmark = pytest.mark.django_db
TYPES = [Parent.type_name, Leaf.type_name, Spawner.type_name]
K = [["K", "exclusive"]]


def take(limit=1):
    return claim("w", type_names=TYPES, limit=limit, lease_seconds=30)


class AfterFirstKeyRead:
    """Runs ``between`` once, just before the statement that follows the first read of the key requests
    (as a claim committing on another connection at that moment would be seen), or at exit if none follows."""

    def __init__(self, between):
        self.between, self.armed, self.done = between, False, False

    def __call__(self, execute_sql, sql, params, many, context):
        if self.armed and not self.done:
            self.done = True
            self.between()
        result = execute_sql(sql, params, many, context)
        if not self.done and "keyrequest" in sql.lower():
            self.armed = True
        return result

    def __enter__(self):
        self.wrapper = connection.execute_wrapper(self)
        self.wrapper.__enter__()
        return self

    def __exit__(self, *exc):
        self.wrapper.__exit__(*exc)
        if not self.done:
            self.done = True
            self.between()


def test_a_child_claimed_while_the_detector_reads_is_not_a_cycle():
    holder = Parent.submit({"fanout": 2, "keys": K, "child_keys": K})
    (h,) = take()
    outsider = Parent.submit({"fanout": 1, "keys": K})
    assert take() == []  # the outsider waits for K behind the holder's tree
    execute(RunningClaim(h))  # the holder keeps K and spawns two leaves it lends K to

    leaves = []

    def leaves_claimed():  # one leaf takes the lent K, its sibling waits behind it, both inside the tree
        leaves.extend(take(limit=2))

    with AfterFirstKeyRead(leaves_claimed):
        found = locks.deadlocks()
    assert [c.type_name for c in leaves] == [Leaf.type_name]
    assert found == []
    assert locks.deadlocks() == []
    assert maintain().deadlocks == 0
    execute(RunningClaim(leaves[0]))
    drain()
    assert holder.refresh().status == "done"
    assert outsider.refresh().status == "done"
    assert not ProcedureRun.objects.filter(error__contains="deadlock").exists()


def test_a_tangle_of_cycles_loses_one_tree_per_pass():
    # A (oldest) and B wait for each other, and so do B and C: one tangle. A pass fails the younger tree of
    # one cycle; failing B ends both, failing C leaves A and B for the next pass. The oldest tree finishes.
    a = Parent.submit({"fanout": 1, "keys": [["K", "exclusive"]], "child_keys": [["L", "exclusive"]]})
    b = Parent.submit({"fanout": 1, "keys": [["L", "exclusive"], ["M", "exclusive"]],
                       "child_keys": [["K", "exclusive"], ["N", "exclusive"]]})
    c = Parent.submit({"fanout": 1, "keys": [["N", "exclusive"]], "child_keys": [["M", "exclusive"]]})
    for claimed in take(limit=3):
        execute(RunningClaim(claimed))  # each parent holds its keys and spawns a child needing others'
    assert take(limit=3) == []
    assert len(locks.deadlocks()) == 1
    assert maintain().deadlocks == 1
    drain()
    assert b.refresh().status == "rolled_back"
    assert a.refresh().status == "done"
    assert c.refresh().status in ("done", "rolled_back")


def test_trees_waiting_behind_each_others_running_leaves_are_not_deadlocked():
    # Each tree's waiting leaf is behind the other tree's running leaf; those finish and release their keys.
    def tree(held, wanted):
        return Spawner.submit({"children": [{"state": {"keys": [[held, "exclusive"]]}, "priority": 10},
                                            {"state": {"keys": [[wanted, "exclusive"]]}}]})

    a, b = tree("K", "L"), tree("L", "K")
    for spawner in take(limit=2):
        execute(RunningClaim(spawner))
    running = take(limit=2)
    assert ProcedureRun.objects.filter(id__in=[c.id for c in running], priority=10).count() == 2
    assert take(limit=2) == []  # the other two leaves wait, each behind the other tree's running leaf
    assert ProcedureRun.objects.filter(waiting_for_keys=True).count() == 2
    assert locks.deadlocks() == []
    assert maintain().deadlocks == 0
    for c in running:
        execute(RunningClaim(c))
    drain()
    assert (a.refresh().status, b.refresh().status) == ("done", "done")
