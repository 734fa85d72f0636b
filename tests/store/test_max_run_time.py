"""max_run_time counts from a run's start, and is enforced without a ticker (maintenance) and by its worker."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules
from django_procedures.store.claim import claim
from django_procedures.store.maintenance import maintain
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LIMIT = timedelta(seconds=30)


def make(name="limited", **options) -> Schedule:
    options.setdefault("period", timedelta(hours=1))
    with clock.frozen_at(T0):
        schedule, _ = register_schedule(name, Heartbeat, max_run_time=LIMIT, **options)
    return schedule


def start_run(at: datetime):
    with clock.frozen_at(at):
        claims = claim("w", type_names=[Heartbeat.type_name], lease_seconds=3600)
    assert len(claims) == 1
    return claims[0]


def status_of(schedule: Schedule) -> str:
    return ProcedureRun.objects.get(schedule=schedule).status


def test_time_waiting_in_the_queue_does_not_count():
    s = make()
    tick(T0)  # the run is created at T0 and waits for a worker
    assert tick(T0 + 2 * LIMIT).timed_out == 0
    assert status_of(s) == "ready"
    started = start_run(T0 + 3 * LIMIT)
    assert started.deadline == T0 + 4 * LIMIT  # the claim carries it: the worker holding the run enforces it
    with clock.frozen_at(T0 + 4 * LIMIT - timedelta(seconds=1)):
        assert maintain().timed_out == 0


def test_every_maintenance_pass_enforces_it_without_a_ticker():
    s = make()
    tick(T0)
    start_run(T0 + timedelta(seconds=5))
    with clock.frozen_at(T0 + timedelta(seconds=36)):
        assert maintain().timed_out == 1
    run = ProcedureRun.objects.get(schedule=s)
    assert run.status == "cancelled"
    assert run.error == "cancelled by its schedule: ran past max_run_time of 0:00:30 (counted from its start)"
    s.refresh_from_db()
    assert (s.failures, s.active_runs) == (1, 0)


@pytest.mark.parametrize("status", ["waiting", "retrying", "ready"])
def test_a_run_in_no_workers_hands_is_enforced_too(status):
    s = make()
    tick(T0)
    started = start_run(T0)
    # Waiting for its children, retrying after a failed attempt, or released at a shutdown: no lease.
    ProcedureRun._writer.filter(id=started.id).update(status=status, lease_owner="", lease_expires_at=None)
    with clock.frozen_at(T0 + LIMIT + timedelta(seconds=1)):
        assert maintain().timed_out == 1
    assert status_of(s) == "cancelled"


def test_a_run_without_a_limit_or_a_schedule_carries_no_deadline():
    with clock.frozen_at(T0):
        register_schedule("free", Heartbeat, period=timedelta(hours=1))
    tick(T0)
    assert start_run(T0).deadline is None
    Heartbeat.submit()
    assert start_run(T0).deadline is None


def test_a_limit_raised_after_the_claim_is_read_again():
    s = make()
    tick(T0)
    held = start_run(T0)
    with clock.frozen_at(T0):
        register_schedule("limited", Heartbeat, period=timedelta(hours=1), max_run_time=10 * LIMIT, update=True)
    from django_procedures.store.overdue import cancel_overdue

    assert cancel_overdue(T0 + 2 * LIMIT, ids=[held.id]) == []  # past the claim's deadline, not the new limit
    assert status_of(s) == "running"
    assert schedules.trigger("limited")["skipped"] == 1  # the slot is still taken


@pytest.mark.postgres
def test_a_failing_recovery_sweep_does_not_stop_the_rest_of_the_maintenance_pass():
    from django.db import DatabaseError, connection
    from django.utils import timezone

    s = make()
    tick(T0)
    start_run(T0)
    poisoned = Heartbeat.submit()
    ProcedureRun._writer.filter(id=poisoned.id).update(status="running", lease_token=1, lease_owner="gone",
                                                       lease_expires_at=timezone.now() - timedelta(hours=1),
                                                       type_name="testapp.Poisoned", schedule=None)
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$")
        cursor.execute(f"CREATE TRIGGER test_refuse BEFORE UPDATE ON {ProcedureRun._meta.db_table} FOR EACH ROW "
                       "WHEN (OLD.type_name = 'testapp.Poisoned') EXECUTE FUNCTION test_refuse()")
    with clock.frozen_at(T0 + LIMIT + timedelta(seconds=1)), pytest.raises(DatabaseError, match="refused by"):
        maintain()
    assert status_of(s) == "cancelled", "the sweep failed, the max_run_time part still ran"


def test_a_manual_retry_starts_the_count_again():
    from django_procedures.policy.retry import FailDecision
    from django_procedures.store import failures, operations

    s = make()
    tick(T0)
    held = start_run(T0)
    with clock.frozen_at(T0 + timedelta(seconds=5)):
        failures.fail_attempt(held, None, "boom", "", FailDecision("boom", manual_retry=True))
    with clock.frozen_at(T0 + 10 * LIMIT):  # long after the run first started
        operations.retry(ProcedureRun.objects.get(schedule=s).id, by="ops")
        assert maintain().timed_out == 0
    assert status_of(s) == "ready"
    again = start_run(T0 + 11 * LIMIT)
    assert again.deadline == T0 + 11 * LIMIT  # from the retry (its queue wait after the retry counts)
    with clock.frozen_at(T0 + 11 * LIMIT + timedelta(seconds=1)):
        assert maintain().timed_out == 1
