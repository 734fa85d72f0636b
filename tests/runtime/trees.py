"""What the tree and lock key process tests share: starting workers, reading the database, waiting.

Those tests (``test_lock_key_processes.py``, ``test_tree_processes.py``,
``test_tree_crash_processes.py``, ``test_child_retry_processes.py``) run at
least two worker processes (two threads each unless said otherwise) against
the test database; their data is committed (``transaction=True``) so the
workers see it. The assertions read the ``ProcedureRun``, ``Step``, ``Lease``
and ``KeyRequest`` rows and the test app's ``Effect`` rows (one per committed
execution of a step body). Waiting is always a poll of the database (or of a
worker's marker file) with a generous deadline (:data:`WAIT`: a loaded
two-core machine may be slow); no assertion depends on how long something
took, nor on a log line the code need not write: that a worker let go of a
procedure shows as its threads running new work (:func:`all_threads_serve`).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from django.db import connection
from django.db.models import Count

from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL
from testproject.testapp.models import Effect
from testproject.testapp.procedures import KeyHolder
from tests.runs import open_leases, status_of, steps
from tests.runtime.processes import WorkerProcess, Workers, wait_for

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


def step_interval(pid, name: str):
    """``(started_at, finished_at)`` of the committed attempt of step ``name``."""
    return Step.objects.values_list("started_at", "finished_at").get(procedure_id=pid, name=name, status="done")


def lease_interval(pid):
    """``(claimed_at, released_at)`` of the procedure's only lease (database clock)."""
    (lease,) = Lease.objects.filter(procedure_id=pid).values_list("claimed_at", "released_at")
    return lease


def effects(pid, step: str | None = None) -> int:
    rows = Effect.objects.filter(procedure_id=pid)
    return (rows.filter(step=step) if step else rows).count()


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

