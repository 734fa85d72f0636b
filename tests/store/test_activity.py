"""The finished counts the workers keep per minute, and the dashboard reading them beside the rows not counted."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction

from django_procedures.admin.activity import finished_per_bucket
from django_procedures.admin.dashboard import dashboard_context
from django_procedures.models import FinishedCount, ProcedureRun, Rollup
from django_procedures.store.activity import FINISHED, KEEP, begin_counting, counted_span, roll_up
from testproject.testapp.procedures import Refuses, ThreeSteps

NOW = datetime(2026, 12, 1, 10, 30, 20, tzinfo=UTC)


def finished(kind, status, at):
    handle = kind.submit({})
    ProcedureRun._writer.filter(id=handle.id).update(status=status, started_at=at - timedelta(seconds=1),
                                                     finished_at=at)
    return handle


def counts() -> dict[tuple[datetime, str, str], int]:
    return {(c.minute, c.type_name, c.status): c.count for c in FinishedCount.objects.all()}


@pytest.mark.django_db
def test_settled_minutes_are_counted_once_by_type_and_status():
    minute = datetime(2026, 12, 1, 10, 24, tzinfo=UTC)
    begin_counting(minute)
    finished(ThreeSteps, "done", minute + timedelta(seconds=5))
    finished(ThreeSteps, "done", minute + timedelta(seconds=50))
    last_failure = finished(Refuses, "failed", minute + timedelta(seconds=30))
    finished(ThreeSteps, "done", minute - timedelta(seconds=30))  # before counting began: never counted
    finished(ThreeSteps, "done", NOW - timedelta(seconds=30))  # in a minute not settled yet
    ThreeSteps.submit({})  # unfinished: never counted

    assert roll_up(NOW) is True
    assert counts() == {(minute, ThreeSteps.type_name, "done"): 2, (minute, Refuses.type_name, "failed"): 1}
    failure = FinishedCount.objects.get(status="failed")
    assert failure.last_finished_at == ProcedureRun.objects.get(id=last_failure.id).finished_at
    assert counted_span() == (minute, datetime(2026, 12, 1, 10, 29, tzinfo=UTC))  # to a minute and more ago

    assert roll_up(NOW) is False  # nothing new: nothing counted twice
    assert sum(counts().values()) == 3
    assert roll_up(NOW + timedelta(minutes=2)) is True  # the recent one has settled now
    assert sum(counts().values()) == 4


@pytest.mark.django_db
def test_counting_begins_at_the_first_call_and_never_reads_history():
    finished(ThreeSteps, "done", NOW - timedelta(hours=3))
    assert counted_span() is None
    assert roll_up(NOW) is False  # counting begins: nothing to count yet
    assert counted_span() == (datetime(2026, 12, 1, 10, 29, tzinfo=UTC),) * 2
    assert counts() == {}


@pytest.mark.django_db
def test_after_the_workers_were_away_counting_begins_again_and_old_counts_go():
    begin_counting(NOW - timedelta(hours=3))
    finished(ThreeSteps, "done", NOW - timedelta(hours=2))
    FinishedCount._writer.create(minute=NOW - KEEP - timedelta(minutes=5), type_name="x", status="done", count=1,
                                 last_finished_at=NOW - KEEP)
    assert roll_up(NOW) is True
    assert counts() == {}  # the gap is left to the dashboard's reading of the rows; the old count is gone
    assert counted_span() == (datetime(2026, 12, 1, 10, 29, tzinfo=UTC),) * 2
    status = dict(dashboard_context(NOW)["status_counts"])
    assert status["done"] == 1  # read from its row


@pytest.mark.django_db
def test_the_dashboard_reads_the_counted_minutes_and_counts_the_rest_itself():
    begin_counting(NOW - timedelta(minutes=9))
    finished(ThreeSteps, "done", NOW - timedelta(hours=2))  # before counting began: from its row
    finished(ThreeSteps, "done", NOW - timedelta(minutes=5))
    roll_up(NOW)
    # Counted minutes are read from the counts, not from the procedures: a count with no rows behind it shows.
    FinishedCount._writer.create(minute=datetime(2026, 12, 1, 10, 25, tzinfo=UTC), type_name=Refuses.type_name,
                                 status="failed", count=7, last_finished_at=NOW - timedelta(minutes=5))
    finished(ThreeSteps, "done", NOW - timedelta(seconds=10))  # after the counted minutes: from its row
    since = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert finished_per_bucket(since, NOW + timedelta(minutes=1), 900) == {
        datetime(2026, 12, 1, 8, 30, tzinfo=UTC): (1, 0), datetime(2026, 12, 1, 10, 15, tzinfo=UTC): (1, 7),
        datetime(2026, 12, 1, 10, 30, tzinfo=UTC): (1, 0)}

    context = dashboard_context(NOW)
    status = dict(context["status_counts"])
    assert (status["done"], status["failed"]) == (3, 7)
    assert [(t["type_name"], t["failed"]) for t in context["failing_types"]] == [(Refuses.type_name, 7)]
    assert (context["charts"]["day"]["done"], context["charts"]["day"]["failed"]) == (3, 7)


@pytest.mark.django_db
def test_without_counts_the_dashboard_counts_every_row_of_its_window():
    finished(ThreeSteps, "done", NOW - timedelta(hours=3))
    finished(Refuses, "failed", NOW - timedelta(hours=23))
    finished(Refuses, "failed", NOW - timedelta(hours=25))  # before the window
    assert counted_span() is None
    status = dict(dashboard_context(NOW)["status_counts"])
    assert (status["done"], status["failed"]) == (1, 1)


@pytest.mark.django_db
def test_a_minute_counted_again_replaces_its_counts():
    begin_counting(NOW - timedelta(minutes=9))
    finished(ThreeSteps, "done", NOW - timedelta(minutes=5))
    roll_up(NOW)
    Rollup._writer.filter(name=FINISHED).update(until=NOW - timedelta(minutes=9))  # the mark set back
    roll_up(NOW)
    assert list(counts().values()) == [1]


@pytest.mark.django_db
def test_counts_record_each_finish_as_it_was_and_a_finish_written_late_is_not_counted():
    """As docs/operators-guide.md says: a failure retried by hand and done later counts once as each; a finish
    whose time falls in a minute already counted (a clock frozen in the past) is left out."""
    begin_counting(NOW - timedelta(minutes=9))
    failure = finished(Refuses, "failed", NOW - timedelta(minutes=8))
    roll_up(NOW)
    ProcedureRun._writer.filter(id=failure.id).update(status="done", finished_at=NOW + timedelta(seconds=5))
    finished(ThreeSteps, "done", NOW - timedelta(minutes=7))  # written now, in a minute counted already
    roll_up(NOW + timedelta(minutes=2))
    assert {(t, s): n for (_, t, s), n in counts().items()} == {(Refuses.type_name, "failed"): 1,
                                                               (Refuses.type_name, "done"): 1}


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)
def test_a_worker_skips_the_count_while_another_holds_it():
    roll_up(NOW)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Rollup._writer.select_for_update().get(name=FINISHED)
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert holding.wait(30)
        finished(ThreeSteps, "done", NOW + timedelta(seconds=10))
        assert roll_up(NOW + timedelta(minutes=2)) is None  # not waited for: skipped
        assert counts() == {}
    finally:
        release.set()
        other.join(30)
    assert roll_up(NOW + timedelta(minutes=2)) is True
    assert sum(counts().values()) == 1
    assert connection.vendor == "postgresql"
