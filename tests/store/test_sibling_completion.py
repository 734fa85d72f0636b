"""Children ending ``done`` never queue on their parent's row; the last one wakes the parent.

Each test forces one interleaving with row locks, as in ``test_final_races``:
the test's transaction holds a row another transaction needs, and transactions
run on threads with connections of their own. Before, every child's final
transaction locked the parent row first and updated its count, so siblings
finishing together waited for each other's whole transaction, commit included.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import db, transitions
from django_procedures.store.claim import claim
from django_procedures.store.fence import StepRecord
from django_procedures.store.maintenance import maintain
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent
from tests.runtime.processes import wait_for
from tests.store.test_final_races import InThread, wait_blocked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def suspended_parent(fanout: int):
    """A Parent that spawned ``fanout`` leaves and waits; its claim is done with."""
    handle = Parent.submit({"fanout": fanout})
    (p,) = claim("w", type_names=[Parent.type_name], lease_seconds=60)
    assert execute(RunningClaim(p)) == "suspended"
    return handle


def claim_leaves(count: int):
    claims = claim("w", type_names=[Leaf.type_name], limit=count, lease_seconds=60)
    assert len(claims) == count
    return claims


def status(pid) -> str:
    return ProcedureRun.objects.values_list("status", flat=True).get(id=pid)


def test_a_child_ending_done_does_not_wait_for_a_siblings_final_transaction():
    handle = suspended_parent(3)
    first, second, third = claim_leaves(3)

    with transaction.atomic():
        # The first child's final transaction has written its row and blocks on its lease row (held here).
        Lease.objects.select_for_update().get(procedure_id=first.id, token=first.lease_token)
        blocked = InThread(lambda: execute(RunningClaim(first)))
        wait_blocked(1, "the first child's final transaction to block on its lease row")
        assert InThread(lambda: execute(RunningClaim(second))).join() == "completed"
        assert status(handle.id) == "waiting"  # the third child has not run
        # The last to run finds its one unfinished sibling inside its final transaction: it wakes the parent,
        # which, resumed, waits for that transaction before it takes stock.
        assert InThread(lambda: execute(RunningClaim(third))).join() == "completed"
        assert status(handle.id) == "ready"
        (parent,) = InThread(lambda: claim("w", type_names=[Parent.type_name], lease_seconds=60)).join()
        resuming = InThread(lambda: execute(RunningClaim(parent)))
        wait_blocked(2, "the resumed parent to wait for the first child's final transaction")
    assert blocked.join() == "completed"
    assert resuming.join() == "completed"

    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.status, row.output, row.pending_children) == ("done", 0 + 2 + 4, 0)
    assert row.state["seen"] == [["done", 0], ["done", 2], ["done", 4]]
    assert Step.objects.filter(procedure_id=handle.id, name="collect").count() == 1


def test_the_last_child_commits_while_its_parents_row_is_locked_and_wakes_it_after():
    handle = suspended_parent(2)
    first, last = claim_leaves(2)
    assert execute(RunningClaim(first)) == "completed"
    assert status(handle.id) == "waiting"

    with transaction.atomic():
        ProcedureRun.objects.select_for_update().get(id=handle.id)  # as a handle's wait() or a retry might
        finishing = InThread(lambda: execute(RunningClaim(last)))
        # Its final transaction did not wait for the parent's row; the wake-up after its commit does.
        wait_for(lambda: status(last.id) == "done", timeout=60, what="the last child to commit")
        wait_blocked(1, "the wake-up after the commit to wait for the parent's row")
        assert status(handle.id) == "waiting"
    assert finishing.join() == "completed"
    assert status(handle.id) == "ready"
    drain()
    assert ProcedureRun.objects.get(id=handle.id).output == 0 + 2


def test_a_parent_left_waiting_after_its_children_finished_is_woken_by_the_sweep():
    """A worker lost between the last child's commit and the parent's wake-up leaves the parent waiting."""
    handle = suspended_parent(2)
    ProcedureRun._writer.filter(parent_id=handle.id).update(status="done", output=0)
    assert status(handle.id) == "waiting"

    assert maintain().woken == 1
    assert (status(handle.id), ProcedureRun.objects.get(id=handle.id).pending_children) == ("ready", 0)
    assert maintain().woken == 0
    drain()
    assert status(handle.id) == "done"


class Statements:
    """Counts the statements this thread's connection sends, the server-bound hot ones included."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        raw_execute = db._BoundCursor.execute

        def bound(cursor, sql, params):
            self.sent.append(sql)
            raw_execute(cursor, sql, params)

        monkeypatch.setattr(db._BoundCursor, "execute", bound)

    def __call__(self, execute, sql, params, many, context):
        self.sent.append(sql)
        return execute(sql, params, many, context)


def complete(leaf, statements: Statements) -> int:
    """Finish ``leaf`` ``done`` (its final transaction alone); how many statements that sent."""
    now = leaf.run_at
    before = len(statements.sent)
    with connection.execute_wrapper(statements):
        transitions.complete(leaf, [StepRecord(0, "work", 1, now, now)], leaf.state, 0)
    return len(statements.sent) - before


def test_a_child_ending_done_sends_two_statements_and_the_last_one_three_more(monkeypatch):
    handle = suspended_parent(3)
    first, second, last = claim_leaves(3)
    statements = Statements(monkeypatch)

    # Its own final write (the run, its Step row, its lease: one statement) and the look for an unfinished
    # sibling. Before, four: the parent's row lock, the write, the parent's count read and its update.
    assert complete(first, statements) == 2
    assert complete(second, statements) == 2
    # The last one also takes the parent's row, makes it ready and notifies the workers.
    assert complete(last, statements) == 5
    assert status(handle.id) == "ready"
