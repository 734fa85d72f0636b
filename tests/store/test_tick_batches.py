"""tick() writes a batch of schedules at once: one bad schedule, a tick another ticker won, many batches."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures import clock, register_schedule, signals, tick
from django_procedures.models import ProcedureRun, Schedule
from testproject.testapp.procedures import Heartbeat, KeyHolder

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def make(name: str, **options) -> Schedule:
    with clock.frozen_at(T0):
        schedule, _ = register_schedule(name, Heartbeat, period=MIN, **options)
    return schedule


def test_one_batch_skips_the_bad_schedule_and_counts_only_the_runs_it_inserted(caplog):
    bad, raced = make("bad"), make("raced")
    Schedule._writer.filter(id=bad.id).update(procedure="nope.Nope")
    tick(T0)  # "raced" gets its T0 run; then it is put back as if a second beat had not seen it yet
    ProcedureRun._writer.update(status="done")
    Schedule._writer.filter(id=raced.id).update(next_tick_at=T0, active_runs=0, last_tick_at=None)
    good = [make(f"good-{i}", state={"n": i}) for i in range(3)]

    report = tick(T0 + timedelta(seconds=30), batch_size=10)

    assert (report.schedules, report.started, report.skipped) == (4, 3, 0)
    assert len(report.errors) == 1 and report.errors[0].startswith("bad: no procedure class is registered")
    assert "cannot tick" in caplog.text
    assert ProcedureRun.objects.filter(schedule=raced, tick_at=T0).count() == 1
    rows = {s.name: s for s in Schedule.objects.all()}
    assert rows["raced"].active_runs == 0  # the run it would have started already existed
    assert rows["bad"].next_tick_at == T0 and rows["bad"].last_tick_at is None  # left as it was
    for s in good:
        row = rows[s.name]
        assert (row.active_runs, row.next_tick_at, row.last_tick_at, row.last_drift_ms) == (
            1, T0 + MIN, T0 + timedelta(seconds=30), 30_000)
        assert ProcedureRun.objects.get(schedule=s, status="ready").state == {"n": s.state["n"]}


def test_every_due_schedule_ticks_once_over_several_batches_despite_a_bad_one():
    for i in range(7):
        make(f"s{i}")
    Schedule._writer.filter(name="s3").update(procedure="nope.Nope")
    report = tick(T0, batch_size=2)
    assert (report.schedules, report.started, len(report.errors)) == (6, 6, 1)
    assert ProcedureRun.objects.count() == 6
    assert tick(T0).started == 0  # a second pass at the same time is a no-op


def test_runs_keep_their_own_state_when_python_equal_states_differ_as_json():
    one, true = make("one", state={"n": 1}), make("true", state={"n": True})
    assert tick(T0).started == 2
    assert ProcedureRun.objects.get(schedule=one).state == {"n": 1}
    assert ProcedureRun.objects.get(schedule=true).state == {"n": True}
    assert type(ProcedureRun.objects.get(schedule=true).state["n"]) is bool


def _statements_of_a_pass(count: int) -> list[str]:
    for i in range(count):
        make(f"n{count}-{i}", state={"i": i})
    with CaptureQueriesContext(connection) as captured:
        report = tick(T0, batch_size=100)
    assert report.started == count
    ProcedureRun._writer.all().delete()
    Schedule._writer.all().delete()
    return [q["sql"].split()[0] for q in captured]


@pytest.mark.postgres  # elsewhere the schedules are written back one UPDATE each
def test_a_pass_makes_the_same_statements_whatever_the_number_of_due_schedules():
    few, many = _statements_of_a_pass(2), _statements_of_a_pass(60)
    assert few == many
    # The overdue check; then one transaction (a savepoint inside the test's) that locks the due schedules,
    # inserts their runs inside a savepoint of its own, notifies the workers and writes the schedules back.
    assert many == ["SELECT", "SAVEPOINT", "SELECT", "SAVEPOINT", "INSERT", "SELECT", "UPDATE", "RELEASE",
                    "RELEASE"]


def test_scheduled_runs_carry_the_schedule_state_queue_and_the_lock_keys_it_gives():
    with clock.frozen_at(T0):
        plain, _ = register_schedule("plain", Heartbeat, period=MIN, state={"n": 1, "nested": {"a": [1, 2.5]}})
        keyed, _ = register_schedule("keyed", KeyHolder, period=MIN, queue="locks",
                                     state={"keys": [["b", "shared"], ["a", "exclusive"]]})
    assert tick(T0).started == 2
    run = ProcedureRun.objects.get(schedule=plain)
    assert (run.state, run.queue, run.step_name, run.type_name, run.tick_at, run.run_at, run.created_at) == (
        {"n": 1, "nested": {"a": [1, 2.5]}}, "default", "beat", Heartbeat.type_name, T0, T0, T0)
    assert (run.status, run.lock_keys, run.key, run.parent_id, run.depth, run.attempt) == (
        "ready", [], None, None, 0, 1)
    held = ProcedureRun.objects.get(schedule=keyed)
    assert (held.queue, held.lock_keys) == ("locks", [["a", "exclusive"], ["b", "shared"]])


def test_scheduled_runs_send_procedure_submitted_after_commit(django_capture_on_commit_callbacks):
    seen = []

    def handler(sender, **kwargs):
        seen.append(kwargs["type_name"])

    make("s")
    signals.procedure_submitted.connect(handler)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            tick(T0)
    finally:
        signals.procedure_submitted.disconnect(handler)
    assert seen == [Heartbeat.type_name]
