"""Real workers lose their database connections and carry on without a human.

The tests either terminate the worker's own backends on the test database
(found by the ``application_name`` worker connections carry) or restart a
throwaway PostgreSQL cluster the test creates for itself; never anything else.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from django_procedures.models import Lease, ProcedureRun
from django_procedures.runtime.worker import APPLICATION_NAME_PREFIX
from testproject.testapp.procedures import (
    ChargeCard,
    ChargesAfterPause,
    RollsBackAfterPause,
    ThreeSteps,
    WritesAfterPause,
)
from tests.runs import effect_rows, status_of, steps
from tests.runtime.processes import MANAGE, ROOT, direct_only, read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

FAST = {"SWEEP_SECONDS": 0.5}
#: The lease where no lease is meant to lapse: long enough that a busy machine (or a slow restart of the
#: throwaway cluster) never lets it, so the renewal timeout (two thirds of it) does not trip either.
LEASE = 30
#: Seconds to wait for anything that is only a matter of time.
WAIT = 120


def backends(worker) -> list[tuple[str, int]]:
    """``(role, pid)`` of the worker's connections to the test database (main, heartbeat, listen, exec-N).

    Behind PgBouncer a role may show on several server connections (one lent to it now, others idle
    that served it last), so this is a list: a dict keyed by role would keep one of them at random.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT application_name, pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name LIKE %s", [f"{APPLICATION_NAME_PREFIX}/%/{worker.worker_id}"])
        return [(name.split("/")[1], pid) for name, pid in cursor.fetchall()]


@direct_only("a server connection shows the name of the client it serves or served last, so idle clients "
             "(main loop, heartbeat) may show under one name; the step transaction's name is checked in "
             "test_pgbouncer_processes.py")
def test_worker_connections_are_named_by_role(workers, tmp_path):
    marker = tmp_path / "m"
    ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 600}, "poll": True})
    w = workers.start("--concurrency", "2", lease_seconds=LEASE, procedures=FAST)
    wait_for(lambda: Path(f"{marker}.two").exists(), timeout=WAIT, workers=workers, what="step two to start")

    def named():
        roles = {role for role, _ in backends(w)}
        return roles >= {"main", "heartbeat", "listen"} and roles & {"exec-0", "exec-1"} and roles

    roles = wait_for(named, timeout=WAIT, workers=workers, what="the worker's named connections")
    assert roles <= {"main", "heartbeat", "listen", "exec-0", "exec-1"}


# -- helpers ---------------------------------------------------------------------------------------

#: Behind PgBouncer in transaction mode these tests do not cut what they mean to: a worker in a non-atomic step
#: holds no server connection, and the backends found by the executor's application_name may be idle ones of the
#: pool that served it last, so the worker sees nothing (its next query gets another server connection).
#: tests/runtime/test_pgbouncer_processes.py terminates server connections under running workers instead.
IDLE_SERVER_CONNECTION = direct_only("the executor's own server connection cannot be told from idle ones of the pool")


def terminate(pids) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(pids)])


def executor_backends(worker) -> list[int]:
    return [pid for role, pid in backends(worker) if role.startswith("exec-")]


def leases(pid) -> list[tuple[str, str, bool]]:
    return [(worker, outcome, released is not None) for worker, outcome, released in
            Lease.objects.filter(procedure_id=pid).order_by("token").values_list("worker", "outcome", "released_at")]


def wait_final(pid, workers, timeout=WAIT) -> str:
    return wait_for(lambda: (s := status_of(pid)) in ("done", "failed", "rolled_back", "cancelled") and s,
                    timeout=timeout, workers=workers, what=f"procedure {pid} to finish")


def cut_executor_connection(worker, marker: Path, workers) -> None:
    """Once the step has written ``marker``, terminate the worker's executor connections, then let the step go on.

    The step waits (``until``) for ``<marker>.go``, which is created only after the cut: it is caught in
    flight however slow the machine.
    """
    wait_for(lambda: read_pid(marker) == worker.pid, timeout=WAIT, workers=workers, what=f"{marker.name} written")
    pids = wait_for(lambda: executor_backends(worker), timeout=WAIT, workers=workers,
                    what="the executor connection")
    terminate(pids)
    Path(f"{marker}.go").touch()


