"""Trees with real ``manage.py procedures_worker`` processes on PostgreSQL.

A deep and wide tree finishes; a failing child rolls back its parent (or a
tolerant parent carries on); cancelling a tree fences out its running
children; a cross-tree lock key deadlock fails the younger tree. Crashes of
trees: ``test_tree_crash_processes.py``.

Conventions and helpers: ``tests/runtime/trees.py``.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.models import Count

from django_procedures import get_handle
from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
from testproject.testapp.models import Effect
from testproject.testapp.procedures import Parent, Spawner, TolerantParent
from tests.runs import lease_outcomes, open_leases, status_of, steps
from tests.runtime.processes import read_pid, wait_for
from tests.runtime.trees import (
    CANCEL_LEASE,
    FAST,
    WAIT,
    all_threads_serve,
    blocked_by_this_transaction,
    children,
    effects,
    no_step_committed_twice,
    no_tracebacks,
    start,
    statuses,
    wait_final,
)

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_a_tree_of_depth_three_and_fanout_ten_finishes(workers):
    handle = Parent.submit({"depth": 3, "fanout": 10})
    pool = start(workers, threads=4)
    wait_final(handle.id, timeout=4 * WAIT, workers=workers)

    root = ProcedureRun.objects.get(id=handle.id)
    assert (root.status, root.output) == ("done", 10 * 10 * sum(2 * n for n in range(10)))
    descendants = ProcedureRun.objects.filter(root_id=handle.id)
    assert descendants.count() == 10 + 100 + 1000
    assert not ProcedureRun.objects.exclude(id=handle.id).filter(root_id__isnull=True).exists()
    assert dict(descendants.values_list("depth").annotate(n=Count("id"))) == {1: 10, 2: 100, 3: 1000}
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    parents = ProcedureRun.objects.filter(type_name=Parent.type_name)
    assert parents.count() == 111
    assert set(parents.values_list("pending_children", flat=True)) == {0}
    assert set(parents.filter(depth=2).values_list("output", flat=True)) == {90}
    assert set(parents.filter(depth=1).values_list("output", flat=True)) == {900}
    # Every parent committed spawn and collect once, every leaf its one step once; every lease completed.
    assert dict(Step.objects.values_list("status").annotate(n=Count("id"))) == {"done": 1000 + 2 * 111}
    no_step_committed_twice()
    assert Effect.objects.filter(step="leaf").count() == 1000
    assert open_leases() == 0
    # Every lease completed, but for claims given back unstarted: a leaf claimed ahead that waited over half a
    # second for a thread on a loaded machine (docs/running-workers.md) has a released lease that wrote no step.
    assert set(Lease.objects.values_list("outcome", flat=True)) <= {"completed", "released"}
    for procedure_id, token in Lease.objects.filter(outcome="released").values_list("procedure_id", "token"):
        assert not Step.objects.filter(procedure_id=procedure_id, lease_token=token).exists()
    # One completed lease per leaf; a parent has its spawn's and its collect's, and one more each time it was woken
    # early (a sibling passed by while its row was locked for a lease renewal, store/tree.py) and went back to
    # waiting without a step — the exact Step count above says no such claim wrote one.
    completed = Lease.objects.filter(outcome="completed")
    per_procedure = dict(completed.values_list("procedure_id").annotate(n=Count("id")))
    leaves = descendants.filter(depth=3).values_list("id", flat=True)
    assert {per_procedure[leaf] for leaf in leaves} == {1}
    assert min(per_procedure[p] for p in parents.values_list("id", flat=True)) == 2
    no_tracebacks(pool)


def test_a_failing_child_rolls_back_its_parent_and_cancels_the_running_siblings(workers, tmp_path):
    sleepers = [{"state": {"n": n, "sleep": {"work": 60}, "poll": True, "marker": str(tmp_path / f"s{n}")}}
                for n in (1, 2, 3)]
    # The failing child has the lowest priority: it is claimed only once all its siblings are.
    failing = {"state": {"n": 0, "fail": True}, "priority": -10}
    handle = Spawner.submit({"children": [failing, *sleepers]})
    pool = start(workers, lease=CANCEL_LEASE)
    wait_final(handle.id, timeout=WAIT, workers=workers)
    # The workers let go of the cancelled siblings: every thread runs new work. (Only then are the checks
    # below final: a late write of a sibling would have landed by now. A worker need not log anything for a
    # sibling it had claimed ahead of its threads and gives back, or drops before a thread took it up.)
    all_threads_serve(workers, pool, tmp_path, threads=2)

    parent = ProcedureRun.objects.get(id=handle.id)
    bad, *siblings = children(handle.id)
    assert parent.status == "rolled_back", parent.error
    assert bad.status == "failed" and bad.error == "NonRetryable: leaf 0 refuses"
    assert f"child testapp.Leaf {bad.id} ended failed" in parent.error and "leaf 0 refuses" in parent.error
    assert effects(handle.id, "rollback") == 1 and effects(handle.id, "collect") == 0
    assert [(n, s) for _, n, _, s in steps(handle.id)] == [("spawn", "done"), ("rollback", "done")]
    assert lease_outcomes(handle.id) == ["completed", "completed"]  # the suspension, then the failure + rollback

    # The siblings were cancelled, claimed (fenced out, their writes rolled back) or, if a worker had claimed
    # one ahead of its threads and given it back (PREFETCH) just then, ready: every claim ended lost or
    # released, and the row's token is past every lease's, so no late write of any claim can land.
    assert [s.status for s in siblings] == ["cancelled"] * 3
    assert all(s.error == f"cancelled: ancestor {handle.id} failed" for s in siblings)
    assert all(lease_outcomes(s.id) and set(lease_outcomes(s.id)) <= {"lost", "released"} for s in siblings)
    assert all(s.lease_token > Lease.objects.filter(procedure_id=s.id).latest("token").token for s in siblings)
    assert all(effects(s.id) == 0 and steps(s.id) == [] for s in siblings)
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_child_failure_with_parent_and_tolerant_parent(workers):
    strict = Parent.submit({"fanout": 3, "failing": [1], "rollback_effect": True})
    tolerant = TolerantParent.submit({"fanout": 3, "failing": [1]})
    pool = start(workers)
    wait_final(strict.id, timeout=WAIT, workers=workers)
    wait_final(tolerant.id, timeout=WAIT, workers=workers)

    run = ProcedureRun.objects.get(id=strict.id)
    bad = ProcedureRun.objects.get(parent_id=strict.id, position=1)
    assert run.status == "rolled_back", run.error
    assert f"child testapp.Leaf {bad.id} ended failed: NonRetryable: leaf 1 refuses" in run.error
    assert Effect.objects.filter(procedure_id=strict.id, step="parent-rollback").count() == 1
    # Siblings either finished before the failure was handled or were cancelled; none is left unfinished.
    others = ProcedureRun.objects.filter(parent_id=strict.id).exclude(id=bad.id)
    assert set(others.values_list("status", flat=True)) <= {"done", "cancelled"}

    run = ProcedureRun.objects.get(id=tolerant.id)
    assert (run.status, run.output) == ("done", 0 + 4)
    assert run.state["failed_children"] == ["NonRetryable: leaf 1 refuses"]
    assert sorted(s for s, _ in run.state["seen"]) == ["done", "done", "failed"]
    no_step_committed_twice()
    assert open_leases() == 0
    no_tracebacks(pool)


def test_cancelling_a_waiting_parent_fences_out_its_running_children(workers, tmp_path):
    kids = [{"state": {"n": n, "sleep": {"work": 60}, "poll": True, "marker": str(tmp_path / f"c{n}")}}
            for n in range(4)]
    handle = Spawner.submit({"children": kids})
    pool = start(workers, lease=CANCEL_LEASE)
    for n in range(4):  # every child is inside its step (its Effect row written, not committed)
        wait_for(lambda n=n: read_pid(Path(f"{tmp_path / f'c{n}'}.work")), timeout=WAIT, workers=workers,
                 what=f"child {n} to be running its step")
    assert status_of(handle.id) == "waiting"
    running = children(handle.id)
    assert {c.status for c in running} == {"running"}

    result = handle.cancel(by="test")
    assert result.changed and set(result.cancelled) == {handle.id, *(c.id for c in running)}
    # Every thread is free again and runs new work: the workers noticed and dropped the cancelled children.
    all_threads_serve(workers, pool, tmp_path, threads=2)

    members = ProcedureRun.objects.filter(id__in=[handle.id, *(c.id for c in running)])
    assert set(members.values_list("status", flat=True)) == {"cancelled"}
    assert ProcedureRun.objects.get(id=handle.id).error == "cancelled by test"
    for c in running:  # (a child claimed ahead of a worker's threads may have been given back first)
        assert lease_outcomes(c.id)[-1] == "lost" and set(lease_outcomes(c.id)[:-1]) <= {"released"}
        assert ProcedureRun.objects.get(id=c.id).lease_token > Lease.objects.filter(procedure_id=c.id).latest(
            "token").token
        assert effects(c.id) == 0 and steps(c.id) == []  # the interrupted atomic steps rolled back
    assert lease_outcomes(handle.id) == ["completed"] and effects(handle.id, "collect") == 0
    assert open_leases() == 0  # (and no late write landed: the children's threads have moved on)
    no_tracebacks(pool)


def test_cancelling_a_tree_whose_parent_and_child_run_on_one_worker(workers, tmp_path):
    """``cancel()`` must not deadlock with the heartbeat of a worker that holds a parent and its child.

    A tolerant parent handles a failed child (slowly) while another child runs,
    both on worker A (worker B, the second process, serves another queue).
    Cancelling locks the parent, then the child (ancestors first); A's
    heartbeat renews both leases in one statement. The parent gets the largest
    id, so that a heartbeat locking by id alone would take the child first and
    then wait for the parent, which the cancel holds, while the cancel waits
    for the child: a deadlock, which PostgreSQL breaks by failing the cancel or
    the renewal. To make the interleaving certain, the test holds the child's
    row for a moment so that A's heartbeat and the cancel both queue up behind
    it. (This failed before 2e81d2c, which made the heartbeat lock by depth, then id.)
    """
    marker, child_marker = tmp_path / "p", tmp_path / "c"
    sleeper = {"state": {"n": 1, "sleep": {"work": 60}, "poll": True, "marker": str(child_marker)}}
    failing = {"state": {"n": 0, "fail": True}, "priority": -10}
    submitted = Spawner.submit({"tolerant": True, "marker": str(marker), "sleep": {"on_child_failed": 60},
                                "poll": True, "children": [failing, sleeper]})
    parent_id = uuid.UUID(int=2**128 - 1)  # larger than any child's id
    ProcedureRun._writer.filter(id=submitted.id).update(id=parent_id)
    a = workers.start("--concurrency", "3", lease_seconds=6.0, procedures=FAST)
    b = workers.start("--queues", "elsewhere", lease_seconds=6.0, procedures=FAST)
    wait_for(lambda: read_pid(Path(f"{marker}.on_child_failed")) and read_pid(Path(f"{child_marker}.work")),
             timeout=WAIT, workers=workers, what="the parent in on_child_failed while a child runs")
    child = ProcedureRun.objects.get(parent_id=parent_id, position=1)
    held = sorted(ProcedureRun.objects.filter(id__in=[parent_id, child.id]).values_list("status", "lease_owner"))
    assert held == [("running", a.worker_id)] * 2, held

    outcome: dict = {}

    def cancel() -> None:
        try:
            outcome["result"] = get_handle(parent_id).cancel(by="test")
        except Exception as error:
            outcome["error"] = error
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel)
    with transaction.atomic():
        ProcedureRun.objects.select_for_update().get(id=child.id)
        wait_for(lambda: len(blocked_by_this_transaction()) == 1, timeout=WAIT, workers=workers,
                 what="worker A's heartbeat to queue up behind the child's row")
        canceller.start()
        wait_for(lambda: len(blocked_by_this_transaction()) == 2, timeout=WAIT, workers=workers,
                 what="the cancel to queue up behind the child's row too")
    canceller.join(30)
    # PostgreSQL breaks a deadlock by failing one side: the cancel, or worker A's lease renewal.
    assert "error" not in outcome, f"cancel() raised {outcome['error']!r}"
    assert set(outcome["result"].cancelled) == {parent_id, child.id}
    # Worker A dropped both: its three threads all run new work (B serves another queue).
    all_threads_serve(workers, [a], tmp_path, threads=3)
    assert statuses([parent_id, child.id]) == {parent_id: "cancelled", child.id: "cancelled"}
    assert effects(child.id) == 0 and open_leases() == 0
    assert not a.log_lines(containing="deadlock"), a.describe()
    assert a.alive() and b.alive()
    no_tracebacks([a, b])


def test_a_cross_tree_deadlock_fails_the_younger_tree(workers, tmp_path):
    gate = tmp_path / "gate"

    def tree(own: str, other: str) -> dict:
        return {"keys": [[own, "exclusive"]], "gate": str(gate),
                "children": [{"state": {"n": 1, "keys": [[other, "exclusive"]]}}]}

    older = Spawner.submit(tree("K", "L"))
    younger = Spawner.submit(tree("L", "K"))
    pool = start(workers)
    # Both trees hold their own key before either spawns the child that needs the other's.
    wait_for(lambda: ProcedureRun.objects.filter(id__in=[older.id, younger.id], status="running",
                                                 keys_held=True).count() == 2,
             timeout=WAIT, workers=workers, what="both parents to hold their keys")
    gate.touch()
    assert wait_final(younger.id, timeout=WAIT, workers=workers) == "rolled_back"
    assert wait_final(older.id, timeout=WAIT, workers=workers) == "done"

    young, old = ProcedureRun.objects.get(id=younger.id), ProcedureRun.objects.get(id=older.id)
    (young_child,) = children(younger.id)
    assert young_child.status == "failed" and "lock key deadlock" in young_child.error
    for text in (young_child.error, young.error):
        assert str(older.id) in text and str(younger.id) in text, text
        assert "'K'" in text and "'L'" in text, text
    assert f"failing the younger tree {younger.id}" in young.error
    assert effects(younger.id, "rollback") == 1
    assert old.output == 2 and [c.status for c in children(older.id)] == ["done"]
    def deadlock_warnings() -> int:
        return sum("lock key deadlock" in line for w in pool for line in w.log_lines(level="WARNING"))

    # (docs/trees-and-locks.md: breaking one logs one WARNING; written after the commit the test saw.)
    wait_for(deadlock_warnings, timeout=WAIT, workers=workers, what="the deadlock's WARNING")
    assert deadlock_warnings() == 1
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)
