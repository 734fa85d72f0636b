"""Schedules saved without register_schedule (the admin, a fixture, the shell) get their first tick too."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import clock, tick
from django_procedures.models import ProcedureRun, Schedule
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.mark.parametrize(("options", "first"), [
    ({"period": MIN}, T0),
    ({"period": MIN, "initial_delay": 5 * MIN}, T0 + 5 * MIN),
    ({"period": MIN, "mode": "fixed_delay"}, T0),
    ({"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, datetime(2030, 1, 2, 1, 30, tzinfo=UTC)),
])
def test_a_schedule_created_with_the_orm_is_due_like_a_registered_one(options, first):
    with clock.frozen_at(T0):
        schedule = Schedule.objects.create(name="made-by-hand", procedure=Heartbeat.type_name, **options)
    assert schedule.next_tick_at == first
    assert tick(first).started == 1
    assert ProcedureRun.objects.filter(schedule=schedule, tick_at=first).exists()


def test_a_paused_or_explicit_first_tick_is_left_alone():
    with clock.frozen_at(T0):
        paused = Schedule.objects.create(name="paused", procedure=Heartbeat.type_name, period=MIN, enabled=False)
        chosen = Schedule.objects.create(name="chosen", procedure=Heartbeat.type_name, period=MIN,
                                         next_tick_at=T0 + 7 * MIN)
    assert paused.next_tick_at is None  # resume() makes it due
    assert chosen.next_tick_at == T0 + 7 * MIN
