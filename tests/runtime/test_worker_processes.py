"""Real ``manage.py procedures_worker`` processes against PostgreSQL: crashes, freezes, signals, load.

Each test commits its data (``transaction=True``) so the worker subprocesses,
connected to the same test database, see it; the assertions read the
``ProcedureRun``, ``Step`` and ``Lease`` rows and the test app's ``Effect``
rows (one per committed execution of a step's body). Steps are caught in flight
by waiting for the files they write and hold on to (``until``), never by how long
they sleep; every wait is a poll of the database (or of such a file) with a
generous deadline, since a loaded machine may be slow.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ChargeCard, KillsItsWorker, ThreeSteps
from tests.runs import effect_rows, open_leases, status_of, steps
from tests.runtime.processes import (
    Workers,
    direct_only,
    read_pid,
    session_state,
    wait_for,
    waits_for_a_lock,
    worker_sessions,
)

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: Workers in these tests sweep expired leases often, so a 2 s lease is reclaimed within ~2.5 s.
FAST = {"SWEEP_SECONDS": 0.5}
#: The lease of a worker a test kills or freezes (recovery waits for it), and of every other worker: long
#: enough that a busy machine never lets it lapse.
SHORT_LEASE, LEASE = 2.0, 30.0
#: Seconds to wait for anything that is only a matter of time.
WAIT = 120


# -- reading the database -------------------------------------------------------------------------


def run(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def leases(pid) -> list[tuple[str, str, bool]]:
    """``(worker, outcome, closed)`` per claim, in token order."""
    return [(worker, outcome, released is not None) for worker, outcome, released in
            Lease.objects.filter(procedure_id=pid).order_by("token").values_list("worker", "outcome", "released_at")]


def wait_status(pid, *statuses: str, timeout: float, workers: Workers) -> str:
    return wait_for(lambda: (s := status_of(pid)) in statuses and s, timeout=timeout, workers=workers,
                    what=f"procedure {pid} to become {' or '.join(statuses)} (it is {status_of(pid)})")


def wait_marker(path: Path, pid: int, *, timeout: float, workers: Workers) -> None:
    wait_for(lambda: read_pid(path) == pid, timeout=timeout, workers=workers,
             what=f"{path.name} written by pid {pid}")


def stop(worker, timeout: float = WAIT) -> int:
    worker.signal(signal.SIGTERM)
    return worker.wait(timeout)


# -- 1. SIGKILL --------------------------------------------------------------------------------------


def test_sigkill_during_step_two_resumes_at_step_two(workers, tmp_path):
    marker, flag = tmp_path / "m", tmp_path / "flag"
    handle = ThreeSteps.submit({"marker": str(marker), "until": {"two": str(flag)}})
    a = workers.start(lease_seconds=SHORT_LEASE, procedures=FAST)
    wait_marker(Path(f"{marker}.two"), a.pid, timeout=WAIT, workers=workers)

    a.signal(signal.SIGKILL)
    assert a.wait(WAIT) == -signal.SIGKILL
    flag.touch()  # the next attempt of step two goes straight through
    row = run(handle.id)
    assert (row.status, row.step, row.step_name, row.lease_owner) == ("running", 1, "two", a.worker_id)

    b = workers.start(lease_seconds=LEASE, procedures=FAST)
    wait_status(handle.id, "done", timeout=WAIT, workers=workers)

    row = run(handle.id)
    assert row.output == {"done": ["one", "two", "three"]}  # resumed from the checkpoint after step one
    assert steps(handle.id) == [(0, "one", 1, "done"), (1, "two", 1, "lost"), (1, "two", 2, "done"),
                                (2, "three", 1, "done")]
    # Step one ran once; the killed attempt of step two rolled back with its transaction.
    assert effect_rows(handle.id) == [("one", a.pid), ("two", b.pid), ("three", b.pid)]
    assert leases(handle.id) == [(a.worker_id, "expired", True), (b.worker_id, "completed", True)]
    assert open_leases() == 0
    assert stop(b) == 0


# -- 2. SIGSTOP / SIGCONT -----------------------------------------------------------------------------


@pytest.mark.parametrize("idle_timeout", [None, 600.0], ids=["transaction-cut-by-idle-timeout",
                                                              "transaction-kept-open"])
def test_sigstop_until_lease_expires_fences_out_the_frozen_commit(workers, tmp_path, idle_timeout):
    """A frozen worker whose lease expired: its late commit is dropped, it says so at INFO, and it carries on.

    With the default ``idle_in_transaction_session_timeout`` (twice the lease)
    the frozen step's transaction is cut by PostgreSQL while the worker is
    stopped; with a long one it is still open on SIGCONT and the fenced write
    itself must match no row. Either way the worker must survive and keep
    serving: its executor thread needs a working connection again.
    """
    frozen_settings = dict(FAST)
    if idle_timeout is not None:
        frozen_settings["IDLE_IN_TRANSACTION_TIMEOUT_SECONDS"] = idle_timeout
    marker, flag = tmp_path / "m", tmp_path / "flag"
    handle = ThreeSteps.submit({"marker": str(marker), "until": {"two": str(flag)}})
    a = workers.start(lease_seconds=SHORT_LEASE, procedures=frozen_settings)
    wait_marker(Path(f"{marker}.two"), a.pid, timeout=WAIT, workers=workers)

    a.signal(signal.SIGSTOP)
    flag.touch()  # frozen, worker A cannot see it; the next attempt, on worker B, goes straight through
    b = workers.start(lease_seconds=LEASE, procedures=FAST)
    wait_status(handle.id, "done", timeout=WAIT, workers=workers)
    assert stop(b) == 0
    if idle_timeout is None:  # PostgreSQL has cut the frozen transaction (2 x lease): its session is gone
        wait_for(lambda: not worker_sessions(a, "exec-"), timeout=WAIT, workers=workers,
                 what="PostgreSQL to end the frozen worker's idle transaction")

    a.signal(signal.SIGCONT)
    # It keeps running: the same process (one thread) drops the frozen attempt's result, then claims and
    # finishes new work on a working connection.
    again = ThreeSteps.submit({})
    wait_status(again.id, "done", timeout=WAIT, workers=workers)
    assert a.alive(), a.describe()
    # The one INFO line with the old lease token (docs/running-workers.md), written before the thread
    # took up new work; no error, no traceback.
    assert a.log_lines(level="INFO", containing="lease token"), a.describe()
    assert not a.log_lines(level="ERROR"), "a fenced-out commit is not an error:\n" + a.describe()
    assert "Traceback" not in a.log(), a.describe()

    row = run(handle.id)
    assert (row.status, row.output) == ("done", {"done": ["one", "two", "three"]})
    assert steps(handle.id) == [(0, "one", 1, "done"), (1, "two", 1, "lost"), (1, "two", 2, "done"),
                                (2, "three", 1, "done")]
    # The frozen attempt of step two wrote an Effect row in its transaction: it must be gone.
    assert effect_rows(handle.id) == [("one", a.pid), ("two", b.pid), ("three", b.pid)]
    assert leases(handle.id) == [(a.worker_id, "expired", True), (b.worker_id, "completed", True)]

    assert effect_rows(again.id) == [("one", a.pid), ("two", a.pid), ("three", a.pid)]
    assert leases(again.id) == [(a.worker_id, "completed", True)]
    assert open_leases() == 0
    assert stop(a) == 0


@direct_only("the test follows the heartbeat's own backend, and behind PgBouncer its next renewal may run on "
             "another server connection")
def test_a_worker_frozen_during_its_lease_renewal_leaves_no_row_locked(workers, tmp_path):
    """Found by the SIGSTOP test on a busy machine: a freeze between the renewal and its COMMIT kept the rows locked.

    The test holds the procedure's row so that the worker's renewal waits for it, freezes the worker, and lets
    the renewal run: it must commit without the frozen client, or the row stays locked (the sweep skips it)
    until the idle-transaction timeout, here 10 minutes.
    """
    marker, flag = tmp_path / "m", tmp_path / "flag"
    handle = ThreeSteps.submit({"marker": str(marker), "until": {"two": str(flag)}})
    a = workers.start(lease_seconds=SHORT_LEASE, procedures={**FAST, "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 600})
    wait_marker(Path(f"{marker}.two"), a.pid, timeout=WAIT, workers=workers)
    (heartbeat,) = wait_for(lambda: worker_sessions(a, "heartbeat"), timeout=WAIT, workers=workers,
                            what="the worker's heartbeat connection")

    with transaction.atomic():
        ProcedureRun.objects.select_for_update().get(id=handle.id)
        wait_for(lambda: waits_for_a_lock(heartbeat), timeout=WAIT, workers=workers,
                 what="the lease renewal to wait for the row")
        a.signal(signal.SIGSTOP)
    # The renewal ran once the row was free: idle if it committed, idle in transaction if it waits for the
    # frozen worker's COMMIT (holding the row).
    state = wait_for(lambda: (s := session_state(heartbeat)) in ("idle", "idle in transaction") and s,
                     timeout=WAIT, workers=workers, what="the lease renewal to run")
    assert state == "idle", "the frozen worker's renewal holds the procedure's row in an open transaction"

    flag.touch()
    b = workers.start(lease_seconds=LEASE, procedures=FAST)
    wait_status(handle.id, "done", timeout=WAIT, workers=workers)  # swept once its lease expired, resumed
    assert leases(handle.id) == [(a.worker_id, "expired", True), (b.worker_id, "completed", True)]
    assert stop(b) == 0


# -- 3. SIGTERM --------------------------------------------------------------------------------------


def test_sigterm_releases_the_lease_for_another_worker(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 3000}, "poll": True})
    # A lease far longer than this test may take: passing proves it was released, not left to expire. A
    # shutdown timeout far longer than the wait below: exiting proves the step stopped at ensure_active().
    a = workers.start("--shutdown-timeout", "1800", lease_seconds=3600, procedures=FAST)
    wait_marker(Path(f"{marker}.two"), a.pid, timeout=WAIT, workers=workers)

    a.signal(signal.SIGTERM)
    assert a.wait(WAIT) == 0

    row = run(handle.id)
    assert (row.status, row.step, row.step_name, row.lease_owner, row.lease_expires_at) == (
        "ready", 1, "two", "", None)
    assert leases(handle.id) == [(a.worker_id, "released", True)]
    assert steps(handle.id) == [(0, "one", 1, "done")]  # a released attempt is neither lost nor failed
    assert effect_rows(handle.id) == [("one", a.pid)]  # the interrupted atomic step rolled back

    # Let the next run of step two be quick (the procedure is ready: no worker holds it).
    state = dict(row.state, sleep={})
    ProcedureRun._writer.filter(id=handle.id, status="ready").update(state=state)
    b = workers.start("--burst", lease_seconds=3600, procedures=FAST)
    assert b.wait(WAIT) == 0

    row = run(handle.id)
    assert (row.status, row.output) == ("done", {"done": ["one", "two", "three"]})
    assert steps(handle.id) == [(0, "one", 1, "done"), (1, "two", 1, "done"), (2, "three", 1, "done")]
    assert effect_rows(handle.id) == [("one", a.pid), ("two", b.pid), ("three", b.pid)]
    assert leases(handle.id) == [(a.worker_id, "released", True), (b.worker_id, "completed", True)]
    assert open_leases() == 0


def test_second_sigterm_exits_at_once(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 3000}})  # never calls ensure_active
    a = workers.start("--shutdown-timeout", "1800", lease_seconds=3600, procedures=FAST)
    wait_marker(Path(f"{marker}.two"), a.pid, timeout=WAIT, workers=workers)

    a.signal(signal.SIGTERM)
    # The documented acknowledgement (docs/running-workers.md): the handler ran, so the next signal is the
    # second one (two signals sent before the handler runs would count as one).
    wait_for(lambda: a.log_lines(containing="shutting down"), timeout=WAIT, workers=workers,
             what="the first SIGTERM to be acknowledged")
    assert a.alive(), "the first SIGTERM waits for the running step (shutdown timeout 1800 s)\n" + a.describe()

    a.signal(signal.SIGTERM)
    # Exiting within the wait, with the step still sleeping and the shutdown timeout far off, is "at once";
    # the status says it was the second signal (the first would have ended in 0 after the timeout).
    rc = a.wait(WAIT)
    assert rc == 128 + signal.SIGTERM, a.describe()
    assert "second signal" in a.log()
    row = run(handle.id)
    assert (row.status, row.step_name, row.lease_owner) == ("running", "two", a.worker_id)  # left to expire
    assert leases(handle.id) == [(a.worker_id, "", False)]
    assert effect_rows(handle.id) == [("one", a.pid)]


# -- 4. a poisonous step --------------------------------------------------------------------------------


def test_step_that_kills_its_worker_fails_as_poisonous(workers):
    handle = KillsItsWorker.submit({})
    deaths = 0
    for _ in range(6):
        w = workers.start(lease_seconds=SHORT_LEASE, procedures=FAST)
        wait_for(lambda w=w: not w.alive() or status_of(handle.id) in FINAL, timeout=WAIT, workers=workers,
                 what="the worker to die or the procedure to end")
        if status_of(handle.id) in FINAL:
            break
        assert w.returncode == -signal.SIGKILL, w.describe()
        deaths += 1
    else:
        pytest.fail(f"still {status_of(handle.id)} after 6 workers\n{workers.describe()}")
    assert stop(w) == 0

    row = run(handle.id)
    assert deaths == 3
    assert row.status == "failed"
    assert row.error.startswith("worker lost 3 times during step boom"), row.error
    assert row.failures == 0  # lost attempts use their own budget (max_attempts is 2)
    assert steps(handle.id) == [(0, "boom", 1, "lost"), (0, "boom", 2, "lost"), (0, "boom", 3, "lost")]
    assert [outcome for _, outcome, _ in leases(handle.id)] == ["expired", "expired", "expired", "failed"]
    assert open_leases() == 0


# -- 5. rolling deploys: unknown types ----------------------------------------------------------------


def test_worker_without_the_type_leaves_it_for_one_that_has_it(workers):
    row = ProcedureRun._writer.create(type_name="testapp.OnlySomeWorkers", step_name="run",
                                      run_at=timezone.now(), state={})
    old = workers.start("--burst", lease_seconds=LEASE, procedures=FAST)
    assert old.wait(WAIT) == 0
    assert old.log_lines(containing="testapp.OnlySomeWorkers"), old.describe()  # reported, not failed
    row.refresh_from_db()
    assert (row.status, row.lease_token, row.error) == ("ready", 0, "")
    assert leases(row.id) == [] and steps(row.id) == [] and effect_rows(row.id) == []

    new = workers.start("--burst", lease_seconds=LEASE, procedures=FAST, env={"TESTAPP_EXTRA_TYPES": "1"})
    assert new.wait(WAIT) == 0
    row.refresh_from_db()
    assert row.status == "done", new.describe()
    assert effect_rows(row.id) == [("run", new.pid)]
    assert leases(row.id) == [(new.worker_id, "completed", True)]


# -- 6. load -------------------------------------------------------------------------------------------


def test_two_workers_with_four_threads_run_2000_procedures_exactly_once(workers):
    n = 2000
    ids = [h.id for h in ThreeSteps.submit_many([{} for _ in range(n)])]
    pool = [workers.start("--burst", "--concurrency", "4", lease_seconds=LEASE, procedures=FAST) for _ in range(2)]
    deadline = time.monotonic() + 10 * WAIT  # (a bound against a hang, not a speed requirement)
    for w in pool:
        assert w.wait(max(1.0, deadline - time.monotonic())) == 0

    assert dict(ProcedureRun.objects.values_list("status").annotate(n=Count("id"))) == {"done": n}
    assert dict(Step.objects.values_list("status").annotate(n=Count("id"))) == {"done": 3 * n}
    per_step = Step.objects.values("procedure_id", "index").annotate(n=Count("id"))
    assert per_step.count() == 3 * n and not per_step.filter(n__gt=1).exists()  # no step committed twice
    per_run = Step.objects.values("procedure_id").annotate(n=Count("id"))
    assert per_run.count() == n and not per_run.exclude(n=3).exists()
    effect_rows = Effect.objects.values("procedure_id", "step").annotate(n=Count("id"))
    assert Effect.objects.count() == 3 * n and effect_rows.count() == 3 * n
    assert set(Effect.objects.values_list("procedure_id", flat=True).distinct()) == set(ids)
    assert open_leases() == 0
    # One completed lease per procedure. A procedure claimed ahead that waited over half a second for a thread
    # (a loaded machine) was given back unstarted, its lease closed as released (docs/running-workers.md): each
    # such lease is one the workers counted as given back, and none expired.
    given_back = sum(w.final_count("given_back") for w in pool)
    outcomes = dict(Lease.objects.values_list("outcome").annotate(n=Count("id")))
    assert outcomes == {"completed": n, **({"released": given_back} if given_back else {})}, outcomes
    assert sum(w.final_count("claimed") for w in pool) == n + given_back
    by_worker = Counter(Lease.objects.values_list("worker", flat=True))
    assert set(by_worker) == {w.worker_id for w in pool}, by_worker


# -- 7. non-idempotent steps ----------------------------------------------------------------------------


def test_sigkill_during_non_idempotent_step_parks_it(workers, tmp_path):
    marker = tmp_path / "m"
    charge = Path(f"{marker}.charge")
    handle = ChargeCard.submit({"marker": str(marker), "sleep": {"charge": 3000}})
    a = workers.start(lease_seconds=SHORT_LEASE, procedures=FAST)
    wait_marker(charge, a.pid, timeout=WAIT, workers=workers)
    written = charge.stat().st_mtime_ns

    a.signal(signal.SIGKILL)
    assert a.wait(WAIT) == -signal.SIGKILL
    b = workers.start(lease_seconds=LEASE, procedures=FAST)
    # Parked (failed) by the sweep, or -- wrongly -- released and run again (then it would be running or done,
    # not failed); failed is final, so once it is failed nothing can run the step again.
    wait_status(handle.id, "failed", "done", timeout=WAIT, workers=workers)

    row = run(handle.id)
    assert row.status == "failed", workers.describe()
    assert row.error == "interrupted during non-idempotent step charge"
    assert row.failure_can_retry is True
    assert read_pid(charge) == a.pid and charge.stat().st_mtime_ns == written  # not charged twice
    assert steps(handle.id) == [(0, "charge", 1, "lost")]
    assert leases(handle.id) == [(a.worker_id, "expired", True)]
    assert open_leases() == 0
    assert stop(b) == 0
