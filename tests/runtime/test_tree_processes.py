"""Trees and lock keys with real ``manage.py procedures_worker`` processes on PostgreSQL.

Every test runs at least two worker processes (two threads each unless said
otherwise) against the test database; its data is committed
(``transaction=True``) so the workers see it. The assertions read the
``ProcedureRun``, ``Step``, ``Lease`` and ``KeyRequest`` rows and the test
app's ``Effect`` rows (one per committed execution of a step body). Waiting
is always a poll of the database (or of a worker's marker file) with a
generous deadline (:data:`WAIT`: a loaded two-core machine may be slow); no
assertion depends on how long something took, nor on a log line the code need
not write: that a worker let go of a procedure shows as its threads running
new work (:func:`all_threads_serve`).

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

Also: a lock key holder killed mid-step keeps its key until it finishes on
another worker, and a parent killed during its rollback is rolled back once.
"""

from __future__ import annotations

import signal
import threading
import uuid
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.models import Count

from django_procedures import get_handle
from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL
from testproject.testapp.models import Effect
from testproject.testapp.procedures import KeyHolder, Leaf, Parent, Spawner, ThreeSteps, TolerantParent
from tests.runtime.processes import WorkerProcess, Workers, read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: Workers sweep expired leases (and look for lock key deadlocks) every half second.
FAST = {"SWEEP_SECONDS": 0.5}
#: Leases: long where no worker is meant to be lost (a loaded machine must not expire one), short only for
#: the worker a crash test kills (recovery waits for its lease to expire; it is started alone, first, so no
#: worker that must survive has a lease a busy machine could let lapse), and in between where running
#: procedures are cancelled (a worker notices at its next heartbeat, every third of the lease).
LEASE, CRASH_LEASE, CANCEL_LEASE = 10.0, 2.0, 6.0
#: Seconds to wait for anything that is only a matter of time (generous: waiting costs nothing when it passes).
WAIT = 120
X = [["k", "exclusive"]]
S = [["k", "shared"]]


def start(workers: Workers, count: int = 2, *, threads: int = 2, lease: float = LEASE) -> list[WorkerProcess]:
    return [workers.start("--concurrency", str(threads), lease_seconds=lease, procedures=FAST) for _ in range(count)]


def start_victim(workers: Workers) -> list[WorkerProcess]:
    """The one worker a crash test will kill, alone until then, with a short lease."""
    return start(workers, 1, lease=CRASH_LEASE)


def start_survivors(workers: Workers) -> list[WorkerProcess]:
    """Two workers, started after the kill, that take over once the victim's lease has expired."""
    return start(workers, 2)


# -- reading the database -------------------------------------------------------------------------


def status_of(pid) -> str:
    return ProcedureRun.objects.values_list("status", flat=True).get(id=pid)


def statuses(ids) -> dict:
    return dict(ProcedureRun.objects.filter(id__in=list(ids)).values_list("id", "status"))


def wait_final(pid, *, timeout: float, workers: Workers) -> str:
    try:
        return wait_for(lambda: (s := status_of(pid)) in FINAL and s, timeout=timeout, workers=workers,
                        what=f"procedure {pid} to finish")
    except AssertionError as error:
        raise AssertionError(f"procedure {pid} is still {status_of(pid)}: {error}") from None


def wait_all(ids, wanted: set[str], *, timeout: float, workers: Workers, what: str) -> None:
    ids = list(ids)
    try:
        wait_for(lambda: set(statuses(ids).values()) <= wanted and len(statuses(ids)) == len(ids),
                 timeout=timeout, workers=workers, what=what)
    except AssertionError as error:
        raise AssertionError(f"statuses {dict(Counter(statuses(ids).values()))}: {error}") from None


def steps(pid) -> list[tuple[int, str, int, str]]:
    return list(Step.objects.filter(procedure_id=pid).order_by("index", "attempt", "id")
                .values_list("index", "name", "attempt", "status"))


def step_interval(pid, name: str):
    """``(started_at, finished_at)`` of the committed attempt of step ``name``."""
    return Step.objects.values_list("started_at", "finished_at").get(procedure_id=pid, name=name, status="done")


def lease_interval(pid):
    """``(claimed_at, released_at)`` of the procedure's only lease (database clock)."""
    (lease,) = Lease.objects.filter(procedure_id=pid).values_list("claimed_at", "released_at")
    return lease


def lease_outcomes(pid) -> list[str]:
    return list(Lease.objects.filter(procedure_id=pid).order_by("token").values_list("outcome", flat=True))


def effects(pid, step: str | None = None) -> int:
    rows = Effect.objects.filter(procedure_id=pid)
    return (rows.filter(step=step) if step else rows).count()


def open_leases() -> int:
    return Lease.objects.filter(released_at__isnull=True).count()


def children(parent_id) -> list[ProcedureRun]:
    return list(ProcedureRun.objects.filter(parent_id=parent_id).order_by("position"))


