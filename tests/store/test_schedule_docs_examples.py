"""The examples of docs/schedules.md, run as written (with the test app's Heartbeat as the procedure)."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import clock, register_schedule, tick
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat as BuildReport

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_reports_run_every_minute():
    with clock.frozen_at(T0):             # the schedule's first tick is T0
        schedule, _ = register_schedule("reports", BuildReport, period=timedelta(minutes=1))
    assert tick(T0).started == 1
    drain(now=T0 + timedelta(seconds=5))  # the run finishes at T0 + 5 s
    report = tick(T0 + timedelta(minutes=3, seconds=30))
    assert (report.started, report.skipped) == (1, 2)  # minute 3 runs; minutes 1 and 2 are skips
    schedule.refresh_from_db()
    assert schedule.snapshot()["runs"] == 1
