"""Real workers lose their database connections and carry on without a human.

The tests either terminate the worker's own backends on the test database
(found by the ``application_name`` worker connections carry) or restart a
throwaway PostgreSQL cluster the test creates for itself; never anything else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from django_procedures.runtime.worker import APPLICATION_NAME_PREFIX
from testproject.testapp.procedures import ThreeSteps
from tests.runtime.processes import Workers, wait_for

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