def no_step_committed_twice() -> None:
    twice = Step.objects.filter(status="done").values("procedure_id", "index").annotate(n=Count("id")).filter(n__gt=1)
    assert not twice.exists(), list(twice)


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def blocked_by_this_transaction() -> list[int]:
    """Backends waiting, directly or in a queue behind another waiter, for a lock this test's connection holds.

    Read live from ``pg_locks`` (``pg_stat_activity`` is a snapshot within a
    transaction). A second waiter for one row waits for the first waiter's
    tuple lock, hence the chain.
    """
    with connection.cursor() as cursor:
        cursor.execute("""
            WITH RECURSIVE waiting AS (SELECT DISTINCT pid FROM pg_locks WHERE NOT granted),
            chain(pid) AS (
                SELECT pg_backend_pid()
                UNION
                SELECT w.pid FROM waiting AS w JOIN chain AS c ON c.pid = ANY(pg_blocking_pids(w.pid))
            )
            SELECT pid FROM chain WHERE pid <> pg_backend_pid()
        """)
        return [row[0] for row in cursor.fetchall()]


def worker_with_pid(workers: Workers, pid: int) -> WorkerProcess:
    (worker,) = [w for w in workers.started if w.pid == pid]
    return worker


def kill(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGKILL)
    assert worker.wait(5) == -signal.SIGKILL


def no_tracebacks(pool) -> None:
    for w in pool:
        assert "Traceback" not in w.log(), w.describe()


def all_threads_serve(workers: Workers, pool, tmp_path: Path, threads: int) -> None:
    """Every executor thread of ``pool`` is free and claims new work: as many holders as threads run at once."""
    flag = tmp_path / "serve-flag"
    handles = [KeyHolder.submit({"flag": str(flag)}) for _ in range(len(pool) * threads)]
    ids = [h.id for h in handles]
    # Each worker holds exactly as many as it has threads: a worker that claimed more ahead of its threads
    # gives the unstarted ones back (PREFETCH), and one with a stuck thread could not start its share.
    share = {w.worker_id: threads for w in pool}

    def each_thread_holds_one() -> bool:
        rows = ProcedureRun.objects.filter(id__in=ids, status="running").values_list("lease_owner", flat=True)
        return Counter(rows) == share

    wait_for(each_thread_holds_one, timeout=WAIT, workers=workers,
             what=f"{len(ids)} new procedures running at once on {len(pool)} workers x {threads} threads")
    flag.touch()
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="the new procedures to finish")
    assert {Lease.objects.filter(procedure_id=i).latest("token").worker for i in ids} == set(share)
    assert all(w.alive() for w in pool), workers.describe()


def assert_tree_finished(parent_id, *, spawned: int, output) -> list[ProcedureRun]:
    """A Spawner tree that ended well: parent done exactly once, exactly ``spawned`` children, all done once."""
    parent = ProcedureRun.objects.get(id=parent_id)
    assert (parent.status, parent.output, parent.pending_children) == ("done", output, 0)
    kids = children(parent_id)
    assert len(kids) == spawned, [k.id for k in kids]
    assert {k.status for k in kids} == {"done"}
    assert {k.root_id for k in kids} == {parent_id}
    assert parent.state["seen"] == [["done", k.output] for k in kids]
    # The parent's steps committed once each; its atomic step bodies took effect once each.
    assert [(i, n, s) for i, n, _, s in steps(parent_id) if s == "done"] == [(0, "spawn", "done"),
                                                                              (1, "collect", "done")]
    assert (effects(parent_id, "spawn"), effects(parent_id, "collect")) == (1, 1)
    for kid in kids:
        assert [(i, s) for i, _, _, s in steps(kid.id) if s == "done"] == [(0, "done")]
        assert effects(kid.id) == 1, kid.id  # a killed attempt's Effect row rolled back with it
    no_step_committed_twice()
    assert open_leases() == 0
    assert not KeyRequest.objects.exists()
    return kids


# -- lock keys ----------------------------------------------------------------------------------------


