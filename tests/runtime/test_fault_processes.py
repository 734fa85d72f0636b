"""Real workers against foreign code that misbehaves: BaseExceptions, a killed thread, unstorable outcomes,
another database failing, and a database that was never migrated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.db import connection

from django_procedures.models import ProcedureRun, Step
from testproject.testapp.faults import (
    BASE_EXCEPTIONS,
    KillsItsThread,
    RaisesBaseException,
    Unstorable,
    UsesOtherDatabase,
)
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps
from tests.runs import lease_outcomes, status_of
from tests.runtime.processes import MANAGE, ROOT, Workers, database_url, read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

FAST = {"SWEEP_SECONDS": 0.5}


def wait_final(pids, *, timeout: float, workers: Workers) -> None:
    pids = list(pids)

    def final():
        return set(ProcedureRun.objects.filter(id__in=pids).values_list("status", flat=True)) <= {"done", "failed"}

    wait_for(final, timeout=timeout, workers=workers, what=f"{len(pids)} procedures to end")


def attempt_statuses(pid) -> list[tuple[int, str]]:
    return list(Step.objects.filter(procedure_id=pid).order_by("attempt", "id").values_list("attempt", "status"))


def runs_of(pid) -> int:
    return Effect.objects.filter(procedure_id=pid).count()


def stop(worker, timeout: float = 30.0) -> int:
    worker.signal(signal.SIGTERM)
    return worker.wait(timeout)


# -- 1. BaseException from a step, and a thread killed under it ----------------------------------------------


def test_base_exceptions_from_steps_are_failed_attempts_and_the_threads_live_on(workers):
    handles = {name: RaisesBaseException.submit({"raise": name}) for name in BASE_EXCEPTIONS}
    w = workers.start("--concurrency", "2", procedures=FAST)
    wait_final([h.id for h in handles.values()], timeout=60, workers=workers)

    for name, handle in handles.items():
        row = ProcedureRun.objects.get(id=handle.id)
        assert row.status == "failed" and row.error.startswith(name), (name, row.error)
        # RetryPolicy(max_attempts=2)
        assert (row.lost, attempt_statuses(handle.id)) == (0, [(1, "failed"), (2, "failed")])
        assert runs_of(handle.id) == 2
        assert lease_outcomes(handle.id) == ["retried", "failed"]

    after = ThreeSteps.submit({})  # eight BaseExceptions later, both threads still serve
    wait_final([after.id], timeout=30, workers=workers)
    assert status_of(after.id) == "done"
    assert stop(w) == 0


def test_a_killed_executor_thread_is_replaced_and_its_claim_not_kept_alive(workers, tmp_path):
    marker = tmp_path / "killed"
    handle = KillsItsThread.submit({"marker": str(marker)})
    w = workers.start("--concurrency", "1", procedures=FAST)
    wait_for(lambda: read_pid(marker) == w.pid, timeout=30, workers=workers, what="the step to start")

    # One thread, and it died: only a new thread can finish the procedure (its second run returns at once).
    wait_final([handle.id], timeout=90, workers=workers)
    row = ProcedureRun.objects.get(id=handle.id)
    assert row.status == "done", workers.describe()
    assert row.output == {"thread": "procedures-exec-0"}
    # The dead thread's claim was left to expire (a lost attempt); had the thread lived long enough to
    # record a failed attempt, that counts as well. Either way it was not held for ever.
    first, *_ = lease_outcomes(handle.id)
    assert first in ("expired", "retried"), lease_outcomes(handle.id)
    assert w.alive()

    after = ThreeSteps.submit({})
    wait_final([after.id], timeout=30, workers=workers)
    assert status_of(after.id) == "done"
    assert stop(w) == 0


def test_a_sigterm_does_not_release_the_claim_of_a_dead_thread_uncounted(workers, tmp_path):
    marker = tmp_path / "killed"
    handle = KillsItsThread.submit({"marker": str(marker)})
    a = workers.start("--concurrency", "1", procedures=FAST)
    wait_for(lambda: read_pid(marker) == a.pid, timeout=30, workers=workers, what="the step to start")
    assert stop(a) == 0  # the thread is dead or dying: its claim must be left to expire, not released

    b = workers.start("--concurrency", "1", procedures=FAST)
    wait_final([handle.id], timeout=90, workers=workers)
    assert status_of(handle.id) == "done"
    first, *_ = lease_outcomes(handle.id)
    assert first in ("expired", "retried"), lease_outcomes(handle.id)  # counted: lost, or a failed attempt
    assert stop(b) == 0


# -- 5. Outcomes the database cannot take as they are ------------------------------------------------------


UNSTORABLE = {  # kind: (text in the error, attempts)
    "nul_error": ("ValueError: badtext", 2),
    "surrogate_error": ("ValueError: half a pair: \\ud800", 2),
    "str_raises": ("_Unprintable", 2),
    "deep_state": ("nested more than 100 levels deep", 1),
    "big_int": ("state['n'] is an integer of more than", 1),
    "surrogate_state": ("state['s'] contains a lone surrogate", 1),
    "deep_output": ("output['a']", 1),
}


def test_an_outcome_that_cannot_be_stored_fails_the_step_instead_of_losing_the_worker(workers):
    handles = {kind: Unstorable.submit({"kind": kind}) for kind in UNSTORABLE}
    w = workers.start("--concurrency", "2", procedures=FAST)
    wait_final([h.id for h in handles.values()], timeout=60, workers=workers)

    for kind, handle in handles.items():
        text, attempts = UNSTORABLE[kind]
        row = ProcedureRun.objects.get(id=handle.id)
        assert row.status == "failed" and text in row.error, (kind, row.error)
        assert "poisonous" not in row.error and "\x00" not in row.traceback
        assert (row.lost, attempt_statuses(handle.id)) == (0, [(n, "failed") for n in range(1, attempts + 1)]), kind
        assert runs_of(handle.id) == attempts, kind  # the non-atomic step ran once per counted attempt
    assert stop(w) == 0


# -- 6. Another database alias failing inside a step ---------------------------------------------------------


@pytest.mark.parametrize("mode", ["missing", "terminate"])
def test_an_error_of_another_database_is_the_steps_failure_not_a_disconnect(workers, mode):
    other = database_url() + ("_no_such_database" if mode == "missing" else "")
    handle = UsesOtherDatabase.submit({"mode": mode})
    w = workers.start(procedures=FAST, env={"OTHER_DATABASE_URL": other})
    wait_final([handle.id], timeout=60, workers=workers)

    row = ProcedureRun.objects.get(id=handle.id)
    assert row.status == "failed" and "OperationalError" in row.error and "poisonous" not in row.error, row.error
    # RetryPolicy(max_attempts=3): three failed attempts with backoff, none lost, no reconnect loop.
    assert (row.lost, attempt_statuses(handle.id)) == (0, [(1, "failed"), (2, "failed"), (3, "failed")])
    assert runs_of(handle.id) == 3
    assert lease_outcomes(handle.id) == ["retried", "retried", "failed"]
    assert stop(w) == 0


# -- 13. A database without the tables ---------------------------------------------------------------------


@pytest.fixture
def empty_database():
    name = f"{connection.settings_dict['NAME']}_unmigrated"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    yield database_url().rsplit("/", 1)[0] + f"/{name}"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_worker_on_an_unmigrated_database_exits_and_says_to_migrate(workers, empty_database):
    w = workers.start(procedures=FAST, env={"DATABASE_URL": empty_database})
    assert w.wait(60) == 1
    log = w.log()
    assert "CommandError" in log and "manage.py migrate" in log and "django_procedures_procedurerun" in log, log


def test_a_submit_to_an_unmigrated_database_says_to_migrate(empty_database):
    code = ("from testproject.testapp.procedures import ThreeSteps\n"
            "from django_procedures.exceptions import ProceduresNotMigrated\n"
            "try:\n    ThreeSteps.submit({})\n"
            "except ProceduresNotMigrated as error:\n    print('refused:', error)\n")
    done = subprocess.run([sys.executable, str(MANAGE), "shell", "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=_env(empty_database))
    assert "refused:" in done.stdout and "manage.py migrate" in done.stdout, done.stdout + done.stderr


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
