"""Real workers lose their database connections and carry on without a human.

The tests either terminate the worker's own backends on the test database
(found by the ``application_name`` worker connections carry) or restart a
throwaway PostgreSQL cluster the test creates for itself; never anything else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.runtime.worker import APPLICATION_NAME_PREFIX
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ChargeCard, ChargesAfterPause, ThreeSteps, WritesAfterPause
from tests.runtime.processes import Workers, read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

FAST = {"SWEEP_SECONDS": 0.5}


@pytest.fixture
def workers(transactional_db, tmp_path):
    pool = Workers(tmp_path)
    yield pool
    pool.close()
    print(pool.describe())


def backends(worker) -> dict[str, int]:
    """``{role: pid}`` of the worker's connections to the test database (main, heartbeat, listen, exec-N)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name, pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name LIKE %s", [f"{APPLICATION_NAME_PREFIX}/%/{worker.worker_id}"])
        return {name.split("/")[1]: pid for name, pid in cursor.fetchall()}


def test_worker_connections_are_named_by_role(workers, tmp_path):
    marker = tmp_path / "m"
    ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 30}, "poll": True})
    w = workers.start("--concurrency", "2", procedures=FAST)
    wait_for(lambda: Path(f"{marker}.two").exists(), timeout=30, workers=workers, what="step two to start")

    def named():
        roles = set(backends(w))
        return roles >= {"main", "heartbeat", "listen"} and roles & {"exec-0", "exec-1"} and roles

    roles = wait_for(named, timeout=15, workers=workers, what="the worker's named connections")
    assert roles <= {"main", "heartbeat", "listen", "exec-0", "exec-1"}


# -- helpers ---------------------------------------------------------------------------------------


def terminate(pids) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(pids)])


def executor_backends(worker) -> list[int]:
    return [pid for role, pid in backends(worker).items() if role.startswith("exec-")]


def status_of(pid) -> str:
    return ProcedureRun.objects.values_list("status", flat=True).get(id=pid)


def steps(pid) -> list[tuple[int, str, int, str]]:
    return list(Step.objects.filter(procedure_id=pid).order_by("index", "attempt", "id")
                .values_list("index", "name", "attempt", "status"))


def effects(pid) -> list[tuple[str, int]]:
    return list(Effect.objects.filter(procedure_id=pid).order_by("id").values_list("step", "worker_pid"))


def leases(pid) -> list[tuple[str, str, bool]]:
    return [(worker, outcome, released is not None) for worker, outcome, released in
            Lease.objects.filter(procedure_id=pid).order_by("token").values_list("worker", "outcome", "released_at")]


def wait_final(pid, workers, timeout=30.0) -> str:
    return wait_for(lambda: (s := status_of(pid)) in ("done", "failed", "rolled_back", "cancelled") and s,
                    timeout=timeout, workers=workers, what=f"procedure {pid} to finish")


def cut_executor_connection(worker, marker: Path, workers) -> None:
    """Once the step has written ``marker``, terminate the worker's executor connections."""
    wait_for(lambda: read_pid(marker) == worker.pid, timeout=30, workers=workers, what=f"{marker.name} written")
    pids = wait_for(lambda: executor_backends(worker), timeout=10, workers=workers, what="the executor connection")
    terminate(pids)


def assert_reconnected_quietly(worker) -> None:
    """One warning for the outage, one line when it is over, no error and no traceback; still running."""
    lost = worker.log_lines(level="WARNING", containing="database connection lost")
    assert len(lost) == 1, worker.describe()
    assert worker.log_lines(level="INFO", containing="database connection restored"), worker.describe()
    assert not worker.log_lines(level="ERROR"), worker.describe()
    assert "Traceback" not in worker.log(), worker.describe()
    assert worker.alive(), worker.describe()


# -- a terminated executor connection ----------------------------------------------------------------


def test_connection_cut_before_the_checkpoint_resumes_the_step_under_the_same_lease(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 2}})
    w = workers.start("--concurrency", "1", lease_seconds=3, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.two"), workers)

    assert wait_final(handle.id, workers) == "done"
    # No failed and no lost attempt: step two ran again under the same lease, as attempt 1.
    assert steps(handle.id) == [(0, "one", 1, "done"), (1, "two", 1, "done"), (2, "three", 1, "done")]
    # The cut transaction's row rolled back with it: each step's row exists once.
    assert effects(handle.id) == [("one", w.pid), ("two", w.pid), ("three", w.pid)]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


def test_connection_cut_under_a_steps_own_query_is_not_a_failed_attempt(workers, tmp_path):
    marker = tmp_path / "m"
    handle = WritesAfterPause.submit({"marker": str(marker), "sleep": {"work": 2}})  # max_attempts=1
    w = workers.start("--concurrency", "1", lease_seconds=3, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.work"), workers)

    assert wait_final(handle.id, workers) == "done", ProcedureRun.objects.get(id=handle.id).error
    assert steps(handle.id) == [(0, "work", 1, "done")]
    assert effects(handle.id) == [("work", w.pid)]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


def test_connection_cut_after_a_non_idempotent_step_records_it_without_running_it_again(workers, tmp_path):
    marker = tmp_path / "m"
    charged = Path(f"{marker}.charge")
    handle = ChargeCard.submit({"marker": str(marker), "sleep": {"charge": 2}})
    w = workers.start("--concurrency", "1", lease_seconds=3, procedures=FAST)
    cut_executor_connection(w, charged, workers)
    written = charged.stat().st_mtime_ns

    assert wait_final(handle.id, workers) == "done"
    assert charged.stat().st_mtime_ns == written  # the step ran once; only its result was written again
    assert steps(handle.id) == [(0, "charge", 1, "done")]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


def test_connection_cut_inside_a_non_idempotent_step_parks_it(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ChargesAfterPause.submit({"marker": str(marker), "sleep": {"charge": 2}})
    w = workers.start("--concurrency", "1", lease_seconds=3, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.charge"), workers)

    assert wait_final(handle.id, workers) == "failed"
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.error, row.failure_can_retry) == ("interrupted during non-idempotent step charge", True)
    assert effects(handle.id) == []  # its own write died with the connection; it is not run again
    assert leases(handle.id) == [(w.worker_id, "failed", True)]
    assert w.log_lines(level="WARNING", containing="parked as failed"), w.describe()
    assert_reconnected_quietly(w)
