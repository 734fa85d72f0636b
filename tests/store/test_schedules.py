"""Schedules through tick(now) and drain(now): slots, policies, completion, trigger, validation."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from django_procedures import register_schedule, tick
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def make(name="beat", **options):
    from django_procedures import clock

    options.setdefault("period", MIN)
    with clock.frozen_at(T0):
        schedule, created = register_schedule(name, Heartbeat, **options)
    assert created
    return schedule


def runs(schedule):
    return list(ProcedureRun.objects.filter(schedule=schedule).order_by("tick_at").values_list("tick_at", "status"))


def test_a_rate_schedule_without_initial_delay_is_due_at_once_and_ticks_every_period():
    s = make()
    assert s.next_tick_at == T0
    report = tick(T0)
    assert report.started == 1
    drain(now=T0 + timedelta(seconds=5))
    tick(T0 + MIN)
    drain(now=T0 + MIN)
    assert runs(s) == [(T0, "done"), (T0 + MIN, "done")]
    s.refresh_from_db()
    snap = s.snapshot()
    assert (snap["runs"], snap["skips"], snap["overlaps"], snap["active_runs"]) == (2, 0, 0, 0)
    assert snap["last_elapsed_ms"] == 0  # drain(now=T) starts and finishes a run at T


def test_fixed_rate_skips_ticks_while_the_run_holds_its_slot():
    s = make()
    tick(T0)  # run 1 starts and is never drained: it holds the slot
    report = tick(T0 + 3 * MIN + timedelta(seconds=30))
    assert report.started == 0 and report.skipped == 3
    s.refresh_from_db()
    assert s.skips == 3 and s.next_tick_at == T0 + 4 * MIN
    assert s.last_drift_ms == 150_000


def test_catch_up_keeps_pending_ticks_and_starts_one_when_the_slot_frees():
    s = make(missed="catch_up", max_pending=2)
    tick(T0)
    tick(T0 + 3 * MIN)  # ticks at 1, 2, 3 min: two kept, one skipped
    s.refresh_from_db()
    assert len(s.pending_ticks) == 2 and s.skips == 1
    drain(now=T0 + 3 * MIN)  # each finishing run starts the oldest pending tick in its own final transaction
    s.refresh_from_db()
    assert runs(s) == [(T0, "done"), (T0 + MIN, "done"), (T0 + 2 * MIN, "done")]
    assert (len(s.pending_ticks), s.active_runs, s.runs) == (0, 0, 3)


def test_fixed_rate_overlap_runs_up_to_max_concurrency_and_counts_overlaps():
    s = make(mode="fixed_rate_overlap", max_concurrency=2)
    tick(T0)
    tick(T0 + MIN)
    tick(T0 + 2 * MIN)
    s.refresh_from_db()
    assert (s.active_runs, s.overlaps, s.skips) == (2, 1, 1)


def test_fixed_delay_sets_the_next_tick_when_the_run_finishes():
    s = make(mode="fixed_delay")
    tick(T0)
    s.refresh_from_db()
    assert s.next_tick_at is None
    drain(now=T0 + timedelta(seconds=40))
    s.refresh_from_db()
    assert s.next_tick_at == T0 + timedelta(seconds=40) + MIN


def test_two_tickers_never_start_a_tick_twice():
    s = make()
    tick(T0)
    ProcedureRun._writer.filter(schedule=s).update(status="done")  # free the slot by hand
    Schedule._writer.filter(id=s.id).update(next_tick_at=T0, active_runs=0)  # as if a second beat raced
    tick(T0)
    assert ProcedureRun.objects.filter(schedule=s, tick_at=T0).count() == 1


def test_trigger_now_obeys_the_bound():
    s = make(initial_delay=timedelta(hours=1))
    from django_procedures import clock

    with clock.frozen_at(T0):
        assert schedules.trigger("beat")["started"] == 1
        assert schedules.trigger("beat") == {"started": 0, "pending": 0, "skipped": 1}
    s.refresh_from_db()
    assert s.next_tick_at == T0 + timedelta(hours=1)  # a trigger does not move the cadence


def test_paused_schedules_do_not_tick_and_resume_is_due_now():
    s = make()
    schedules.pause(s)
    assert tick(T0 + MIN).started == 0
    with pytest.raises(InvalidOperation, match="is paused; resume it first"):
        schedules.trigger("beat")
    from django_procedures import clock

    with clock.frozen_at(T0 + 10 * MIN):
        schedules.resume(s)
    report = tick(T0 + 10 * MIN)
    assert (report.started, report.skipped) == (1, 0)  # one tick for the paused stretch, not a burst


def test_pause_resume_and_a_run_ending_its_schedule_record_when_the_schedule_changed():
    """updated_at ("last changed" on the dashboard's paused list) moves with what an operator sees change."""
    from django_procedures import clock

    s = make(state={"stop": "the tenant was deleted"})
    for moment, operation in ((T0 + MIN, schedules.pause), (T0 + 2 * MIN, schedules.resume)):
        with clock.frozen_at(moment):
            operation(s)
        s.refresh_from_db()
        assert s.updated_at == moment, operation.__name__
    tick(T0 + 3 * MIN)
    drain(now=T0 + 4 * MIN)  # the run stops its own schedule
    s.refresh_from_db()
    assert not s.enabled and s.updated_at == T0 + 4 * MIN


def test_a_run_past_max_run_time_is_cancelled_as_a_failure():
    from django_procedures import clock
    from django_procedures.store.claim import claim

    s = make(max_run_time=timedelta(seconds=30))
    tick(T0)
    with clock.frozen_at(T0 + timedelta(seconds=5)):  # started 5 s after its tick: the limit counts from here
        assert len(claim("w", type_names=[Heartbeat.type_name], lease_seconds=300)) == 1
    assert tick(T0 + timedelta(seconds=34)).timed_out == 0
    report = tick(T0 + MIN)
    assert report.timed_out == 1 and report.started == 1  # the slot was freed before the next tick
    s.refresh_from_db()
    assert s.failures == 1
    assert runs(s)[0] == (T0, "cancelled")


def test_a_run_can_end_its_own_schedule():
    s = make(state={"stop": "the tenant was deleted"})
    tick(T0)
    drain(now=T0)
    s.refresh_from_db()
    assert not s.enabled and "the tenant was deleted" in s.disabled_reason
    assert tick(T0 + MIN).started == 0


def test_cron_schedules_follow_their_time_zone():
    s = make(period=None, cron="0 9 * * *", timezone="Europe/Berlin")
    assert s.next_tick_at == datetime(2030, 1, 2, 8, 0, tzinfo=UTC)  # 09:00 CET


def test_register_leaves_an_existing_schedule_unchanged_unless_asked(caplog):
    make()
    from django_procedures import clock

    with clock.frozen_at(T0):
        s, created = register_schedule("beat", Heartbeat, period=2 * MIN)
    assert not created and s.period == MIN
    assert "differs from its definition in code (period)" in caplog.text
    with clock.frozen_at(T0):
        s, _ = register_schedule("beat", Heartbeat, period=2 * MIN, update=True)
    assert Schedule.objects.get(name="beat").period == 2 * MIN


def test_save_schedule_creates_with_the_first_tick_register_schedule_gives():
    from django_procedures import clock

    with clock.frozen_at(T0):
        rate, _ = schedules.save_schedule(Schedule(name="rate", procedure=Heartbeat.type_name, period=MIN))
        assert rate.pk is not None
        cron, _ = schedules.save_schedule(Schedule(name="cron", procedure=Heartbeat.type_name, cron="0 9 * * *",
                                                   timezone="Europe/Berlin"))
        paused, _ = schedules.save_schedule(Schedule(name="paused", procedure=Heartbeat.type_name, period=MIN,
                                                     enabled=False))
    assert Schedule.objects.get(name="rate").next_tick_at == T0
    assert cron.next_tick_at == datetime(2030, 1, 2, 8, 0, tzinfo=UTC)
    assert (paused.enabled, paused.disabled_reason) == (False, "created paused")


def test_save_schedule_writes_only_the_changed_definition_and_keeps_the_metrics():
    from django_procedures import clock

    s = make()
    edited = Schedule.objects.get(id=s.id)  # as the admin's form loaded it
    tick(T0)  # meanwhile: a run starts, metrics and the next tick move
    Schedule._writer.filter(id=s.id).update(skips=4)
    edited.queue, edited.state = "emails", {"to": "ops"}
    with clock.frozen_at(T0 + timedelta(seconds=5)):
        stored, changed = schedules.save_schedule(edited)
    assert changed == ["state", "queue"] and stored.pk == s.pk
    s.refresh_from_db()
    assert (s.queue, s.state, s.skips, s.active_runs, s.next_tick_at) == ("emails", {"to": "ops"}, 4, 1, T0 + MIN)

    edited.period = 2 * MIN  # a new cadence sets the next tick again
    with clock.frozen_at(T0 + timedelta(seconds=5)):
        assert schedules.save_schedule(edited)[1] == ["period"]
    s.refresh_from_db()
    assert (s.period, s.next_tick_at, s.skips) == (2 * MIN, T0 + timedelta(seconds=5), 4)


def test_save_schedule_refuses_what_clean_refuses():
    s = make()
    s.max_concurrency = 3
    with pytest.raises(ValidationError) as info:
        schedules.save_schedule(s)
    assert "run one at a time" in " ".join(info.value.message_dict["max_concurrency"])
    assert Schedule.objects.get(id=s.id).max_concurrency == 1


@pytest.mark.parametrize(("options", "field", "message"), [
    ({"period": timedelta(0)}, "period", "period must be positive; got 0 seconds"),
    ({"mode": "fixed_rate", "max_concurrency": 3}, "max_concurrency", "run one at a time"),
    ({"mode": "fixed_rate_overlap", "max_concurrency": 1}, "max_concurrency", "set max_concurrency to 2"),
    ({"missed": "catch_up", "max_pending": 0}, "max_pending", "set max_pending to 1 or more"),
    ({"period": None, "cron": "61 * * * *"}, "cron", "minute must be between 0 and 59"),
    ({"period": None, "cron": "0 * * * *", "mode": "fixed_delay"}, "cron", "fixed_delay runs a period after"),
    ({"period": None, "cron": "0 * * * *", "mode": "fixed_delay"}, "period", "fixed_delay needs a period"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
    ({"state": {"x": float("nan")}}, "state", "state['x'] is nan"),
])
def test_contradictory_schedules_are_refused_with_what_to_change(options, field, message):
    with pytest.raises(ValidationError) as info:
        register_schedule("bad", Heartbeat, **{"period": MIN, **options})
    assert message in " ".join(info.value.message_dict[field])
    assert not Schedule.objects.exists()


def test_an_unknown_procedure_type_is_refused():
    with pytest.raises(ValidationError, match=r"no procedure class is registered as 'nope\.Nope'"):
        register_schedule("bad", "nope.Nope", period=MIN)


def test_database_constraints_back_the_validation():
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Schedule._writer.create(name="x", procedure=Heartbeat.type_name, period=MIN, mode="fixed_rate",
                                max_concurrency=5)


def test_schedules_declared_in_code_are_synced_as_such_and_a_misspelt_option_is_named(monkeypatch, caplog):
    """``declare_schedule`` takes ``register_schedule``'s options; the sync marks its schedules as from code
    (an internal flag, not a keyword of the public function) and logs a declaration it cannot register."""
    from django_procedures import declare_schedule

    monkeypatch.setattr(schedules, "_declared", {})
    declare_schedule("declared", Heartbeat, period=MIN, queue="q")
    declare_schedule("misspelt", Heartbeat, perod=MIN)
    assert schedules.sync_declared() == ["declared"]
    s = Schedule.objects.get(name="declared")
    assert (s.from_code, s.queue, s.period) == (True, "q", MIN)
    assert not Schedule.objects.filter(name="misspelt").exists()
    assert "schedule 'misspelt' declared in code is invalid: unknown option 'perod'; register_schedule takes" \
        in caplog.text
