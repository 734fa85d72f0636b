"""Workers behind a real PgBouncer in transaction mode (Debian's pgbouncer, started by the test as postgres).

What transaction pooling cannot give a worker goes elsewhere: LISTEN over the direct ``LISTEN_DATABASE``
alias, the idle-in-transaction timeout set per step transaction instead of per session. And the faults of a
pooler: PgBouncer killed and restarted under running workers, their server connections terminated; nothing
lost, nothing run twice.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from benchmarks.pgbouncer import WORKER_SETTINGS, PgBouncer, find_pgbouncer
from django_procedures.models import ProcedureRun
from testproject.testapp.models import Effect
from testproject.testapp.procedures import SessionProbe, ThreeSteps
from tests.runtime.processes import Workers, database_url, wait_for

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(find_pgbouncer() is None,
                       reason="pgbouncer is not installed (apt-get install pgbouncer; .ci/run installs it)"),
]


@pytest.fixture
def start_bouncer(workers):
    """Starts a PgBouncer of this test's own in front of the test database's server."""
    started: list[PgBouncer] = []

    def start(pool_size: int = 20) -> PgBouncer:
        b = PgBouncer(server_port=int(connection.settings_dict["PORT"] or 5432), pool_size=pool_size)
        started.append(b)
        b.start()
        return b

    yield start
    workers.close()  # before their PgBouncer goes: they would log its going
    for b in started:
        b.remove()  # cuts its server connections too, so that the test database can be flushed and dropped


@pytest.fixture
def bouncer(start_bouncer):
    return start_bouncer()


def start_behind(workers: Workers, bouncer: PgBouncer, *args: str, procedures: dict | None = None, **kwargs):
    """A worker whose default alias goes through ``bouncer``; LISTEN goes directly to the test database."""
    return workers.start(*args, procedures={**WORKER_SETTINGS, **(procedures or {})},
                         env={"DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
                              "LISTEN_DATABASE_URL": database_url()}, **kwargs)


def server_pids(bouncer: PgBouncer) -> set[int]:
    """The PostgreSQL backends of PgBouncer's server connections."""
    import psycopg.rows

    with psycopg.connect(host="127.0.0.1", port=bouncer.port, user="postgres", dbname="pgbouncer",
                         autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return {row["remote_pid"] for row in conn.execute("SHOW SERVERS").fetchall()}


def listen_backend(worker_id: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%'",
                       [f"procedures-worker/listen/{worker_id}"])
        row = cursor.fetchone()
    return row[0] if row else None


def test_an_idle_worker_behind_pgbouncer_listens_directly_and_is_woken(workers, bouncer):
    # Polling, sweeping and reporting every 10 minutes: only a NOTIFY heard on the direct connection starts the
    # work within the wait below.
    w = start_behind(workers, bouncer, "--concurrency", "1",
                     procedures={"POLL_SECONDS": 600.0, "SWEEP_SECONDS": 600.0, "STATS_SECONDS": 600.0})
    pid = wait_for(lambda: listen_backend(w.worker_id), timeout=60, what="the worker's LISTEN connection",
                   workers=workers)
    assert pid not in server_pids(bouncer), "the LISTEN connection went through PgBouncer"
    handle = ThreeSteps.submit()
    wait_for(lambda: handle.refresh().is_finished, timeout=120, what="the procedure to finish", workers=workers)
    assert handle.status == "done"


def test_session_settings_stay_in_the_step_transaction_behind_pgbouncer(workers, start_bouncer):
    # One server connection for everything: whatever the worker set for its session, the next client sees.
    bouncer = start_bouncer(pool_size=1)
    start_behind(workers, bouncer, "--concurrency", "1", procedures={"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 90.0})
    handle = SessionProbe.submit()
    wait_for(lambda: handle.refresh().is_finished, timeout=60, what="the probe to finish", workers=workers)
    assert handle.status == "done", handle.error
    assert handle.output["idle_in_transaction_session_timeout"] == "90s"
    assert handle.output["application_name"].startswith("procedures-worker/exec-0/")
    with psycopg.connect(bouncer.url(connection.settings_dict["NAME"]), autocommit=True) as other_client:
        leaked = other_client.execute("SELECT current_setting('idle_in_transaction_session_timeout')").fetchone()
    assert leaked == ("0",), "a worker's session setting reached another client of the pool"


def terminate_server_connections(bouncer: PgBouncer) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE pid = ANY(%s)", [sorted(server_pids(bouncer))])
        return cursor.fetchone()[0]


def test_pgbouncer_restarted_and_server_connections_killed_lose_nothing_and_run_nothing_twice(workers, bouncer):
    handles = ThreeSteps.submit_many([{"sleep": {"one": 0.2, "two": 0.2, "three": 0.2}} for _ in range(24)])
    for _ in range(2):
        start_behind(workers, bouncer, "--concurrency", "4", procedures={"SWEEP_SECONDS": 0.5})

    def effects() -> int:
        return Effect.objects.count()

    wait_for(lambda: effects() >= 8, timeout=120, what="work in flight", workers=workers)
    bouncer.restart()  # SIGKILL and start: every client and server connection through it is cut
    done_before = effects()
    wait_for(lambda: effects() >= done_before + 8, timeout=120, what="work after the restart", workers=workers)
    assert terminate_server_connections(bouncer) > 0
    wait_for(lambda: all(h.refresh().is_finished for h in handles), timeout=240, what="every procedure to finish",
             workers=workers)

    assert {h.status for h in handles} == {"done"}
    assert all(h.output == {"done": ["one", "two", "three"]} for h in handles)
    # An atomic step's Effect row commits with its checkpoint: one row per step means each ran exactly once.
    per_step = Effect.objects.values_list("procedure_id", "step")
    assert sorted(per_step) == sorted((h.id, name) for h in handles for name in ("one", "two", "three"))
    assert ProcedureRun.objects.filter(status="running").count() == 0
    assert all(w.alive() for w in workers.started), workers.describe()
    assert not any("Traceback" in w.log() for w in workers.started), workers.describe()


def test_an_event_sent_to_a_procedure_waiting_behind_pgbouncer_wakes_its_idle_worker(workers, bouncer):
    from django_procedures import send_event
    from testproject.testapp.procedures import Approval

    w = start_behind(workers, bouncer, "--concurrency", "1",
                     procedures={"POLL_SECONDS": 600.0, "SWEEP_SECONDS": 600.0, "STATS_SECONDS": 600.0})
    wait_for(lambda: listen_backend(w.worker_id), timeout=60, what="the worker's LISTEN connection", workers=workers)
    handle = Approval.submit({"names": ["approved"]})
    wait_for(lambda: handle.refresh().waiting_for == "event", timeout=120, what="the wait", workers=workers)
    assert send_event(handle, "approved", {"ok": True}).delivered
    wait_for(lambda: handle.refresh().is_finished, timeout=120, what="the procedure to finish", workers=workers)
    assert ProcedureRun.objects.get(id=handle.id).output["first"]["payload"] == {"ok": True}