def held_until_cut(marker: Path, name: str) -> dict:
    """State that makes step ``name`` write ``<marker>.<name>`` and wait for :func:`cut_executor_connection`."""
    return {"marker": str(marker), "until": {name: f"{marker}.{name}.go"}}


def assert_reconnected_quietly(worker, *, also: tuple[str, ...] = ()) -> None:
    """One warning for the outage, one line when it is over, no error and no traceback; still running.

    ``also`` are other warnings or errors the test expects (each a substring of its line).
    """
    def unexpected(level):
        return [line for line in worker.log_lines(level=level) if not any(a in line for a in also)]

    warnings = unexpected("WARNING")
    assert len(warnings) == 1 and "database connection lost" in warnings[0], worker.describe()
    assert worker.log_lines(level="INFO", containing="database connection restored"), worker.describe()
    assert not unexpected("ERROR"), worker.describe()
    assert "Traceback" not in worker.log(), worker.describe()
    assert worker.alive(), worker.describe()


# -- a terminated executor connection ----------------------------------------------------------------


@IDLE_SERVER_CONNECTION
def test_connection_cut_before_the_checkpoint_resumes_the_step_under_the_same_lease(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ThreeSteps.submit(held_until_cut(marker, "two"))
    w = workers.start("--concurrency", "1", lease_seconds=LEASE, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.two"), workers)

    assert wait_final(handle.id, workers) == "done"
    # No failed and no lost attempt: step two ran again under the same lease, as attempt 1.
    assert steps(handle.id) == [(0, "one", 1, "done"), (1, "two", 1, "done"), (2, "three", 1, "done")]
    # The cut transaction's row rolled back with it: each step's row exists once.
    assert effect_rows(handle.id) == [("one", w.pid), ("two", w.pid), ("three", w.pid)]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


def test_connection_cut_under_a_steps_own_query_is_not_a_failed_attempt(workers, tmp_path):
    marker = tmp_path / "m"
    handle = WritesAfterPause.submit(held_until_cut(marker, "work"))  # max_attempts=1
    w = workers.start("--concurrency", "1", lease_seconds=LEASE, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.work"), workers)

    assert wait_final(handle.id, workers) == "done", ProcedureRun.objects.get(id=handle.id).error
    assert steps(handle.id) == [(0, "work", 1, "done")]
    assert effect_rows(handle.id) == [("work", w.pid)]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


@IDLE_SERVER_CONNECTION
def test_connection_cut_after_a_non_idempotent_step_records_it_without_running_it_again(workers, tmp_path):
    marker = tmp_path / "m"
    charged = Path(f"{marker}.charge")
    handle = ChargeCard.submit(held_until_cut(marker, "charge"))
    w = workers.start("--concurrency", "1", lease_seconds=LEASE, procedures=FAST)
    cut_executor_connection(w, charged, workers)
    written = charged.stat().st_mtime_ns

    assert wait_final(handle.id, workers) == "done"
    assert charged.stat().st_mtime_ns == written  # the step ran once; only its result was written again
    assert steps(handle.id) == [(0, "charge", 1, "done")]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w)


@IDLE_SERVER_CONNECTION
def test_connection_cut_inside_a_non_idempotent_step_parks_it(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ChargesAfterPause.submit(held_until_cut(marker, "charge"))
    w = workers.start("--concurrency", "1", lease_seconds=LEASE, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.charge"), workers)

    assert wait_final(handle.id, workers) == "failed"
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.error, row.failure_can_retry) == ("interrupted during non-idempotent step charge", True)
    assert effect_rows(handle.id) == []  # its own write died with the connection; it is not run again
    assert leases(handle.id) == [(w.worker_id, "failed", True)]
    assert w.log_lines(level="WARNING", containing="parked as failed"), w.describe()
    assert_reconnected_quietly(w, also=("parked as failed",))


def test_connection_cut_during_a_rollback_is_not_a_failed_rollback(workers, tmp_path):
    marker = tmp_path / "m"
    handle = RollsBackAfterPause.submit(held_until_cut(marker, "rollback"))  # max_attempts=1
    w = workers.start("--concurrency", "1", lease_seconds=LEASE, procedures=FAST)
    cut_executor_connection(w, Path(f"{marker}.rollback"), workers)

    assert wait_final(handle.id, workers) == "rolled_back", ProcedureRun.objects.get(id=handle.id).rollback_error
    assert steps(handle.id) == [(0, "book", 1, "done"), (1, "confirm", 1, "failed"), (1, "rollback", 1, "done")]
    assert effect_rows(handle.id) == [("book", w.pid), ("rollback", w.pid)]
    assert leases(handle.id) == [(w.worker_id, "completed", True)]
    assert_reconnected_quietly(w, also=("the supplier said no",))


# -- a PostgreSQL cluster of the test's own, restarted and stopped --------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(url: str, *args: str) -> str:
    env = {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings", "PROCEDURES_JSON": "{}"}
    result = subprocess.run([sys.executable, str(MANAGE), *args], cwd=ROOT, env={**_base_env(), **env},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TESTAPP_EXTRA_TYPES")}


class Throwaway:
    """Reads and submits on the test's own cluster (its database is not pytest-django's)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def submit(self, type_name: str, state: dict) -> str:
        code = (f"from django_procedures import registry; "
                f"print(registry.get({type_name!r}).submit(__import__('json').loads({json.dumps(state)!r})).id)")
        return manage(self.cluster.url, "shell", "--verbosity", "0", "-c", code).strip().splitlines()[-1]

    def rows(self, sql: str, *params) -> list[tuple]:
        with psycopg.connect(self.cluster.url.replace("postgres://", "postgresql://")) as conn:
            return conn.execute(sql, params).fetchall()

    def status(self, pid: str) -> str:
        return self.rows("SELECT status FROM django_procedures_procedurerun WHERE id = %s", pid)[0][0]

    def steps(self, pid: str) -> list[tuple]:
        return self.rows('SELECT index, name, attempt, status FROM django_procedures_step WHERE procedure_id = %s '
                         'ORDER BY index, attempt, id', pid)

    def effect_rows(self, pid: str) -> list[tuple]:
        return self.rows("SELECT step, worker_pid FROM testapp_effect WHERE procedure_id = %s ORDER BY id", pid)

    def leases(self, pid: str) -> list[tuple]:
        return self.rows("SELECT worker, outcome, released_at IS NOT NULL FROM django_procedures_lease "
                         "WHERE procedure_id = %s ORDER BY token", pid)

    def wait_status(self, pid: str, status: str, workers, timeout: float = WAIT) -> None:
        def current():
            try:
                return self.status(pid) == status
            except psycopg.OperationalError:  # the cluster is restarting
                return False
        wait_for(current, timeout=timeout, workers=workers, what=f"procedure {pid} to become {status}",
                 interval=0.2)


@pytest.fixture
def throwaway():
    from benchmarks.soak import Cluster, find_bindir

    try:
        find_bindir()
    except SystemExit as error:
        pytest.skip(str(error))
    base = Path(tempfile.mkdtemp(prefix="procedures-reconnect-"))
    cluster = Cluster(base, free_port())
    try:
        cluster.create()
        manage(cluster.url, "migrate", "--verbosity", "0")
        yield Throwaway(cluster)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_worker_carries_on_through_a_postgresql_restart(throwaway, workers, tmp_path):
    marker = tmp_path / "m"
    go = tmp_path / "go"
    pid = throwaway.submit("testapp.ThreeSteps", {"marker": str(marker), "until": {"two": str(go)}})
    w = workers.start("--concurrency", "2", lease_seconds=LEASE, procedures=FAST,
                      env={"DATABASE_URL": throwaway.cluster.url})
    wait_for(lambda: read_pid(Path(f"{marker}.two")) == w.pid, timeout=WAIT, workers=workers, what="step two")

    throwaway.cluster.restart()  # every connection of the worker dies: main loop, heartbeat, LISTEN, executor
    go.touch()  # step two, caught in flight by the restart, goes on
    throwaway.wait_status(pid, "done", workers)
    assert throwaway.steps(pid) == [(0, "one", 1, "done"), (1, "two", 1, "done"), (2, "three", 1, "done")]
    assert throwaway.effect_rows(pid) == [("one", w.pid), ("two", w.pid), ("three", w.pid)]
    assert throwaway.leases(pid) == [(w.worker_id, "completed", True)]

    # The main loop and LISTEN are back too: the worker listens again on a new connection, and picks up new work.
    def listening() -> bool:
        try:
            return bool(throwaway.rows("SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND (query "
                                       "ILIKE 'LISTEN%%' OR query = 'SELECT 1')",
                                       f"{APPLICATION_NAME_PREFIX}/listen/{w.worker_id}"))
        except psycopg.OperationalError:
            return False

    wait_for(listening, timeout=WAIT, workers=workers, what="the worker to LISTEN again", interval=0.2)
    again = throwaway.submit("testapp.ThreeSteps", {})
    throwaway.wait_status(again, "done", workers)
    assert_reconnected_quietly(w)


def test_worker_carries_on_after_an_outage_longer_than_the_lease(throwaway, workers, tmp_path):
    """Down past the renewal timeout: the step in flight stops, its attempt is lost and resumed; nothing doubles."""
    marker = tmp_path / "m"
    go = tmp_path / "go"
    pid = throwaway.submit("testapp.ThreeSteps", {"marker": str(marker), "until": {"two": str(go)}, "poll": True})
    w = workers.start("--concurrency", "2", lease_seconds=9, procedures=FAST,
                      env={"DATABASE_URL": throwaway.cluster.url})
    wait_for(lambda: read_pid(Path(f"{marker}.two")) == w.pid, timeout=WAIT, workers=workers, what="step two")

    throwaway.cluster.stop()
    # Down until the worker gives its lease up (the renewal timeout, 6 s) -- that line is the only thing that
    # can tell, with the database down -- its lease expires (9 s after the last renewal) before it can renew again.
    wait_for(lambda: w.log_lines(level="WARNING", containing="lease renewal timed out"), timeout=WAIT,
             workers=workers, what="the worker to give its lease up")
    go.touch()  # the next attempt of step two goes straight through
    throwaway.cluster.start()
    throwaway.wait_status(pid, "done", workers)
    steps = throwaway.steps(pid)
    assert [s for s in steps if s[3] == "done"] == [(0, "one", 1, "done"), (1, "two", 2, "done"),
                                                   (2, "three", 1, "done")]
    assert steps[1] == (1, "two", 1, "lost")
    assert throwaway.effect_rows(pid) == [("one", w.pid), ("two", w.pid), ("three", w.pid)]
    assert [outcome for _, outcome, _ in throwaway.leases(pid)] == ["expired", "completed"]
    assert len(w.log_lines(level="WARNING", containing="database connection lost")) == 1, w.describe()
    assert w.log_lines(level="WARNING", containing="lease renewal timed out"), w.describe()
    assert w.log_lines(level="INFO", containing="database connection restored"), w.describe()
    assert not w.log_lines(level="ERROR") and "Traceback" not in w.log(), w.describe()
    assert w.alive()


def test_worker_started_while_postgresql_is_down_waits_for_it(throwaway, workers):
    throwaway.cluster.stop()
    w = workers.start("--concurrency", "2", lease_seconds=LEASE, procedures=FAST,
                      env={"DATABASE_URL": throwaway.cluster.url})
    wait_for(lambda: w.log_lines(level="WARNING", containing="database connection lost") or not w.alive(),
             timeout=WAIT, workers=workers, what="the worker to notice the database is down")
    assert w.alive(), w.describe()  # (and it is still alive below, after the database came back)

    throwaway.cluster.start()
    pid = throwaway.submit("testapp.ThreeSteps", {})
    throwaway.wait_status(pid, "done", workers)
    assert_reconnected_quietly(w)
