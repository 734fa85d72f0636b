"""A cancel that meets a suspension committing at that moment cancels the children it commits.

The interleaving is forced with row locks, as in test_final_races: the test's
transaction holds the suspending claim's lease row, so the suspension blocks
after its fenced write of the parent and the insert of its children, before its
commit; a cancel on a third connection then waits for the parent's row behind
it; the test lets go. Before the cancel locked the tree top-down and read each
level's children under their parents' locks, it read the subtree before taking
the locks and never again: the new children stayed ready and ran under a
cancelled parent.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_procedures.handle import get_handle
from django_procedures.models import Lease, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import Claim, claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent
from tests.store.test_final_races import InThread, wait_blocked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def cancel_during_suspension(suspending: Claim, cancelled_id: object) -> tuple[object, ...]:
    """Cancel ``cancelled_id`` while ``suspending`` has inserted its children and not committed; the cancelled ids."""
    with transaction.atomic():
        Lease.objects.select_for_update().get(procedure_id=suspending.id, token=suspending.lease_token)
        suspension = InThread(lambda: execute(RunningClaim(suspending)))
        wait_blocked(1, "the suspension to block on its lease row, its children inserted")
        cancel = InThread(lambda: get_handle(cancelled_id).cancel(by="ops"))
        wait_blocked(2, "the cancel to wait behind the suspension for the parent's row")
    suspension.join()
    return cancel.join().cancelled


def test_a_cancel_meeting_the_parents_suspension_cancels_the_children_it_commits():
    parent = Parent.submit({"fanout": 3})
    (suspending,) = claim("w", type_names=[Parent.type_name], lease_seconds=60)

    cancelled = cancel_during_suspension(suspending, parent.id)

    children = ProcedureRun.objects.filter(parent_id=parent.id)
    assert children.count() == 3  # the suspension committed first
    assert set(children.values_list("status", flat=True)) == {"cancelled"}
    assert set(cancelled) == {parent.id, *children.values_list("id", flat=True)}
    assert claim("w", type_names=[Leaf.type_name], limit=10, lease_seconds=60) == []
    assert drain().claimed == 0


def test_a_cancel_of_an_ancestor_meeting_a_descendants_suspension_cancels_the_grandchildren():
    root = Parent.submit({"depth": 2, "fanout": 1})
    execute(RunningClaim(claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=60)[0]))
    (suspending,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=60)  # the middle Parent

    cancelled = cancel_during_suspension(suspending, root.id)

    grandchildren = ProcedureRun.objects.filter(parent_id=suspending.id)
    assert grandchildren.count() == 1  # the middle Parent spawns as many leaves as the root's fanout
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"cancelled"}
    assert len(cancelled) == 3  # the root, the middle Parent and its leaf
    assert drain().claimed == 0
