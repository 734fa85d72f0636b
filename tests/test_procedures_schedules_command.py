"""``manage.py procedures_schedules``: one line per schedule with its cadence, next tick and metrics."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from django_procedures import clock, register_schedule, tick
from django_procedures.store import schedules
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def table() -> list[list[str]]:
    out = StringIO()
    call_command("procedures_schedules", stdout=out)
    return [line.split("  ") for line in out.getvalue().splitlines()]


def cells(line: list[str]) -> list[str]:
    return [cell.strip() for cell in line if cell.strip()]


def test_no_schedules():
    out = StringIO()
    call_command("procedures_schedules", stdout=out)
    assert out.getvalue() == "no schedules\n"


def test_the_table_shows_each_schedule_and_its_metrics():
    with clock.frozen_at(T0):
        register_schedule("reports", Heartbeat, period=timedelta(minutes=1))
        register_schedule("nightly", Heartbeat, period=None, cron="30 2 * * *", timezone="Europe/Berlin")
    tick(T0)
    drain(now=T0 + timedelta(seconds=2))  # drain(now=T) starts and ends the run at T: it took 0 ms
    tick(T0 + timedelta(minutes=3, seconds=5))  # minute 3 starts; 1 and 2 are skips; drift from minute 1
    with clock.frozen_at(T0):
        schedules.pause("nightly", reason="holiday")

    header, *rows = table()
    assert cells(header) == ["name", "mode", "cadence", "next tick", "active", "pending", "runs", "failures", "skips",
                             "overlaps", "drift ms", "last ms", "max ms", "state", "last error"]
    nightly, reports = (cells(row) for row in rows)  # ordered by name
    assert reports == ["reports", "fixed_rate", "every 0:01:00", "2030-01-01 12:04:00", "1", "0", "1", "0", "2",
                       "0", "125000", "0", "0", "enabled", "-"]
    assert nightly[:4] == ["nightly", "fixed_rate", "cron 30 2 * * * Europe/Berlin", "2030-01-02 01:30:00"]
    assert nightly[4:] == ["0", "0", "0", "0", "0", "0", "-", "-", "-", "paused: holiday", "-"]  # never ticked
    out = StringIO()
    call_command("procedures_schedules", stdout=out)
    assert all(line == line.rstrip() for line in out.getvalue().splitlines()), "no trailing spaces"
