"""Crash safety of trees: worker processes killed with SIGKILL at each place of a tree's life.

Crash tests kill workers with SIGKILL at three places of a tree's life:

* the parent's suspending step: (1) while the step sleeps after its Effect
  row and before it returns ``Status.suspended`` (as a slow step would);
  (2) inside the very transaction that inserts the children: the test holds a
  row lock on the parent's open ``Lease`` row, which that transaction must
  close, so it blocks after the parent row and the children rows were written,
  and the worker is killed while it is blocked there;
* a child in the middle of its step;
* the last child's final transition, caught by the same trick: the test
  holds a row lock on the child's open ``Lease`` row (which its final
  transaction must close), so the transaction is open and blocked when its
  worker is killed, after it marked the child done and wrote its ``Step`` row
  (where exactly it blocks is this implementation's statement order; that it
  blocks before committing is not); or on the parent row, which the child's
  final transaction passes by and the parent's wake-up after its commit waits
  for: killed there, the parent is left waiting with every child done, for the
  sweep to wake.

Also: children finishing together wake their parents once, and a parent
killed during its rollback is rolled back once.

Conventions and helpers: ``tests/runtime/trees.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import transaction

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.procedures import Spawner
from tests.runs import lease_outcomes, open_leases, status_of, steps
from tests.runtime.processes import read_pid, wait_for
from tests.runtime.trees import (
    LEASE,
    WAIT,
    assert_tree_finished,
    blocked_by_this_transaction,
    children,
    effects,
    kill,
    no_step_committed_twice,
    no_tracebacks,
    start_survivors,
    start_victim,
    wait_final,
    worker_with_pid,
)

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def _leaves(count: int, **extra) -> list[dict]:
    return [{"state": {"n": n, **extra}} for n in range(count)]


@pytest.mark.parametrize("where", ["sleeping-before-it-returns-suspended", "inside-the-suspension-transaction"])
def test_sigkill_in_the_parents_suspending_step(workers, tmp_path, where):
    marker = tmp_path / "p"
    gate = tmp_path / "gate"
    if where == "sleeping-before-it-returns-suspended":
        handle = Spawner.submit({"marker": str(marker), "sleep": {"spawn": 60}, "children": _leaves(3)})
        start_victim(workers)
        victim = worker_with_pid(workers, wait_for(lambda: read_pid(Path(f"{marker}.spawn")), timeout=WAIT,
                                                   workers=workers, what="the spawn step to start"))
        kill(victim)
    else:
        handle = Spawner.submit({"marker": str(marker), "gate": str(gate), "children": _leaves(3)})
        start_victim(workers)
        wait_for(lambda: Lease.objects.filter(procedure_id=handle.id).exists(), timeout=WAIT, workers=workers,
                 what="the parent to be claimed")
        with transaction.atomic():
            # The suspension must close this lease in the transaction that inserts the children.
            Lease.objects.select_for_update().get(procedure_id=handle.id)
            gate.touch()
            wait_for(blocked_by_this_transaction, timeout=WAIT, workers=workers,
                     what="the suspension transaction to block on the parent's lease row")
            # (In this implementation it has written the parent row and the children by now, uncommitted.)
            assert ProcedureRun.objects.filter(parent_id=handle.id).count() == 0
            victim = worker_with_pid(workers, read_pid(Path(f"{marker}.spawn")))
            kill(victim)
    survivors = start_survivors(workers)

    wait_final(handle.id, timeout=WAIT, workers=workers)
    assert_tree_finished(handle.id, spawned=3, output=0 + 2 + 4)
    assert steps(handle.id) == [(0, "spawn", 1, "lost"), (0, "spawn", 2, "done"), (1, "collect", 1, "done")]
    assert lease_outcomes(handle.id) == ["expired", "completed", "completed"]
    assert {c.spawned_in for c in children(handle.id)} == {1}  # one suspension, one set of children
    no_tracebacks(survivors)


def test_sigkill_of_a_child_mid_step(workers, tmp_path):
    """The victim's two threads take two of the three children (which two is the claim's order among equals; the
    third, claimed ahead, may be given back): the first one seen in its step is the one whose attempt is lost."""
    flag = tmp_path / "flag"
    handle = Spawner.submit({"children": [
        {"state": {"n": n, "marker": str(tmp_path / f"c{n}"), "until": {"work": str(flag)}}} for n in range(3)]})
    start_victim(workers)

    def a_child_in_its_step():
        return next(((n, pid) for n in range(3) if (pid := read_pid(tmp_path / f"c{n}.work"))), None)

    n, pid = wait_for(a_child_in_its_step, timeout=WAIT, workers=workers, what="a child to be in its step")
    victim = worker_with_pid(workers, pid)
    kill(victim)
    flag.touch()  # the children's next attempts go straight through
    survivors = start_survivors(workers)

    wait_final(handle.id, timeout=WAIT, workers=workers)
    kids = assert_tree_finished(handle.id, spawned=3, output=0 + 2 + 4)
    assert steps(kids[n].id) == [(0, "work", 1, "lost"), (0, "work", 2, "done")]
    assert lease_outcomes(kids[n].id) == ["expired", "completed"]
    lost = Step.objects.filter(status="lost").values_list("procedure_id", flat=True)
    assert set(lost) <= {k.id for k in kids}  # only children the victim ran lost an attempt
    assert steps(handle.id) == [(0, "spawn", 1, "done"), (1, "collect", 1, "done")]
    no_tracebacks(survivors)


@pytest.mark.parametrize("lock", ["parent-row", "child-lease-row"])
def test_sigkill_in_the_last_childs_final_transition(workers, tmp_path, lock):
    """The last child's final transition is caught open: blocked on a row lock the test holds, then killed.

    ``parent-row``: a child ending done does not wait for its parent's row; the
    wake-up after its commit does, and is killed there: the child is done, the
    parent still waiting, and the survivors' sweep wakes it.
    ``child-lease-row``: the transaction must close the child's lease, so it
    waits for that row after it has marked the child done and written its
    ``Step`` row; nothing of it commits.
    """
    flag, marker = tmp_path / "flag", tmp_path / "last"
    last = {"state": {"n": 3, "marker": str(marker), "flag": str(flag)}, "gated": True}
    handle = Spawner.submit({"children": [*_leaves(3), last]})
    start_victim(workers)
    wait_for(lambda: ProcedureRun.objects.filter(parent_id=handle.id, status="done").count() == 3
             and read_pid(marker), timeout=WAIT, workers=workers,
             what="three children done and the last one inside its step")
    assert status_of(handle.id) == "waiting"
    last_id = ProcedureRun.objects.get(parent_id=handle.id, position=3).id
    victim = worker_with_pid(workers, read_pid(marker))

    with transaction.atomic():
        if lock == "parent-row":
            ProcedureRun.objects.select_for_update().get(id=handle.id)
        else:
            Lease.objects.select_for_update().get(procedure_id=last_id)
        flag.touch()
        wait_for(blocked_by_this_transaction, timeout=WAIT, workers=workers,
                 what="the last child's final transition to block on the locked row")
        kill(victim)
    if lock == "parent-row":
        assert status_of(last_id) == "done" and status_of(handle.id) == "waiting"
    else:  # nothing committed (the child may already be back to ready if its lease expired)
        assert status_of(last_id) in ("running", "ready") and status_of(handle.id) == "waiting"
    survivors = start_survivors(workers)

    wait_final(handle.id, timeout=WAIT, workers=workers)
    assert_tree_finished(handle.id, spawned=4, output=0 + 2 + 4 + 6)
    if lock == "parent-row":
        assert (steps(last_id), lease_outcomes(last_id)) == ([(0, "work", 1, "done")], ["completed"])
    else:
        assert steps(last_id) == [(0, "work", 1, "lost"), (0, "work", 2, "done")]
        assert lease_outcomes(last_id) == ["expired", "completed"]
    assert steps(handle.id) == [(0, "spawn", 1, "done"), (1, "collect", 1, "done")]
    assert lease_outcomes(handle.id) == ["completed", "completed"]
    no_tracebacks(survivors)


def test_children_finishing_together_wake_their_parents_themselves_once(workers):
    """Four parents' twenty children each finish on 2 workers x 4 threads, siblings side by side.

    The sweep (the safety net that would also wake a parent whose children are
    all final) is slowed down past the test's deadline: every parent is woken
    by its own children, and resumes exactly once.
    """
    handles = [Spawner.submit({"children": _leaves(20)}) for _ in range(4)]
    pool = [workers.start("--concurrency", "4", lease_seconds=LEASE, procedures={"SWEEP_SECONDS": 3600})
            for _ in range(2)]
    for handle in handles:
        wait_final(handle.id, timeout=WAIT, workers=workers)
    for handle in handles:
        assert_tree_finished(handle.id, spawned=20, output=sum(2 * n for n in range(20)))
        assert steps(handle.id) == [(0, "spawn", 1, "done"), (1, "collect", 1, "done")]
        assert effects(handle.id, "collect") == 1
    no_step_committed_twice()
    assert open_leases() == 0
    no_tracebacks(pool)


def test_sigkill_during_a_parents_rollback(workers, tmp_path):
    """A parent whose child failed is rolling back when its worker dies: the rollback is resumed, once."""
    marker = tmp_path / "p"
    handle = Spawner.submit({"marker": str(marker), "sleep": {"rollback": 60},
                             "children": [{"state": {"n": 0, "fail": True}}]})
    start_victim(workers)
    victim = worker_with_pid(workers, wait_for(lambda: read_pid(Path(f"{marker}.rollback")), timeout=WAIT,
                                               workers=workers, what="the parent's rollback to start"))
    assert status_of(handle.id) == "rolling_back"
    kill(victim)
    survivors = start_survivors(workers)

    assert wait_final(handle.id, timeout=WAIT, workers=workers) == "rolled_back"
    parent = ProcedureRun.objects.get(id=handle.id)
    (child,) = children(handle.id)
    assert child.status == "failed" and f"child testapp.Leaf {child.id} ended failed" in parent.error
    assert steps(handle.id) == [(0, "spawn", 1, "done"), (1, "rollback", 1, "lost"), (1, "rollback", 2, "done")]
    assert lease_outcomes(handle.id) == ["completed", "expired", "completed"]
    assert effects(handle.id, "rollback") == 1  # the killed attempt's writes rolled back with it
    no_step_committed_twice()
    assert open_leases() == 0
    no_tracebacks(survivors)