def test_three_exclusive_holders_of_one_key_never_overlap(workers):
    ids = [KeyHolder.submit({"keys": X, "hold": 1}).id for _ in range(3)]
    # Requests are queued by the clock of the claim that made them: two workers claiming at once need not
    # ask in submission order. One worker asks for all three first (its claims are in claim order), then a
    # second one joins in.
    pool = start(workers, 1)

    def asked(i) -> bool:
        return KeyRequest.objects.filter(procedure_id=i).exists() or status_of(i) == "done"

    wait_for(lambda: all(asked(i) for i in ids), timeout=WAIT, workers=workers,
             what="the first worker to queue all three holders for the key")
    pool += start(workers, 1)
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="three exclusive holders to finish")

    holds = sorted((*step_interval(i, "hold"), i) for i in ids)
    for earlier, later in pairwise(holds):
        assert later[0] >= earlier[1], holds
    assert [i for _, _, i in holds] == ids  # the oldest waiter got the key first
    # From the claim that took the key to the final transaction that released it (database clock).
    held = sorted(lease_interval(i) for i in ids)
    for earlier, later in pairwise(held):
        assert later[0] >= earlier[1], held
    assert all(effects(i, "hold") == 1 for i in ids)
    assert all(lease_outcomes(i) == ["completed"] for i in ids)
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_shared_holders_of_one_key_overlap(workers, tmp_path):
    flag = tmp_path / "flag"
    ids = [KeyHolder.submit({"keys": S, "flag": str(flag)}).id for _ in range(3)]
    pool = start(workers)
    # They hold until the flag exists: all three must be able to hold the key at once (4 threads).
    wait_for(lambda: ProcedureRun.objects.filter(id__in=ids, status="running", keys_held=True).count() == 3,
             timeout=WAIT, workers=workers, what="all three shared holders to hold the key at once")
    flag.touch()
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="three shared holders to finish")

    holds = [step_interval(i, "hold") for i in ids]
    overlapping = [(a, b) for n, a in enumerate(holds) for b in holds[n + 1:] if overlap(a, b)]
    assert overlapping, holds
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_unrelated_work_finishes_while_a_key_is_busy_and_the_next_holder_waits(workers, tmp_path):
    flag = tmp_path / "flag"
    first = KeyHolder.submit({"keys": X, "flag": str(flag)})
    pool = start(workers)
    wait_for(lambda: ProcedureRun.objects.filter(id=first.id, status="running", keys_held=True).exists(),
             timeout=WAIT, workers=workers, what="the first holder to take the key and run")

    second = KeyHolder.submit({"keys": X})
    unrelated = [h.id for h in ThreeSteps.submit_many([{} for _ in range(20)])]
    wait_all(unrelated, {"done"}, timeout=WAIT, workers=workers, what="20 unrelated procedures to finish")

    # The order: all the unrelated work is done while the holder still runs and the second one waits.
    assert status_of(first.id) == "running"
    waiter = ProcedureRun.objects.get(id=second.id)
    assert (waiter.status, waiter.waiting_for_keys, waiter.keys_held, waiter.failures) == ("ready", True, False, 0)
    assert steps(second.id) == [] and lease_outcomes(second.id) == []
    assert not Lease.objects.filter(procedure_id__in=unrelated, released_at__isnull=True).exists()

    flag.touch()
    wait_all([first.id, second.id], {"done"}, timeout=WAIT, workers=workers, what="both holders to finish")
    # The second holder started only after the first had finished.
    assert step_interval(second.id, "hold")[0] >= step_interval(first.id, "hold")[1]
    assert lease_interval(second.id)[0] >= lease_interval(first.id)[1]
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_a_holder_killed_mid_step_keeps_its_key_until_it_finishes_elsewhere(workers, tmp_path):
    marker, flag = tmp_path / "holder", tmp_path / "flag"
    holder = Leaf.submit({"n": 1, "keys": X, "marker": str(marker), "until": {"work": str(flag)}})
    start_victim(workers)
    victim = worker_with_pid(workers, wait_for(lambda: read_pid(Path(f"{marker}.work")), timeout=WAIT,
                                               workers=workers, what="the holder to be in its step"))
    waiter = KeyHolder.submit({"keys": X})
    kill(victim)
    flag.touch()  # (the killed attempt never sees it; the next one goes straight through)
    survivors = start_survivors(workers)
    wait_all([holder.id, waiter.id], {"done"}, timeout=WAIT, workers=workers, what="the holder and the waiter")

    assert steps(holder.id) == [(0, "work", 1, "lost"), (0, "work", 2, "done")]
    assert lease_outcomes(holder.id) == ["expired", "completed"]
    assert effects(holder.id) == 1
    # The key outlived the lost lease: the waiter was granted it only after the holder's final transaction.
    (holder_end,) = Lease.objects.filter(procedure_id=holder.id, outcome="completed").values_list(
        "released_at", flat=True)
    assert lease_interval(waiter.id)[0] >= holder_end
    assert step_interval(waiter.id, "hold")[0] >= step_interval(holder.id, "work")[1]
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(survivors)


# -- trees ----------------------------------------------------------------------------------------------


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


# -- crash safety of trees --------------------------------------------------------------------------------


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
    flag = tmp_path / "flag"
    handle = Spawner.submit({"children": [
        {"state": {"n": n, "marker": str(tmp_path / f"c{n}"), "until": {"work": str(flag)}}} for n in range(3)]})
    start_victim(workers)
    pid = wait_for(lambda: read_pid(tmp_path / "c0.work"), timeout=WAIT, workers=workers,
                   what="child 0 to be in its step")
    victim = worker_with_pid(workers, pid)
    kill(victim)
    flag.touch()  # the children's next attempts go straight through
    survivors = start_survivors(workers)

    wait_final(handle.id, timeout=WAIT, workers=workers)
    kids = assert_tree_finished(handle.id, spawned=3, output=0 + 2 + 4)
    assert steps(kids[0].id) == [(0, "work", 1, "lost"), (0, "work", 2, "done")]
    assert lease_outcomes(kids[0].id) == ["expired", "completed"]
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
