"""tick() writes a batch of schedules at once: one bad schedule, a tick another ticker won, many batches."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from testproject.testapp.procedures import Heartbeat

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
