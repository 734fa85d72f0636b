"""A schedule that cannot tick: refused at the door, and if stored anyway, its error stays its own.

Rows "stored past validation" stand for what a fixture, a data migration, an older version of the app
or a worker whose tzdata lacks a zone produce: they are written with a queryset update here.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import broken, operations
from django_procedures.store.ticks import next_tick_due
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
HUGE = timedelta(days=3_000_000)


def make(name: str, **options) -> Schedule:
    options.setdefault("period", None if options.get("cron") else MIN)
    with clock.frozen_at(T0):
        schedule, created = register_schedule(name, Heartbeat, **options)
    assert created
    return schedule


def store_past_validation(schedule: Schedule, **fields) -> None:
    Schedule._writer.filter(pk=schedule.pk).update(**fields)


def fresh(schedule: Schedule) -> Schedule:
    return Schedule.objects.get(pk=schedule.pk)


# -- at the door ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "field", "message"), [
    ({"period": HUGE}, "period", "period must be at most 100 years (36525 days), so the times computed from it "
                                 "can be stored; got 3000000 days"),
    ({"period": 1e12}, "period", "period must be at most 100 years"),
    ({"period": float("inf")}, "period", "period must be at most 100 years"),
    ({"initial_delay": timedelta(days=40_000)}, "initial_delay", "initial_delay must be at most 100 years"),
    ({"max_run_time": HUGE}, "max_run_time", "max_run_time must be at most 100 years"),
    ({"max_run_time": 0}, "max_run_time", "max_run_time must be positive; got 0 seconds"),
    ({"initial_delay": -5}, "initial_delay", "initial_delay must not be negative; got -5 seconds"),
    ({"mode": "fixed_rate_overlap", "max_concurrency": 10**9}, "max_concurrency",
     "max_concurrency must be at most 10000"),
    ({"name": "n" * 1000}, "name", "name must be at most 200 characters; got 1000"),
    ({"name": "bad\x00name"}, "name", "name must not contain a NUL character"),
    ({"timezone": "Europe/" + "x" * 100}, "timezone", "unknown time zone"),
])
def test_durations_and_counts_are_bounded_to_what_can_be_stored(options, field, message):
    options = {"name": "bad", "period": MIN, **options}
    with pytest.raises(ValidationError) as info:
        register_schedule(options.pop("name"), Heartbeat, **options)
    assert message in " ".join(info.value.message_dict[field])
    assert not Schedule.objects.exists()


def test_clean_bounds_the_durations_as_the_admin_form_sees_them():
    s = Schedule(name="x", procedure=Heartbeat.type_name, period=HUGE)
    with pytest.raises(ValidationError) as info:
        s.clean()
    assert "at most 100 years" in " ".join(info.value.message_dict["period"])


def test_clean_bounds_the_name_to_what_the_column_holds():
    s = Schedule(name="n" * 201, procedure=Heartbeat.type_name, period=MIN)
    with pytest.raises(ValidationError) as info:
        s.clean()
    assert info.value.message_dict["name"] == ["name must be at most 200 characters; got 201"]
    Schedule(name="n" * 200, procedure=Heartbeat.type_name, period=MIN).clean()


def test_durations_may_be_numbers_of_seconds():
    s = make("seconds", period=2, initial_delay=0.5, max_run_time=90)
    assert (s.period, s.initial_delay, s.max_run_time) == (timedelta(seconds=2), timedelta(seconds=0.5),
                                                            timedelta(seconds=90))
    assert s.next_tick_at == T0 + timedelta(seconds=0.5)
    with clock.frozen_at(T0):
        _, created = register_schedule("seconds", Heartbeat, period=timedelta(seconds=2), initial_delay=0.5,
                                       max_run_time=timedelta(seconds=90))
    assert not created and fresh(s).period == timedelta(seconds=2)  # the same definition: nothing differs


@pytest.mark.parametrize(("options", "message"), [
    ({"period": "5m"}, "period must be a timedelta (for example timedelta(minutes=5)) or a number of seconds, or "
                       "None for none; got str '5m'"),
    ({"period": True}, "period must be a timedelta"),
    ({"initial_delay": "1h"}, "initial_delay must be a timedelta"),
    ({"max_run_time": [1]}, "max_run_time must be a timedelta"),
    ({"mode": 1}, "mode must be one of 'fixed_delay', 'fixed_rate', 'fixed_rate_overlap' (a string); got int 1"),
    ({"missed": None}, "missed must be one of 'skip', 'coalesce_latest', 'catch_up'"),
    ({"max_concurrency": "2"}, "max_concurrency must be a whole number (an int); got str '2'"),
    ({"max_concurrency": True}, "max_concurrency must be a whole number"),
    ({"max_pending": 1.5}, "max_pending must be a whole number"),
    ({"cron": 5, "period": None}, "cron must be a string such as '0 3 * * *', or None; got int 5"),
    ({"timezone": 1}, "timezone must be a string such as 'Europe/Berlin', or None"),
    ({"state": [1, 2]}, "state must be a dict (a JSON object), or None for {}; got list"),
    ({"enabled": "yes"}, "enabled must be True or False; got str 'yes'"),
    ({"update": 1}, "update must be True or False"),
    ({"queue": 5}, "queue must be a string"),
])
def test_arguments_of_the_wrong_type_say_what_to_pass(options, message):
    with pytest.raises(TypeError) as info:
        register_schedule("bad", Heartbeat, **{"period": MIN, **options})
    assert message in str(info.value)
    assert not Schedule.objects.exists()


def test_the_procedure_is_a_class_or_a_type_name():
    with pytest.raises(TypeError, match="the class, not an instance"):
        register_schedule("bad", Heartbeat({}), period=MIN)
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        register_schedule(" ", Heartbeat, period=MIN)


def test_a_zoneinfo_is_taken_by_its_name():
    from zoneinfo import ZoneInfo

    s = make("berlin", cron="0 3 * * *", timezone=ZoneInfo("Europe/Berlin"))
    assert s.timezone == "Europe/Berlin"


# -- stored anyway: the others tick, the error is recorded on it ----------------------------------


def broken_set() -> dict[str, Schedule]:
    zone, overflow, gone = make("zone", cron="* * * * *", timezone="Europe/Berlin"), make("overflow"), make("gone")
    store_past_validation(zone, timezone="Mars/Olympus")  # a worker whose tzdata lacks the zone sees this
    store_past_validation(overflow, period=HUGE)
    store_past_validation(gone, procedure="gone.Removed")
    return {"zone": zone, "overflow": overflow, "gone": gone}


def test_one_pass_ticks_the_healthy_schedules_in_one_batch_and_records_each_broken_one(caplog):
    bad = broken_set()
    healthy = [make(f"ok-{i}") for i in range(3)]

    with CaptureQueriesContext(connection) as captured:
        report = tick(T0)

    assert (report.schedules, report.started) == (3, 3)
    inserts = [q["sql"] for q in captured if q["sql"].startswith("INSERT") and "procedurerun" in q["sql"]]
    assert len(inserts) == 1, "the healthy schedules' runs are still one INSERT"
    assert sorted(e.split(":")[0] for e in report.errors) == ["gone", "overflow", "zone"]
    for s in healthy:
        assert (fresh(s).active_runs, fresh(s).next_tick_at, fresh(s).last_error) == (1, T0 + MIN, "")
    zone, overflow, gone = (fresh(bad[n]) for n in ("zone", "overflow", "gone"))
    assert zone.last_error == ("time zone 'Mars/Olympus' is not in this process's time zone data: install the "
                               "tzdata package (pip install tzdata) where the workers run, or change the "
                               "schedule's timezone")
    assert overflow.last_error.startswith("a tick time is past what can be stored")
    assert gone.last_error.startswith("no procedure class is registered as 'gone.Removed'")
    for s in (zone, overflow, gone):
        assert s.last_error_at == T0 and s.next_tick_at == T0 and s.active_runs == 0  # left due, unchanged
    assert caplog.text.count("cannot tick") == 3


def test_a_broken_schedule_is_tried_again_later_and_a_fixed_definition_ticks_at_once():
    bad = broken_set()
    tick(T0)
    assert tick(T0 + broken.RETRY_BROKEN / 2).errors == []  # passed over meanwhile
    later = tick(T0 + broken.RETRY_BROKEN)
    assert len(later.errors) == 3 and fresh(bad["zone"]).last_error_at == T0 + broken.RETRY_BROKEN

    with clock.frozen_at(T0 + 2 * broken.RETRY_BROKEN):
        register_schedule("overflow", Heartbeat, period=MIN, update=True)
    assert fresh(bad["overflow"]).last_error == ""
    assert tick(T0 + 2 * broken.RETRY_BROKEN + timedelta(seconds=1)).started == 1


def test_a_pass_that_ticks_it_again_clears_the_error():
    s = make("flaky")
    store_past_validation(s, procedure="gone.Removed")
    tick(T0)
    store_past_validation(s, procedure=Heartbeat.type_name)  # the type is deployed again
    assert tick(T0 + broken.RETRY_BROKEN).started == 1
    assert (fresh(s).last_error, fresh(s).last_error_at) == ("", None)


def test_the_next_due_time_of_a_broken_schedule_is_its_next_try():
    s = make("gone", initial_delay=MIN)
    store_past_validation(s, procedure="gone.Removed")
    assert next_tick_due() == T0 + MIN
    tick(T0 + MIN)
    # Not the past next_tick_at: a worker waiting for the next tick would wake at once, again and again.
    assert next_tick_due() == T0 + MIN + broken.RETRY_BROKEN


@pytest.mark.postgres
def test_a_schedule_whose_values_the_database_refuses_is_recorded_and_the_batch_still_ticks():
    full = make("full")
    store_past_validation(full, skips=2**31 - 1)  # the next skip is past PostgreSQL's integer
    healthy = [make(f"ok-{i}") for i in range(3)]
    report = tick(T0 + 3 * MIN)  # three missed ticks: a skip each for every schedule

    assert (report.schedules, report.started, report.skipped) == (3, 3, 9)
    assert report.errors and report.errors[0].startswith("full: ")
    assert "out of range" in fresh(full).last_error and fresh(full).skips == 2**31 - 1
    for s in healthy:
        assert (fresh(s).skips, fresh(s).active_runs) == (3, 1)


# -- a run of a broken schedule still ends -------------------------------------------------------


def test_a_fixed_delay_run_of_a_broken_schedule_completes_and_another_can_be_cancelled():
    done_one, cancelled_one = make("d", mode="fixed_delay"), make("c", mode="fixed_delay")
    tick(T0)
    store_past_validation(done_one, period=HUGE)
    store_past_validation(cancelled_one, period=HUGE)
    run = ProcedureRun.objects.get(schedule=cancelled_one)

    result = operations.cancel(run.id, by="ops")
    assert result.changed
    drain(now=T0 + timedelta(seconds=1))

    d, c = fresh(done_one), fresh(cancelled_one)
    assert ProcedureRun.objects.get(schedule=d).status == "done"
    assert (d.runs, d.active_runs, d.next_tick_at) == (1, 0, None)
    assert (c.failures, c.active_runs) == (1, 0)
    for s in (d, c):
        assert s.last_error.startswith("a tick time is past what can be stored")
    with clock.frozen_at(T0 + MIN):
        register_schedule("d", Heartbeat, mode="fixed_delay", period=MIN, update=True)  # fixed: ticks again
    assert (fresh(done_one).next_tick_at, fresh(done_one).last_error) == (T0 + MIN, "")


def test_a_finishing_run_whose_pending_tick_cannot_start_still_ends():
    s = make("gone", missed="catch_up", max_pending=2)
    tick(T0)
    tick(T0 + MIN)  # the slot is taken: T0 + 1 min waits as a pending tick
    store_past_validation(s, procedure="gone.Removed")
    run = ProcedureRun.objects.get(schedule=s)
    operations.cancel(run.id)
    s = fresh(s)
    assert (s.active_runs, s.failures, len(s.pending_ticks)) == (0, 1, 1)  # the tick waits for a fix
    assert s.last_error.startswith("no procedure class is registered as 'gone.Removed'")
