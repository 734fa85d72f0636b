"""Deleting a schedule through the store: unfinished runs cancelled, finished runs kept, nothing started."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import clock, register_schedule, tick
from django_procedures.exceptions import InvalidOperation, LeaseLost
from django_procedures.models import Lease, ProcedureRun, Schedule
from django_procedures.store import operations, transitions
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_unfinished_runs_are_cancelled_and_fenced_finished_runs_kept_and_pending_ticks_dropped():
    with clock.frozen_at(T0):
        s, _ = register_schedule("doomed", Heartbeat, period=MIN, missed="catch_up", max_pending=3)
    tick(T0)
    drain(now=T0)  # the T0 run is done
    tick(T0 + MIN)
    with clock.frozen_at(T0 + MIN):
        held = claim("w", type_names=[Heartbeat.type_name], lease_seconds=300)[0]  # a worker runs it
    tick(T0 + 3 * MIN)  # the slot is taken: two ticks wait
    assert len(Schedule.objects.get(pk=s.pk).pending_ticks) == 2
    done_run = ProcedureRun.objects.get(schedule=s, tick_at=T0)

    deleted = operations.delete_schedule("doomed", by="ops")

    assert (deleted.name, deleted.cancelled, deleted.kept) == ("doomed", (held.id,), 1)
    assert not Schedule.objects.filter(pk=s.pk).exists()
    running = ProcedureRun.objects.get(id=held.id)
    assert (running.status, running.schedule_id) == ("cancelled", None)
    assert running.error == "cancelled by deleting its schedule 'doomed' (ops)"
    assert Lease.objects.get(procedure_id=held.id).outcome == "lost"
    with pytest.raises(LeaseLost):  # whatever its worker commits afterwards is dropped
        transitions.complete(held, [], {}, None)
    done_run.refresh_from_db()
    assert (done_run.status, done_run.schedule_id, done_run.tick_at) == ("done", None, T0)
    assert ProcedureRun.objects.count() == 2, "no pending tick started while the runs were cancelled"


def test_an_unknown_schedule_is_refused():
    with pytest.raises(InvalidOperation, match="no schedule 'nope'"):
        operations.delete_schedule("nope")
