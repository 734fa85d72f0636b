"""A real worker on a SQLite database file: an atomic step that holds the only write lock longer than the lease.

The step's transaction (``BEGIN IMMEDIATE``) holds SQLite's write lock for as
long as it runs, so the worker's own heartbeat cannot write a renewal. That is
no lost lease: nobody else can write either, so nobody can take it. The step
must finish and commit once, and a web process's submit meanwhile must wait for
the lock rather than fail with "database is locked".

These tests start their own processes on their own database file (the
``subprocess`` marker keeps them to the PostgreSQL leg, whose test database they
do not use); they read that file with the ``sqlite3`` module.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.processes import MANAGE, ROOT, Workers, wait_for

pytestmark = [pytest.mark.subprocess]

#: A lease far shorter than the step, and a busy timeout shorter than the step too (the worker's), so that
#: before the fix a renewal gave up waiting for the step's lock and the step was lost and run again.
LEASE, STEP_SECONDS, WORKER_BUSY_TIMEOUT = 3.0, 10.0, 4.0
WAIT = 120


@pytest.fixture
def sqlite_file(tmp_path) -> Path:
    path = tmp_path / "procedures.sqlite3"
    manage("migrate", "--verbosity", "0", database=path)
    return path


def environment(database: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TESTAPP_EXTRA_TYPES", "PROCEDURES_JSON")}
    return {**env, "DATABASE_URL": f"sqlite:///{database}", "DJANGO_SETTINGS_MODULE": "testproject.settings",
            **extra}


def manage(*args: str, database: Path, timeout: float = WAIT) -> str:
    done = subprocess.run([sys.executable, str(MANAGE), *args], cwd=ROOT, env=environment(database),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def submit(database: Path, type_name: str, state: dict) -> str:
    """Submit from another process, as a web request would: its id."""
    code = (f"from django_procedures.registry import get; print(get({type_name!r}).submit({state!r}).id)")
    return manage("shell", "-c", code, database=database).strip().splitlines()[-1]


def query(database: Path, sql: str, *params) -> list[tuple]:
    with sqlite3.connect(database, timeout=WAIT) as db:
        return db.execute(sql, params).fetchall()


def status_of(database: Path, pid: str) -> str:
    return query(database, "SELECT status FROM django_procedures_procedurerun WHERE id = ?", pid.replace("-", ""))[0][0]


def test_an_atomic_step_longer_than_the_lease_finishes_once_on_sqlite(sqlite_file, tmp_path, workers: Workers):
    marker = tmp_path / "holding"
    long = submit(sqlite_file, "testapp.HoldsTheWriteLock", {"marker": str(marker), "sleep": STEP_SECONDS})
    w = workers.start(lease_seconds=LEASE, env={"DATABASE_URL": f"sqlite:///{sqlite_file}",
                                                "SQLITE_TIMEOUT": str(WORKER_BUSY_TIMEOUT)},
                      procedures={"LEASE_SECONDS": LEASE, "POLL_SECONDS": 0.2, "SWEEP_SECONDS": 0.5})
    wait_for(marker.exists, timeout=WAIT, workers=workers, what="the step to hold the write lock")

    # A web process submits while the step holds the lock: it waits for it (busy timeout 20 s) and succeeds.
    after = submit(sqlite_file, "testapp.ThreeSteps", {})

    wait_for(lambda: status_of(sqlite_file, long) in ("done", "failed")
             or query(sqlite_file, "SELECT lost FROM django_procedures_procedurerun WHERE id = ?",
                      long.replace("-", ""))[0][0] > 0,
             timeout=WAIT, workers=workers, what="the long step's procedure to end (or be counted lost)")
    pid = long.replace("-", "")
    assert query(sqlite_file, "SELECT status, lost FROM django_procedures_procedurerun WHERE id = ?", pid) \
        == [("done", 0)], w.describe()
    assert query(sqlite_file, "SELECT name, attempt, status FROM django_procedures_step WHERE procedure_id = ?",
                 pid) == [("hold", 1, "done")]
    assert query(sqlite_file, "SELECT outcome FROM django_procedures_lease WHERE procedure_id = ?", pid) \
        == [("completed",)]
    assert query(sqlite_file, "SELECT count(*) FROM testapp_effect WHERE procedure_id = ?", pid) == [(1,)]
    assert not w.log_lines(containing="renewal"), w.describe()
    assert not w.log_lines(level="ERROR"), w.describe()  # nor did its main thread wait for its own step's lock
    # It held the lock longer than the worker's busy timeout: a writer waiting that long failed. Said once.
    (warning,) = w.log_lines(level="WARNING", containing="write lock")
    assert "timeout" in warning and "hold" in warning, warning

    wait_for(lambda: status_of(sqlite_file, after) == "done", timeout=WAIT, workers=workers,
             what="the procedure submitted during the step")
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0


def test_limits_hold_with_a_worker_on_sqlite(sqlite_file, workers: Workers):
    """The embedded default: limited procedures run on SQLite (one writer, one worker thread), each slot freed."""
    ids = [submit(sqlite_file, "testapp.Limited", {"concurrency": [["crm", 1]], "hold": 0.1}) for _ in range(4)]
    ids += [submit(sqlite_file, "testapp.Limited", {"rate": [["api", 10, 60]]})]
    workers.start("--concurrency", "1", lease_seconds=10.0, env={"DATABASE_URL": f"sqlite:///{sqlite_file}"},
                  procedures={"POLL_SECONDS": 0.2, "SWEEP_SECONDS": 0.5})
    wait_for(lambda: all(status_of(sqlite_file, i) == "done" for i in ids), timeout=WAIT, workers=workers,
             what="the limited procedures to finish")
    # One at a time: each step's enter and exit rows, in the order they were numbered, never interleave.
    rows = query(sqlite_file, "SELECT step FROM testapp_effect WHERE step IN ('enter', 'exit') ORDER BY id")
    assert [r[0] for r in rows] == ["enter", "exit"] * len(ids)
    assert query(sqlite_file, "SELECT count(*) FROM django_procedures_limitslot WHERE holder_id IS NOT NULL") == [(0,)]


def test_async_steps_run_on_a_sqlite_worker(sqlite_file, tmp_path, workers: Workers):
    """The event loop on SQLite: one database thread for the loop's bookkeeping, the async ORM beside it."""
    ids = [submit(sqlite_file, "testproject.testapp.async_steps.AsyncAwaits", {"seconds": 0.5}) for _ in range(3)]
    counted = submit(sqlite_file, "testproject.testapp.async_steps.AsyncCounts", {})
    w = workers.start(lease_seconds=10.0, env={"DATABASE_URL": f"sqlite:///{sqlite_file}"},
                      procedures={"POLL_SECONDS": 0.2})
    wait_for(lambda: all(status_of(sqlite_file, pid) == "done" for pid in [*ids, counted]), timeout=WAIT,
             workers=workers, what="the async procedures to finish on SQLite")
    for pid in ids:
        assert query(sqlite_file, "SELECT step FROM testapp_effect WHERE procedure_id = ? ORDER BY id",
                     pid.replace("-", "")) == [("wait",), ("record",)]
    assert not w.log_lines(level="ERROR"), w.describe()
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
