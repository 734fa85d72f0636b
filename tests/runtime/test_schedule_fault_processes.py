"""Faults of schedules in real worker processes (PostgreSQL): broken schedules, failing chores, max_run_time.

Broken schedules are stored past validation with a queryset update, as a fixture, a data migration, an
older version of the app or a worker whose tzdata lacks the zone would leave them.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_procedures import register_schedule
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules as schedule_ops
from testproject.testapp.procedures import Heartbeat, Parent, ThreeSteps
from tests.runtime.processes import Workers, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


def status(procedure_id) -> str:
    return ProcedureRun.objects.filter(id=procedure_id).values_list("status", flat=True).first() or ""


def done_runs(schedule: Schedule) -> int:
    return ProcedureRun.objects.filter(schedule=schedule, status="done").count()


def broken_schedules() -> list[Schedule]:
    zone = register_schedule("zone", Heartbeat, cron="* * * * *", timezone="Europe/Berlin")[0]
    overflow = register_schedule("overflow", Heartbeat, period=SECOND)[0]
    gone = register_schedule("gone", Heartbeat, period=SECOND)[0]
    Schedule._writer.filter(id=zone.id).update(timezone="Mars/Olympus", next_tick_at=timezone.now())
    Schedule._writer.filter(id=overflow.id).update(period=timedelta(days=3_000_000))
    Schedule._writer.filter(id=gone.id).update(procedure="gone.Removed")
    return [zone, overflow, gone]


def stop(worker, workers: Workers) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, workers.describe()


def test_a_scheduler_worker_keeps_claiming_and_ticking_beside_broken_schedules(workers):
    healthy = register_schedule("healthy", Heartbeat, period=SECOND)[0]
    broken = broken_schedules()
    first = ThreeSteps.submit()
    worker = workers.start("--with-scheduler", "--concurrency", "2", procedures={"TICK_SECONDS": 0.25})

    wait_for(lambda: status(first.id) == "done", timeout=60, what="the submitted procedure to be claimed and run",
             workers=workers)
    wait_for(lambda: done_runs(healthy) >= 3, timeout=60, what="three runs of the healthy schedule",
             workers=workers)
    wait_for(lambda: not Schedule.objects.filter(id__in=[s.id for s in broken], last_error="").exists(), timeout=60,
             what="each broken schedule's error recorded on it", workers=workers)
    second = ThreeSteps.submit()  # after the errors: claiming still goes on
    wait_for(lambda: status(second.id) == "done", timeout=60, what="a procedure submitted later to run",
             workers=workers)
    errors = dict(Schedule.objects.filter(id__in=[s.id for s in broken]).values_list("name", "last_error"))
    assert errors["zone"].startswith("time zone 'Mars/Olympus' is not in this process's time zone data")
    assert errors["overflow"].startswith("a tick time is past what can be stored")
    assert errors["gone"].startswith("no procedure class is registered as 'gone.Removed'")
    assert not ProcedureRun.objects.filter(schedule__in=broken).exists()

    schedule_ops.pause(healthy, reason="test over")
    wait_for(lambda: not Schedule.objects.filter(id=healthy.id, active_runs__gt=0).exists(), timeout=30,
             what="the healthy schedule's last run to end", workers=workers)
    stop(worker, workers)


def test_burst_with_scheduler_exits_beside_a_broken_schedule(workers):
    """A broken schedule stays due: were it counted as due now, --burst would never find the queue empty."""
    broken_schedules()
    submitted = ThreeSteps.submit()
    worker = workers.start("--burst", "--with-scheduler", procedures={"TICK_SECONDS": 0.25})
    assert worker.wait(60) == 0, workers.describe()
    assert status(submitted.id) == "done"
    assert not Schedule.objects.filter(last_error="").exists()


@pytest.fixture
def refused_updates_of_poisoned_rows(transactional_db):
    """A trigger that makes PostgreSQL refuse every update of a run whose type is ``testapp.Poisoned``."""
    table = ProcedureRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("CREATE FUNCTION test_refuse_poisoned() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$ BEGIN RAISE EXCEPTION 'this test refuses updates of poisoned rows'; END $$")
        cursor.execute(f"CREATE TRIGGER test_refuse_poisoned BEFORE UPDATE ON {table} FOR EACH ROW "
                       "WHEN (OLD.type_name = 'testapp.Poisoned') EXECUTE FUNCTION test_refuse_poisoned()")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS test_refuse_poisoned ON {table}")
        cursor.execute("DROP FUNCTION IF EXISTS test_refuse_poisoned()")


def test_a_failing_maintenance_pass_does_not_stop_claiming(workers, refused_updates_of_poisoned_rows):
    poisoned = ThreeSteps.submit()
    # A run whose lease expired, which the recovery sweep cannot write back: every maintenance pass fails.
    ProcedureRun._writer.filter(id=poisoned.id).update(status="running", lease_token=1, lease_owner="gone",
                                                       lease_expires_at=timezone.now() - HOUR,
                                                       type_name="testapp.Poisoned")
    submitted = ThreeSteps.submit()
    worker = workers.start(procedures={"SWEEP_SECONDS": 0.2})
    wait_for(lambda: status(submitted.id) == "done", timeout=60, what="the healthy procedure to run",
             workers=workers)
    later = ThreeSteps.submit()
    wait_for(lambda: status(later.id) == "done", timeout=60, what="a procedure submitted later to run",
             workers=workers)
    assert status(poisoned.id) == "running"  # the sweep kept failing on it
    stop(worker, workers)


# -- max_run_time: counted from the start, enforced by the workers, no ticker -----------------------


def test_the_worker_holding_a_run_cancels_it_past_max_run_time(workers):
    s = register_schedule("slow", Heartbeat, period=HOUR, initial_delay=HOUR, max_run_time=2 * SECOND,
                          state={"sleep": {"beat": 600}, "poll": True})[0]
    schedule_ops.trigger(s)
    run = ProcedureRun.objects.get(schedule=s)
    # No ticker, and no maintenance pass after the first: the heartbeat of the worker holding the run acts.
    worker = workers.start("--concurrency", "1", lease_seconds=1.5, procedures={"SWEEP_SECONDS": 3600})

    wait_for(lambda: status(run.id) == "cancelled", timeout=60, what="the run cancelled past its max_run_time",
             workers=workers)
    run.refresh_from_db()
    assert run.error == "cancelled by its schedule: ran past max_run_time of 0:00:02 (counted from its start)"
    assert run.finished_at - run.started_at >= 2 * SECOND
    s.refresh_from_db()
    assert (s.failures, s.active_runs) == (1, 0)
    after = ThreeSteps.submit()  # its thread came back: the step saw ensure_active() raise
    wait_for(lambda: status(after.id) == "done", timeout=60, what="the worker's thread to be free again",
             workers=workers)
    stop(worker, workers)


def test_a_run_waiting_for_its_children_is_cancelled_past_max_run_time_by_maintenance(workers):
    s = register_schedule("tree", Parent, period=HOUR, initial_delay=HOUR, max_run_time=2 * SECOND,
                          state={"fanout": 1, "child_sleep": {"work": 600}})[0]
    schedule_ops.trigger(s)
    parent = ProcedureRun.objects.get(schedule=s)
    worker = workers.start("--concurrency", "2", "--shutdown-timeout", "2", lease_seconds=2,
                           procedures={"SWEEP_SECONDS": 0.5})

    wait_for(lambda: status(parent.id) == "cancelled", timeout=60, what="the waiting parent cancelled",
             workers=workers)
    child = ProcedureRun.objects.get(parent_id=parent.id)
    assert child.status == "cancelled", "its subtree is cancelled with it"
    s.refresh_from_db()
    assert (s.failures, s.active_runs) == (1, 0)
    stop(worker, workers)


def test_time_waiting_in_the_queue_does_not_count_against_max_run_time(workers):
    s = register_schedule("queued", Heartbeat, period=HOUR, initial_delay=HOUR, max_run_time=3 * SECOND)[0]
    schedule_ops.trigger(s)
    run = ProcedureRun.objects.get(schedule=s)
    wait_for(lambda: timezone.now() > run.created_at + 4 * SECOND, timeout=30,
             what="the run to wait in the queue longer than its max_run_time")
    # With a ticker, which cancelled such runs by their creation time.
    worker = workers.start("--with-scheduler", procedures={"TICK_SECONDS": 0.25})
    wait_for(lambda: status(run.id) in ("done", "cancelled"), timeout=60, what="the run to end", workers=workers)
    assert status(run.id) == "done"
    stop(worker, workers)
