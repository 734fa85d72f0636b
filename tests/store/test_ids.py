"""Every way a procedure comes into being gives it a time-ordered (version 7) id made at that moment."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp import tasks
from testproject.testapp.procedures import Heartbeat, Parent, ThreeSteps

pytestmark = pytest.mark.django_db


@pytest.fixture
def made_now():
    """Checks that every procedure row is a version-7 id made since the test began."""
    began = time.time_ns() // 1_000_000

    def check() -> int:
        ids = list(ProcedureRun.objects.values_list("id", flat=True))
        now = time.time_ns() // 1_000_000
        for value in ids:
            assert value.version == 7, value
            assert began <= value.int >> 80 <= now, value
        return len(ids)

    return check


def test_submitted_procedures_and_their_children(made_now):
    ThreeSteps.submit()
    ThreeSteps.submit_many([{}, {}])
    Parent.submit({"fanout": 3})
    drain()
    assert made_now() == 1 + 2 + 1 + 3


def test_runs_a_schedule_starts(made_now):
    at = datetime(2030, 1, 1, tzinfo=UTC)
    with clock.frozen_at(at):
        for name in ("one", "two"):
            register_schedule(name, Heartbeat, period=timedelta(minutes=1))
    # On PostgreSQL the runs come from one INSERT ... SELECT for the batch, elsewhere from built rows.
    assert tick(at).started == 2
    assert made_now() == 2


def test_enqueued_tasks(made_now):
    tasks.add.enqueue(2, 3)
    assert made_now() == 1


@pytest.mark.postgres
def test_the_table_leaves_room_in_its_pages_for_a_claim_and_a_finish_to_stay_in_the_page():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [ProcedureRun._meta.db_table])
        assert cursor.fetchone()[0] == ["fillfactor=70"]
