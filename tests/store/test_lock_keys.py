"""Lock keys in-process: exclusive and shared holders, fair queues, lending in a tree, deadlocks."""

import pytest

from django_procedures.models import KeyRequest, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.store.maintenance import maintain
from django_procedures.testing import drain
from testproject.testapp.procedures import KeyHolder, Leaf, Parent, ThreeSteps

pytestmark = pytest.mark.django_db
TYPES = [KeyHolder.type_name, ThreeSteps.type_name, Parent.type_name, Leaf.type_name]
X = [["tenant:1", "exclusive"]]
S = [["tenant:1", "shared"]]


def take(limit=1):
    return claim("w", type_names=TYPES, limit=limit, lease_seconds=30)


def test_an_exclusive_key_has_one_holder_and_the_waiter_stays_ready():
    first, second = KeyHolder.submit({"keys": X}), KeyHolder.submit({"keys": X})
    (held,) = take()
    assert held.id == first.id
    assert take() == []
    waiter = ProcedureRun.objects.get(id=second.id)
    assert (waiter.status, waiter.waiting_for_keys, waiter.failures) == ("ready", True, 0)
    execute(RunningClaim(held))  # finishing releases the key and wakes the waiter
    assert not KeyRequest.objects.filter(procedure_id=first.id).exists()
    assert not ProcedureRun.objects.get(id=second.id).waiting_for_keys
    assert [c.id for c in take()] == [second.id]


def test_shared_holders_hold_together():
    handles = [KeyHolder.submit({"keys": S}) for _ in range(3)]
    assert sorted(c.id for c in take(limit=3)) == sorted(h.id for h in handles)


def test_unrelated_work_is_claimed_while_a_key_is_busy():
    KeyHolder.submit({"keys": X})
    KeyHolder.submit({"keys": X})
    other = ThreeSteps.submit()
    take()
    assert [c.id for c in take()] == [other.id]  # the blocked waiter does not use up the batch


def test_the_oldest_waiter_gets_the_key_first():
    holder = KeyHolder.submit({"keys": X})
    exclusive_waiter = KeyHolder.submit({"keys": X})
    shared_waiter = KeyHolder.submit({"keys": S})
    (held,) = take()
    assert take(limit=2) == []
    execute(RunningClaim(held))
    assert [c.id for c in take(limit=2)] == [exclusive_waiter.id]  # the younger shared waiter waits its turn
    assert holder.refresh().status == "done"
    assert ProcedureRun.objects.get(id=shared_waiter.id).waiting_for_keys


def test_keys_are_kept_while_waiting_for_children_and_lent_to_them():
    parent = Parent.submit({"fanout": 3, "keys": X, "child_keys": X})
    outsider = KeyHolder.submit({"keys": S})
    drain()
    assert parent.refresh().status == "done"
    assert outsider.refresh().status == "done"
    run = ProcedureRun.objects.get(id=parent.id)
    assert not run.keys_held and not KeyRequest.objects.exists()


def test_an_outsider_waits_while_a_parent_holds_the_key_through_its_children():
    parent = Parent.submit({"fanout": 1, "keys": X})
    (p,) = take()
    execute(RunningClaim(p))  # suspended, still holding tenant:1
    outsider = KeyHolder.submit({"keys": X})
    claimed = take(limit=5)
    assert outsider.id not in [c.id for c in claimed]  # only the child (no keys) was claimed
    for c in claimed:
        execute(RunningClaim(c))
    drain()
    assert parent.refresh().status == "done" and outsider.refresh().status == "done"


def test_a_descendant_cannot_upgrade_a_lent_shared_key_while_outsiders_share_it():
    Parent.submit({"fanout": 1, "keys": S, "child_keys": X})
    outsider = KeyHolder.submit({"keys": S, "hold": 0})
    claimed = take(limit=2)
    assert len(claimed) == 2  # the parent and the outsider share tenant:1
    parent_claim = next(c for c in claimed if c.type_name == Parent.type_name)
    execute(RunningClaim(parent_claim))
    assert [c.type_name for c in take()] == []  # the child wants it exclusively; the outsider still shares it
    execute(RunningClaim(next(c for c in claimed if c.id == outsider.id)))
    drain()
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}


def test_a_cross_tree_deadlock_fails_the_younger_tree():
    older = Parent.submit({"fanout": 1, "keys": [["K", "exclusive"]], "child_keys": [["L", "exclusive"]]})
    younger = Parent.submit({"fanout": 1, "keys": [["L", "exclusive"]], "child_keys": [["K", "exclusive"]]})
    for c in take(limit=2):
        execute(RunningClaim(c))  # each parent holds its key and waits for a child that needs the other's
    assert take(limit=2) == []
    report = maintain()
    assert report.deadlocks == 1
    drain()
    young = ProcedureRun.objects.get(id=younger.id)
    assert young.status == "rolled_back"
    young_child = ProcedureRun.objects.get(parent_id=younger.id)
    assert young_child.status == "failed"
    assert "lock key deadlock" in young_child.error
    assert str(older.id) in young_child.error and str(younger.id) in young_child.error
    assert "'K'" in young_child.error and "'L'" in young_child.error
    assert older.refresh().status == "done"
